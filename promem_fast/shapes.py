"""The one shape of memory results on every surface: the HTTP API, the Python client, the CLI's ``--json`` and MCP.

The shapes are :class:`promem_fast.Memory`'s (its module docstring lists them): a memory is
``Hit.memory()``, a history ``MemoryStore.history_graph``; what is left to cut down lives here. A store
answer carries evaluation's bookkeeping (``gold``, ``dropped_for_budget``) that a user of the memory does not
need; a job row its times as Unix seconds. :mod:`promem_fast.serve.schemas` declares the same shapes as typed
OpenAPI models. No third-party import: the CLI uses this without the serve extra.

Times are ISO 8601 everywhere: a day (``2025-03-14``) for when a memory was said, a UTC instant with offset
(``2025-03-14T09:30:00+00:00``) for when the service did something.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date, datetime, timezone
from typing import Any, TypeVar

from promem_fast.errors import InputError
from promem_fast.times import EXPIRES, dated, received
from promem_fast.types import Session

_D = TypeVar("_D", int, None)

DEFAULT_K = 10
"""Memories a search returns unless told otherwise, on every surface (the CLI, HTTP, the client, MCP), as
:class:`promem_fast.Memory`."""


def iso_instant(value: float | str | None) -> str | None:
    """A Unix time as ISO 8601 in UTC (seconds precision); strings pass as they are, ``None`` stays ``None``."""
    if value is None or isinstance(value, str):
        return value
    return datetime.fromtimestamp(float(value), timezone.utc).isoformat(timespec="seconds")


def answer(row: dict[str, Any]) -> dict[str, Any]:
    """A store answer as ``{"question", "answer", "abstained", "as_of", "error", "memories": [{"id", "memory",
    "session_id", "day", "score"}]}`` (the memories in the order the answerer was shown them); no evaluation
    fields. ``answer`` is null and ``abstained`` says why when memory holds nothing on the question."""
    return {"question": row["question"], "answer": row["prediction"], "abstained": row.get("abstained"),
            "as_of": row["as_of"], "error": row["error"], "memories": list(row["memories"])}


def job(row: dict[str, Any]) -> dict[str, Any]:
    """A job's progress with its creation time as ISO 8601."""
    return {
        "job_id": row["job_id"], "user_id": row.get("user_id", row.get("user")), "state": row["state"],
        "created": iso_instant(row.get("created")), "total": row["total"], "pending": row["pending"],
        "running": row["running"], "done": row["done"], "failed": row["failed"], "errors": list(row["errors"]),
    }


def as_sessions(data: Any, date: str | None = None, *, metadata: dict[str, Any] | None = None,
                infer: bool = True, session_id: str | None = None) -> list[dict[str, Any]]:
    """What an ``add`` was given (HTTP messages, client, MCP), as sessions (:func:`scoped`); ``session_id``
    names a conversation (so a request sent again stores it once), in place of the id made for it."""
    sessions = _sessions(data, date, infer)
    if session_id is not None:
        if len(sessions) != 1 or "messages" not in sessions[0] or not str(sessions[0].get("session_id", "")
                                                                            ).startswith("msg-"):
            raise InputError("session_id names one conversation of messages (sessions carry their own)",
                             field="session_id")
        sessions = [{**sessions[0], "session_id": session_id}]
    return scoped(sessions, metadata=metadata, infer=infer)


def scoped(sessions: list[dict[str, Any]], *, metadata: dict[str, Any] | None = None,
           infer: bool = True) -> list[dict[str, Any]]:
    """The sessions each with ``metadata`` added to its own, and marked ``"infer": false`` without ``infer``
    (kept as written, :mod:`promem_fast.verbatim`)."""
    if metadata:
        sessions = [{**s, "metadata": {**(s.get("metadata") or {}), **metadata}} for s in sessions]
    return sessions if infer else [{**s, "infer": False} for s in sessions]


KEEP: Any = object()
"""``update``'s ``expiration_date`` when not given (None is given: it removes the date)."""


def metadata_changes(metadata: Any, expiration_date: Any) -> Any:
    """An update's metadata changes: ``metadata``, with ``expiration_date`` among them unless :data:`KEEP` (a
    ``date`` as its ISO day, None: removed); checked by :func:`promem_fast.store.editing.remarked`."""
    if expiration_date is KEEP or (metadata is not None and not isinstance(metadata, dict)):
        return metadata
    if EXPIRES in (metadata or {}):
        raise InputError("give the expiration_date once, as an argument or in metadata", field="expiration_date")
    return {**(metadata or {}), EXPIRES: day_given(expiration_date)}


def day_given(value: Any) -> Any:
    """An ``expiration_date`` as given to an ``add`` or ``update``: a ``date`` as its ISO day, the rest as it is
    (the store reads and checks it, naming the field)."""
    return value.isoformat() if isinstance(value, date) else value


def with_scopes(metadata: dict[str, Any] | None, **scopes: str | None) -> dict[str, Any]:
    """``metadata`` (or filters) with mem0's scopes (``agent_id=``, ``run_id=``) added under their names: on every
    surface they are session metadata, which filters, lists and scoped deletes then match."""
    if metadata is not None and not isinstance(metadata, dict):
        raise InputError("must be a JSON object", field="metadata")
    merged = dict(metadata or {})
    for name, value in scopes.items():
        if value is None:
            continue
        if name in merged and merged[name] != value:
            raise InputError(f"{name} {value!r} and the {name} {merged[name]!r} given with it differ", field=name)
        merged[name] = value
    return merged


def user_and_filters(user_id: str | None, filters: dict[str, Any] | None, *, agent_id: str | None = None,
                     run_id: str | None = None) -> tuple[str, dict[str, Any]]:
    """The user a search names (``user_id``, or ``filters["user_id"]`` as mem0 writes it, also as one of the
    filters of a top-level ``AND``) and the metadata conditions left (``agent_id`` and ``run_id`` among them)."""
    conditions = with_scopes(filters, agent_id=agent_id, run_id=run_id)
    named = conditions.pop("user_id", None)
    both = conditions.get("AND")
    if named is None and isinstance(both, list):
        given = [c for c in both if isinstance(c, dict) and list(c) == ["user_id"]]
        if len(given) == 1:
            named = given[0]["user_id"]
            rest = [c for c in both if c is not given[0]]
            conditions = {k: v for k, v in conditions.items() if k != "AND"} | ({"AND": rest} if rest else {})
    if user_id is not None and named is not None and named != user_id:
        raise InputError(f"user_id {user_id!r} and filters user_id {named!r} differ", field="user_id")
    user = user_id if user_id is not None else named
    if not isinstance(user, str) or not user:
        raise InputError("give user_id (or filters={'user_id': ...})", field="user_id")
    return user, conditions


def result_count(top_k: int | None, limit: int | None, k: int | None, default: _D) -> int | _D:
    """How many results were asked for, by whichever of mem0's names."""
    given = [n for n in (top_k, limit, k) if n is not None]
    if len(given) > 1:
        raise InputError("give one of top_k, limit and k", field="top_k")
    if given and (isinstance(given[0], bool) or not isinstance(given[0], int) or given[0] < 0):
        raise InputError(f"must be a whole number of memories, not {given[0]!r}", field="top_k")
    return given[0] if given else default


def _sessions(data: Any, date: str | None, infer: bool) -> list[dict[str, Any]]:
    """A conversation (messages with ``role`` and ``content``) becomes one session. Its id is made once, where
    the request is made (the client's, or the server's for a bare request), so a request sent again stores it
    once: with a date (or messages that carry their own times), a digest of its messages, times and form, so
    the same conversation at the same time is one session; without one it was said when it arrives
    (:func:`promem_fast.times.received`), and its id begins with that arrival to the microsecond, so the same
    words said again later are a new session, the newer one, and conversations that arrive within one second
    keep their order."""
    if isinstance(data, Session):
        return [data.to_dict()]
    if isinstance(data, dict):
        return [dict(data)]
    if isinstance(data, str):  # what the user said, as mem0's add takes it
        data = [{"role": "user", "content": data}]
    items = [s.to_dict() if isinstance(s, Session) else s for s in data]
    wrong = next((i for i, s in enumerate(items) if not isinstance(s, dict)), None)
    if wrong is not None:
        raise InputError(f"item {wrong} is not an object: give sessions, or messages with role and content",
                         field="messages")
    if items and all(isinstance(m, dict) and "role" in m and "content" in m for m in items):
        said = [items, date] if infer else [items, date, "verbatim"]  # ids of extracted ones stay as they were
        digest = hashlib.sha256(json.dumps(said, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        if dated(date, items):
            return [{"session_id": f"msg-{digest}", "messages": items,
                     **({"timestamp": date} if date is not None else {})}]
        kept, arrival = received()
        return [{"session_id": f"msg-{arrival}-{digest[:8]}", "messages": items, "timestamp": kept}]
    return [dict(s) for s in items]

