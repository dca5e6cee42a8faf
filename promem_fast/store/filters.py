"""Metadata filters (``search(..., filters={"category": "movies"})``) as SQL over a memory's session.

A memory carries the metadata its session was added with. A filter is a JSON object of conditions that must
all hold: ``{"key": value}`` (equal), ``{"key": {"in": [a, b]}}`` (one of), ``{"key": {"ne": value}}`` (not
equal, or the key absent). Keys are plain names (letters, digits, ``_``, ``-``, ``.`` for a nested field), so
a key never reaches SQL as text: it is bound as a JSON path parameter. SQLite reads the field with
``json_extract``; PostgreSQL compares ``jsonb`` values (the field at the key's path against the condition's
value as JSON), so ``True`` matches a stored ``true`` there and also a stored ``1`` in SQLite.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from promem_fast.errors import InputError
from promem_fast.persistence.timeline import validity
from promem_fast.times import EXPIRES

_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_SCALAR = (str, int, float, bool)


def metadata_scope(filters: Mapping[str, Any] | None, scope: tuple[str, tuple[Any, ...]],
                   alias: str = "n", *, dialect: str = "sqlite") -> tuple[str, tuple[Any, ...]]:
    """``scope`` (SQL over ``nodes {alias}`` and its parameters) narrowed to memories whose session's
    metadata meets every condition of ``filters``; ``dialect``: the store's (``sqlite`` or ``postgresql``)."""
    where, params = scope
    if not filters:
        return scope
    clauses, values = [where], list(params)
    for key, condition in filters.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise InputError(f"filter key {key!r} is not a plain name (letters, digits, _ - .)", field="filters")
        if dialect == "postgresql":
            path: Any = key.split(".")
            field = f"(SELECT s.metadata::jsonb #> ?::text[] FROM sessions s WHERE s.id = {alias}.session_pk)"
            value, mark = json.dumps, "?::jsonb"
        else:
            path = "$." + ".".join(f'"{part}"' for part in key.split("."))
            field = f"(SELECT json_extract(s.metadata, ?) FROM sessions s WHERE s.id = {alias}.session_pk)"
            value, mark = _sql, "?"
        op, operand = _condition(key, condition)
        if op == "in":
            clauses.append(f"{field} IN ({','.join([mark] * len(operand))})")
            values += [path, *(value(v) for v in operand)]
        elif op == "ne":
            clauses.append(f"({field} IS NULL OR {field} != {mark})")
            values += [path, path, value(operand)]
        else:
            clauses.append(f"{field} = {mark}")
            values += [path, value(operand)]
    return " AND ".join(clauses), tuple(values)


SESSIONS_AS_X = "(SELECT id, id AS session_pk, session_id, user_id FROM sessions) x"
"""The sessions as ``x``, each its own ``session_pk``: metadata filters read a session's metadata through
``x.session_pk``, as they do for a memory's."""


def sessions_of(user_pk: int, session: str | None, filters: Mapping[str, Any] | None, *,
                dialect: str = "sqlite") -> tuple[str, tuple[Any, ...]]:
    """SQL for the row ids of the user's session named ``session`` and/or of those whose metadata meets
    ``filters``, with its parameters (a subquery: any number of sessions, no parameter per session)."""
    where, params = metadata_scope(filters, ("x.user_id = ?", (user_pk,)), alias="x", dialect=dialect)
    if session is not None:
        where, params = f"{where} AND x.session_id = ?", (*params, session)
    return f"SELECT x.id FROM {SESSIONS_AS_X} WHERE {where}", params


def checked(filters: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``filters`` when every condition is one :func:`metadata_scope` takes (refused by field before any work,
    where the work runs elsewhere)."""
    metadata_scope(filters, ("1 = 1", ()))
    return filters


def visible(as_of: str | None, since: str | None, until: str | None, *, history: bool = False,
              show_expired: bool = False, dialect: str = "sqlite") -> tuple[str, tuple[Any, ...]]:
    """The memories a question sees (:func:`~promem_fast.persistence.timeline.validity`, over ``nodes n``), less
    those whose session expired (:data:`~promem_fast.times.EXPIRES`) before the question's day (``as_of``'s,
    else today's, in UTC): an expired memory is treated as one replaced at the end of its last day, so it still
    holds for a question about an earlier time and shows where replaced ones do (``history``, a window of when
    it was said), or with ``show_expired``."""
    scope = validity(as_of, since, until, history=history)
    if show_expired or (as_of is None and (history or since is not None or until is not None)):
        return scope
    return unexpired(scope, as_of[:10] if as_of is not None else today(), dialect=dialect)


def today() -> str:
    """The day expiries are compared with when no time is asked about: today in UTC, ``YYYY-MM-DD``."""
    return datetime.now(timezone.utc).date().isoformat()


def expired(metadata: Mapping[str, Any], day: str) -> bool:
    """Whether a session with this metadata has expired before ``day`` (:func:`unexpired`'s rule, for memories
    already read)."""
    last = metadata.get(EXPIRES)
    return last is not None and str(last) < day


def unexpired(scope: tuple[str, tuple[Any, ...]], day: str, *, dialect: str = "sqlite") -> tuple[str, tuple[Any, ...]]:
    """``scope`` (over ``nodes n``) narrowed to memories whose session holds on ``day``: no expiry, or an expiry
    not before it (ISO days compare as text)."""
    where, params = scope
    read = (f"s.metadata::jsonb ->> '{EXPIRES}'" if dialect == "postgresql" else
            f"json_extract(s.metadata, '$.{EXPIRES}')")
    return (f"{where} AND (SELECT COALESCE({read}, '9999-12-31') FROM sessions s WHERE s.id = n.session_pk) >= ?",
            (*params, day))


def matches(metadata: Mapping[str, Any], filters: Mapping[str, Any] | None) -> bool:
    """Whether ``metadata`` meets every condition of ``filters`` (the same rule as :func:`metadata_scope`,
    for memories already read)."""
    for key, condition in (filters or {}).items():
        value: Any = metadata
        for part in str(key).split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        op, operand = _condition(key, condition)
        if op == "in" and value not in operand or op == "ne" and value == operand or op == "eq" and value != operand:
            return False
    return True


def _condition(key: str, condition: Any) -> tuple[str, Any]:
    if isinstance(condition, Mapping):
        if len(condition) != 1 or next(iter(condition)) not in ("eq", "ne", "in"):
            raise InputError(f"filter {key!r}: give a value, {{'eq': v}}, {{'ne': v}} or {{'in': [..]}}",
                             field="filters")
        ((op, operand),) = condition.items()
        if op == "in" and not (isinstance(operand, list) and operand and all(isinstance(v, _SCALAR) for v in operand)):
            raise InputError(f"filter {key!r}: 'in' takes a non-empty list of values", field="filters")
        if op != "in" and not isinstance(operand, _SCALAR):
            raise InputError(f"filter {key!r}: compare with a string, number or boolean", field="filters")
        return op, operand
    if not isinstance(condition, _SCALAR):
        raise InputError(f"filter {key!r}: compare with a string, number or boolean", field="filters")
    return "eq", condition


def _sql(value: Any) -> Any:
    """A value as ``json_extract`` returns it (JSON true/false come back as 1/0)."""
    return int(value) if isinstance(value, bool) else value
