"""What :meth:`Memory.add <promem_fast.memory.Memory.add>` and ``add_many`` are given, made into sessions, and the
batch add.

``add`` stores one conversation per call, so a program that brings a user's history (a chat log exported from
another tool, a dataset) and adds it turn by turn runs the engine on one session at a time: each session's model
requests wait for one another, and a GPU's batch holds one session's requests where it could hold dozens.
``add_many`` gives the engine the whole list at once, as ``promem extract`` does: the sessions extract side by
side (the driver keeps every model busy across them, :mod:`promem_fast.driver`), each is stored and judged
against older memory as soon as it and those before it are done, in the store's one order of sessions (so the
memory is the same as one ``add`` after another would make), and the engine's progress bar counts them.

One bad item never loses the others: an item that cannot be read as a conversation, or whose extraction
fails, gets its reason in its result, and every other item is stored. A model request that fails is that
session's failed step (``failed_steps``, as for ``add``); a run that stops (a backend gone) returns what it
stored, each item left with the reason.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from promem_fast.errors import InputError, PromemError
from promem_fast.times import received, said_when
from promem_fast.types import MemoryGraph, Session

if TYPE_CHECKING:
    from promem_fast.engine import Engine
    from promem_fast.store import MemoryStore


def when(date: str | None, timestamp: str | float | None) -> str | float | None:
    """When the messages were said: ``date`` or ``timestamp`` (mem0's platform's name), read with every other
    timestamp by :func:`promem_fast.io.session_from_dict` (ISO 8601, a dataset form, or Unix seconds)."""
    if date is not None and timestamp is not None:
        raise InputError("give date or timestamp, not both", field="timestamp")
    return date if timestamp is None else timestamp


def as_session(messages: Any, user_id: str, date: str | float | None, session_id: str | None,
               metadata: dict[str, Any] | None) -> Session:
    """The session ``add`` was given, as a validated :class:`Session` of ``user_id``: ``messages`` is what the
    user said (a string), a list of ``{"role", "content"}``, a session record or a ``Session``."""
    from promem_fast.io import session_from_dict

    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if isinstance(messages, Session):
        if metadata:
            messages = dataclasses.replace(messages, metadata={**messages.metadata, **metadata})
        if messages.user != user_id:
            raise InputError(f"the session belongs to {messages.user!r}, not {user_id!r}", field="user")
        return messages
    if not isinstance(messages, (dict, list, tuple)):
        raise InputError(f"give a string, a list of messages or a session record, not {type(messages).__name__}",
                         field="messages")
    record = dict(messages) if isinstance(messages, dict) else {"messages": list(messages)}
    record.setdefault("user", user_id)
    said = date if isinstance(messages, dict) else said_when(date, record["messages"])  # a record says its own
    if said is not None:
        record["timestamp"] = said
    if metadata:
        record["metadata"] = {**(record.get("metadata") or {}), **metadata}
    if session_id is not None:
        record["session_id"] = session_id
    record.setdefault("session_id", f"{received()[1]}-{uuid.uuid4().hex[:6]}")  # sorts by arrival within a second
    if record["user"] != user_id:
        raise InputError(f"the session belongs to {record['user']!r}, not {user_id!r}", field="user")
    return session_from_dict(record)


def add_many(store: MemoryStore, tenant: str, engine: Callable[[bool], Engine | None], items: Iterable[Any], *,
             user_id: str | None, metadata: dict[str, Any] | None, infer: bool, progress: bool | None
             ) -> list[dict[str, Any]]:
    """Store ``items`` (each what ``add`` takes as ``messages``; a record or ``Session`` may name its own user,
    else ``user_id``) in ``tenant`` of ``store`` (:func:`store_sessions`); one result per item, in order."""
    if isinstance(items, (str, bytes, dict, Session)) or not isinstance(items, Iterable):
        # a string would be read letter by letter, a record key by key: each a conversation of its own
        raise InputError(f"give a list of conversations, not {type(items).__name__} (one conversation: add)",
                         field="conversations")
    sessions: list[Session | None] = []
    refused: dict[int, str] = {}
    for index, item in enumerate(items):
        try:
            sessions.append(_session_of(item, user_id, metadata, infer))
        except InputError as exc:
            sessions.append(None)
            refused[index] = f"item {index}: {exc}"
    todo: dict[tuple[str, str], Session] = {}
    for session in sessions:
        key = (session.user, session.session_id) if session is not None else None
        if key is not None and key not in todo and not store.has_session(tenant, *key):
            todo[key] = session
    failed = store_sessions(store, tenant, engine, list(todo.values()), progress)
    results = []
    for index, session in enumerate(sessions):
        if session is None:
            results.append({"user_id": None, "session_id": None, "added": False, "results": [], "failed_steps": [],
                            "error": refused[index]})
            continue
        first = todo.pop((session.user, session.session_id), None) is not None  # the same session twice: once
        error = failed.get((session.user, session.session_id)) if first else None
        if first and error is None:
            results.append({**stored(store, tenant, session), "error": None})
        else:
            results.append({"user_id": session.user, "session_id": session.session_id, "added": False,
                            "results": [], "failed_steps": [],
                            "error": None if error is None else not_stored(session, error)})
    return results


def store_sessions(store: MemoryStore, tenant: str, engine: Callable[[bool], Engine | None],
                   sessions: list[Session], progress: bool | None) -> dict[tuple[str, str], BaseException]:
    """Extract ``sessions`` (none of them in the store yet) in one run of the engine (``engine(True)`` loads it,
    for the sessions that need a model; ``engine(False)``: the one loaded, if any), each stored and judged as
    soon as it and those before it are done, and store those kept as written with the embedder alone. Returns
    why each session that was not stored was not, by ``(user, session_id)``: its program's failure, or what
    stopped the run (a backend gone; ``on_error: stop``), or the store's refusal (:class:`InputError`)."""
    from promem_fast.verbatim import verbatim_graph

    failed: dict[tuple[str, str], BaseException] = {}

    def keep(graph: MemoryGraph, judge: Engine | None) -> None:
        try:
            store.add([graph], tenant=tenant, engine=judge)
        except InputError as exc:  # the session's own fault, found by the store (an unreadable expiry): it alone
            failed[(graph.user, graph.session_id)] = exc

    extracted = [s for s in sessions if s.infer]
    stopped: PromemError | None = None
    if extracted:
        running = engine(True)
        before = running.on_session_error
        running.on_session_error = lambda session, exc: failed.setdefault((session.user, session.session_id), exc)
        try:
            for graph in running.extract_stream(extracted, progress=progress):
                keep(graph, running)
        except PromemError as exc:
            stopped = exc
        finally:
            running.on_session_error = before
    if stopped is None:
        for session in sessions:
            if not session.infer:  # no model: the embedder alone (the engine judges what they reopen, if any)
                keep(verbatim_graph(session), engine(False))
    else:
        for s in sessions:
            if (s.user, s.session_id) not in failed and not store.has_session(tenant, s.user, s.session_id):
                failed[(s.user, s.session_id)] = stopped
    return failed


def stored(store: MemoryStore, tenant: str, session: Session) -> dict[str, Any]:
    """``add``'s result for a session it stored: what each memory did and the steps that failed."""
    return {"user_id": session.user, "session_id": session.session_id, "added": True,
            "results": store.session_events(session.user, session.session_id, tenant=tenant),
            "failed_steps": store.session_failures(session.user, session.session_id, tenant=tenant)}


def not_stored(session: Session, cause: BaseException) -> str:
    """Why a session was not stored, as ``add`` raises it and ``add_many`` reports it."""
    return f"session {session.session_id!r} of {session.user!r} was not stored: {type(cause).__name__}: {cause}"


def _session_of(item: Any, user_id: str | None, metadata: dict[str, Any] | None, infer: bool) -> Session:
    """One item of ``add_many`` as a session of its own user (a record's ``user``, a ``Session``'s), else
    ``user_id``."""
    named = item.user if isinstance(item, Session) else item.get("user") if isinstance(item, dict) else None
    user = named or user_id
    if user is None:
        raise InputError("give user_id, or a user in the record", field="user_id")
    session = as_session(item, user, None, None, metadata)
    return session if infer else dataclasses.replace(session, infer=False)
