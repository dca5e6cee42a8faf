"""Metadata filters (``search(..., filters={"category": "movies"})``) as SQL over a memory's metadata.

A memory carries the metadata its session was added with, or its own once an update changed it for that memory
alone (:func:`~.editing.remark`); a session (what a delete by filters removes) carries what it was added with.
A filter is a JSON object whose conditions must all hold, in mem0's language:

* ``{"key": value}`` or ``{"key": {"eq": value}}``: equal; ``{"key": [a, b]}`` or ``{"key": {"in": [a, b]}}``:
  one of them; ``{"key": {"ne": value}}`` / ``{"key": {"nin": [a, b]}}``: none of them, or the key absent;
* ``{"key": {"gt" | "gte" | "lt" | "lte": value}}``: a number compares with numbers, a string with strings (so
  ISO days and times order as time does), a value of another type never matches; several operators in one
  object must all hold (``{"gte": 3, "lte": 5}``);
* ``{"key": {"contains": "text"}}``: a string value holding the text; ``icontains``: ignoring the case of the
  letters A to Z (the rule both databases apply alike);
* ``{"key": "*"}``: the key is present, with a value other than null;
* ``{"AND": [filter, ...]}``, ``{"OR": [filter, ...]}``: all, or at least one, of the filters;
  ``{"NOT": [filter, ...]}``: none of them.

Keys are plain names (letters, digits, ``_``, ``-``, ``.`` for a nested field), so a key never reaches SQL as
text: it is bound as a JSON path parameter. SQLite reads the field with ``json_extract``; PostgreSQL compares
``jsonb`` values, so ``True`` matches a stored ``true`` there and also a stored ``1`` in SQLite.
:func:`matcher` is the same rule for metadata already read (a queued session's).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from promem_fast.errors import InputError
from promem_fast.persistence.timeline import validity
from promem_fast.times import EXPIRES

_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_SCALAR = (str, int, float, bool)
LOGICAL = ("AND", "OR", "NOT")
SUMMARY = ('metadata conditions as a JSON object, all to hold (mem0\'s language): {"key": value}, {"key": [a, b]}, '
           '{"key": {"op": value}} with op one of eq, ne, in, nin, gt, gte, lt, lte, contains, icontains, '
           '{"key": "*"} (present), {"AND" | "OR" | "NOT": [filter, ...]}; agent_id and run_id are such keys')
"""The language in one line, for the help of every surface that takes filters."""
_RANGE = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
OPERATORS = ("eq", "ne", "in", "nin", *_RANGE, "contains", "icontains")
_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ANY = "*"


def metadata_scope(filters: Mapping[str, Any] | None, scope: tuple[str, tuple[Any, ...]],
                   alias: str = "n", *, dialect: str = "sqlite") -> tuple[str, tuple[Any, ...]]:
    """``scope`` (SQL over ``nodes {alias}`` and its parameters) narrowed to memories whose session's
    metadata meets ``filters`` (the module's language); ``dialect``: the store's (``sqlite`` or ``postgresql``)."""
    if not filters:
        return scope
    where, params = _sql(_parse(filters), alias, dialect)
    return f"{scope[0]} AND ({where})", (*scope[1], *params)


SESSIONS_AS_X = "(SELECT id, id AS session_pk, session_id, user_id, CAST(NULL AS TEXT) AS metadata FROM sessions) x"
"""The sessions as ``x``, each its own ``session_pk`` and no metadata of its own: metadata filters read a
session's metadata through ``x.session_pk``, as they do for a memory's that has none of its own."""


def _metadata(alias: str) -> str:
    """The metadata a filter reads, inside a subquery over ``sessions s``: the memory's own where an update gave
    it some (``nodes.metadata``, :func:`~.editing.remark`), else its session's."""
    return f"COALESCE({alias}.metadata, s.metadata)"


def sessions_of(user_pk: int, session: str | None, filters: Mapping[str, Any] | None, *,
                dialect: str = "sqlite") -> tuple[str, tuple[Any, ...]]:
    """SQL for the row ids of the user's session named ``session`` and/or of those whose metadata meets
    ``filters``, with its parameters (a subquery: any number of sessions, no parameter per session)."""
    where, params = metadata_scope(filters, ("x.user_id = ?", (user_pk,)), alias="x", dialect=dialect)
    if session is not None:
        where, params = f"{where} AND x.session_id = ?", (*params, session)
    return f"SELECT x.id FROM {SESSIONS_AS_X} WHERE {where}", params


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
    read = (f"{_metadata('n')}::jsonb ->> '{EXPIRES}'" if dialect == "postgresql" else
            f"json_extract({_metadata('n')}, '$.{EXPIRES}')")
    return (f"{where} AND (SELECT COALESCE({read}, '9999-12-31') FROM sessions s WHERE s.id = n.session_pk) >= ?",
            (*params, day))


def matcher(filters: Mapping[str, Any] | None) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a session's metadata meets ``filters`` (the rule :func:`metadata_scope` writes as SQL, for
    metadata already read), as a test made once for many sessions (the filters read and checked once)."""
    if not filters:
        return lambda metadata: True
    tree = _parse(filters)
    return lambda metadata: _holds(tree, metadata)


def checked(filters: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``filters`` when they are the module's language (refused by field before any work, where the work runs
    elsewhere)."""
    if filters:
        _parse(filters)
    return filters


# ------------------------------------------------------------------------------------ the language
Node = tuple[Any, ...]
"""A parsed filter: ``("AND" | "OR" | "NOT", [node, ...])`` or ``("key", key, operator, operand)``."""


def _parse(filters: Any) -> Node:
    """``filters`` checked and read into a tree of :data:`Node` (an InputError on ``filters`` names what is wrong)."""
    if not isinstance(filters, Mapping) or not filters:
        raise InputError(f"a filter is a JSON object of conditions, not {filters!r}", field="filters")
    parts: list[Node] = []
    for key, condition in filters.items():
        if key in LOGICAL:
            if not isinstance(condition, list) or not condition:
                raise InputError(f"{key} takes a non-empty list of filters", field="filters")
            parts.append((key, [_parse(item) for item in condition]))
            continue
        if key == "user_id":
            raise InputError("user_id names the user, not a condition: give it as user_id, or at the top of filters "
                             "(or in its AND)", field="filters")
        if not isinstance(key, str) or not _KEY.match(key):
            raise InputError(f"filter key {key!r} is not a plain name (letters, digits, _ - .)", field="filters")
        parts += [("key", key, op, operand) for op, operand in _conditions(key, condition)]
    return parts[0] if len(parts) == 1 else ("AND", parts)


def _conditions(key: str, condition: Any) -> list[tuple[str, Any]]:
    """The (operator, operand) pairs of one key's condition, each checked."""
    if condition == _ANY:
        return [(_ANY, None)]
    if isinstance(condition, list):
        condition = {"in": condition}
    if not isinstance(condition, Mapping):
        condition = {"eq": condition}
    if not condition:
        raise InputError(f"filter {key!r}: give a value or operators ({', '.join(OPERATORS)})", field="filters")
    for op, operand in condition.items():
        if op not in OPERATORS:
            raise InputError(f"filter {key!r}: unknown operator {op!r} (one of {', '.join(OPERATORS)})",
                             field="filters")
        if op in ("in", "nin"):
            if not (isinstance(operand, list) and operand and all(isinstance(v, _SCALAR) for v in operand)):
                raise InputError(f"filter {key!r}: {op!r} takes a non-empty list of values", field="filters")
        elif op in _RANGE:
            if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
                raise InputError(f"filter {key!r}: {op!r} compares with a number or a string", field="filters")
        elif op in ("contains", "icontains"):
            if not isinstance(operand, str):
                raise InputError(f"filter {key!r}: {op!r} looks for a string", field="filters")
        elif not isinstance(operand, _SCALAR):
            raise InputError(f"filter {key!r}: compare with a string, number or boolean", field="filters")
    return list(condition.items())


def _sql(node: Node, alias: str, dialect: str) -> tuple[str, list[Any]]:
    """The SQL of a parsed filter over ``nodes {alias}``, with its parameters."""
    if node[0] in LOGICAL:
        parts = [_sql(child, alias, dialect) for child in node[1]]
        joined = (" AND " if node[0] == "AND" else " OR ").join(f"({sql})" for sql, _ in parts)
        return (f"NOT ({joined})" if node[0] == "NOT" else joined), [p for _, params in parts for p in params]
    sql, params = _leaf(node, alias, dialect)
    return f"COALESCE({sql}, {'false' if dialect == 'postgresql' else '0'})", params  # absent: false, never NULL


def _leaf(node: Node, alias: str, dialect: str) -> tuple[str, list[Any]]:
    """One key's condition as SQL, with its parameters (NULL where the key is absent and no rule says otherwise)."""
    _, key, op, operand = node
    pg = dialect == "postgresql"
    session = f"FROM sessions s WHERE s.id = {alias}.session_pk)"
    meta = _metadata(alias)
    path: Any = key.split(".") if pg else "$." + ".".join(f'"{part}"' for part in key.split("."))
    if pg:
        value = f"(SELECT {meta}::jsonb #> ?::text[] {session}"
        kind = f"(SELECT jsonb_typeof({meta}::jsonb #> ?::text[]) {session}"
    else:
        value = f"(SELECT json_extract({meta}, ?) {session}"
        kind = f"(SELECT json_type({meta}, ?) {session}"
    mark, bind = ("?::jsonb", json.dumps) if pg else ("?", _bound)
    if op == _ANY:
        return f"{kind} <> 'null'", [path]
    if op in ("eq", "ne"):
        return (f"{value} = {mark}" if op == "eq" else f"({value} IS NULL OR {value} <> {mark})",
                [path, bind(operand)] if op == "eq" else [path, path, bind(operand)])
    if op in ("in", "nin"):
        listed = f"{value} IN ({', '.join([mark] * len(operand))})"
        return (listed if op == "in" else f"({value} IS NULL OR NOT {listed})",
                [path, *map(bind, operand)] if op == "in" else [path, path, *map(bind, operand)])
    text = isinstance(operand, str)
    if pg:
        kinds, read = ("'string'", "#>>") if text else ("'number'", "#>")
        typed = (f"(SELECT CASE WHEN jsonb_typeof({meta}::jsonb #> ?::text[]) = {kinds} "
                 f"THEN {meta}::jsonb {read} ?::text[] END {session}")
    else:
        kinds = "'text'" if text else "'integer', 'real'"
        typed = (f"(SELECT CASE WHEN json_type({meta}, ?) IN ({kinds}) THEN json_extract({meta}, ?) END "
                 f"{session}")
    if op in _RANGE:  # strings in byte order on both (PostgreSQL's collation would order them otherwise)
        if pg and text:
            return f'{typed} COLLATE "C" {_RANGE[op]} ?', [path, path, operand]
        return f"{typed} {_RANGE[op]} {mark}", [path, path, bind(operand)]
    find = "strpos" if pg else "instr"
    if op == "icontains":  # SQLite's lower() folds A to Z only, as translate() does here and _FOLD in Python
        folded = (f"translate({typed}, '{string.ascii_uppercase}', '{string.ascii_lowercase}')" if pg
                  else f"lower({typed})")
        return f"{find}({folded}, ?) > 0", [path, path, operand.translate(_FOLD)]
    return f"{find}({typed}, ?) > 0", [path, path, operand]


_MISSING = object()


def _holds(node: Node, metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` meets a parsed filter (:func:`_sql`'s rule, in Python)."""
    if node[0] in LOGICAL:
        found = [_holds(child, metadata) for child in node[1]]
        return all(found) if node[0] == "AND" else any(found) if node[0] == "OR" else not any(found)
    _, key, op, operand = node
    value: Any = metadata
    for part in key.split("."):
        value = value.get(part, _MISSING) if isinstance(value, Mapping) else _MISSING
    absent = value is _MISSING or value is None
    if op == _ANY:
        return not absent
    if op in ("ne", "nin"):
        return absent or value not in ([operand] if op == "ne" else operand)
    if absent:
        return False
    if op == "eq":
        return bool(value == operand)
    if op == "in":
        return value in operand
    if isinstance(operand, str):
        if not isinstance(value, str):
            return False
        if op == "contains":
            return operand in value
        if op == "icontains":
            return operand.translate(_FOLD) in value.translate(_FOLD)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return {"gt": value > operand, "gte": value >= operand, "lt": value < operand, "lte": value <= operand}[op]


def _bound(value: Any) -> Any:
    """A value as ``json_extract`` returns it (JSON true/false come back as 1/0)."""
    return int(value) if isinstance(value, bool) else value
