"""Everything one ``promem serve`` holds: the store, the queue, the keys, and the engine process with its worker.

The HTTP routes (:mod:`.app`) and the MCP tools (:mod:`.mcp_tools`) both call this class with a tenant that
came from a key (or, for MCP over stdio, from the operator), so scoping lives in one place: every method
takes the tenant first and passes it to the store; none reads a tenant from request data.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from promem_fast import shapes
from promem_fast.config import EngineConfig
from promem_fast.errors import InputError, PromemError
from promem_fast.jsonl import printable
from promem_fast.persistence.api import is_url
from promem_fast.persistence.timeline import time_window
from promem_fast.private import shred
from promem_fast.serve import db
from promem_fast.serve.batching import BatchedQueries
from promem_fast.serve.engine_process import ENGINE_PRIORITY, EnginePriority, EngineProcess
from promem_fast.serve.jobs import DEFAULT_RETENTION_S, JobQueue
from promem_fast.serve.keys import KeyRing
from promem_fast.serve.metrics import Metrics
from promem_fast.store.filters import checked
from promem_fast.store.store import UpdateJudge

log = logging.getLogger(__name__)

QUERY_THREADS = 1
"""CPU threads of the server's query embedder (unless ``embedder.n_threads`` says otherwise): one query of a few
words gains little from more, and a thread pool as wide as the cores would contend with the engine process,
which keeps them busy while it extracts."""


class NotFound(LookupError):
    """The tenant has no such user, memory or job (whether another tenant has one is never told)."""


class Service:
    """The memory service over one store file."""

    def __init__(self, path: str | Path, config: EngineConfig, *, update_judge: UpdateJudge = "llm",
                 key_file: str | Path | None = None, job_retention_s: float = DEFAULT_RETENTION_S,
                 engine_priority: EnginePriority = ENGINE_PRIORITY, job_lease_s: float | None = None) -> None:
        from promem_fast.services import Services
        from promem_fast.store import MemoryStore

        self.path = path if is_url(path) else Path(path)
        """The store: an SQLite file or a PostgreSQL URL."""
        self.config = config
        self.encrypted = key_file is not None
        self._conns = [db.connect(self.path, key_file=key_file), db.connect(self.path, key_file=key_file)]
        self.keys = KeyRing(self._conns[0])  # each owner serialises its own connection
        self.queue = JobQueue(self._conns[1], retention_s=job_retention_s)
        self._services = Services(replace(config, embedder=replace(
            config.embedder, n_threads=config.embedder.n_threads or QUERY_THREADS)))
        """Only the embedder is built here (queries to search); the LLM and the rest live in the engine
        process, which loads its own copy of the embedder for the graphs it stores."""
        self.store = MemoryStore(self.path, config, embedder=BatchedQueries(self._services.embedder),
                                 update_judge=update_judge, key_file=key_file)
        """The request threads' store; a connection apart from the worker's, so they read committed sessions
        only, never one the worker is writing. Concurrent searches embed their queries in one batch."""
        self.worker = EngineProcess(self.path, config, update_judge, key_file=key_file,
                                    job_retention_s=job_retention_s, priority=engine_priority,
                                    job_lease_s=job_lease_s)
        """The engine, its worker and writer, in a process of their own (:mod:`.engine_process`)."""
        self.metrics = Metrics(self.queue.depth, lambda: (0, {}), remote=lambda: self.worker.call("metrics"))
        self._started = False

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the engine process and wait until its models are loaded (PromemError naming the fix when
        they cannot be); a second call does nothing."""
        if self._started:
            return
        self._started = True
        if isinstance(self.path, Path):
            for stale in self.path.parent.glob(f".{self.path.name}.export-*"):  # left by a killed process
                shred(stale)
        self.worker.start()
        self.worker.wait_ready()

    def close(self) -> None:
        self.worker.stop()
        self.queue.close()
        self.store.close()
        self._services.close()
        for conn in self._conns:
            conn.close()

    # ------------------------------------------------------------------------------ verbs
    def submit(self, tenant: str, user: str, sessions: list[Any]) -> tuple[str | None, list[dict[str, Any]]]:
        """Queue the valid sessions of one request as a job; the others come back as rejections naming the
        session index, id and field. The job id is None when every session was rejected."""
        from promem_fast.io import session_from_dict

        twins = _duplicates(sessions)
        if twins:  # which copy is meant is not ours to guess: the whole request is refused
            return None, twins
        good: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        max_chars = self.config.pipeline.max_turn_chars
        for index, raw in enumerate(sessions):
            record = dict(raw, user=raw.get("user", user)) if isinstance(raw, dict) else raw
            try:
                if isinstance(record, dict) and record["user"] != user:
                    sid = record.get("session_id")
                    raise InputError("must match the user of the route",
                                     session_id=None if sid is None else printable(str(sid)), field="user")
                session_from_dict(record, max_turn_chars=max_chars)
            except InputError as exc:
                where = f"sessions[{index}]" + (f".{exc.field}" if exc.field else "")
                rejected.append({"index": index, "session_id": exc.session_id, "field": where,
                                 "error": exc.message})
                continue
            good.append(record)
        if not good:
            return None, rejected
        job = self.queue.submit(tenant, user, good)
        try:
            self.worker.wake()
        except PromemError:  # not running: the job waits in the queue for the next start
            log.warning("sessions queued while the engine process is down")
        return job, rejected

    def job(self, tenant: str, job_id: str) -> dict[str, Any]:
        found = self.queue.status(tenant, job_id)
        if found is None:
            raise NotFound("job")
        return shapes.job(found)

    def users(self, tenant: str) -> list[str]:
        return list(self.store.users(tenant=tenant))

    def _user(self, tenant: str, user: str) -> str:
        """``user`` when the tenant has them (one indexed lookup, not the tenant's whole user list), else 404."""
        if self.store.user_id(tenant, user) is None:
            raise NotFound("user")
        return user

    def memories(self, tenant: str, user: str, *, history: bool = False, filters: dict[str, Any] | None = None,
                 top_k: int | None = None, show_expired: bool = False) -> list[dict[str, Any]]:
        """The user's memories, oldest first, those whose session's metadata meets ``filters``; the first
        ``top_k`` when given (expired ones too with ``show_expired``)."""
        top_k = shapes.result_count(top_k, None, None, None)  # the rule every surface counts by
        hits = self.store.hits(self._user(tenant, user), tenant=tenant, history=history, filters=filters,
                               show_expired=show_expired)
        return [hit.memory() for hit in hits[:top_k]]

    def history(self, tenant: str, user: str, node_id: int) -> dict[str, Any]:
        """The replacement graph through ``node_id``; only found among the tenant's user's own memories."""
        name = self._user(tenant, user)
        graph = self.store.history_graph(node_id, tenant=tenant)
        if not any(m["id"] == node_id and m["user_id"] == name for m in graph["nodes"]):
            raise NotFound("memory")
        return graph

    def memory(self, tenant: str, user: str, node_id: int) -> dict[str, Any]:
        return next(m for m in self.history(tenant, user, node_id)["nodes"] if m["id"] == node_id)

    def owner(self, tenant: str, node_id: int) -> str:
        """The user of the tenant's memory ``node_id`` (current or replaced), else 404: for routes that name a
        memory by id alone, as :meth:`promem_fast.Memory.get` does."""
        from promem_fast.store.editing import one

        hit = one(self.store, node_id, tenant)
        if hit is None:
            raise NotFound("memory")
        return hit.user

    def sessions(self, tenant: str, user: str) -> list[str]:
        return list(self.store.sessions(self._user(tenant, user), tenant=tenant))

    def delete(self, tenant: str, user: str, *, session: str | None = None, node: int | None = None,
               filters: dict[str, Any] | None = None) -> int:
        """Remove a memory, a session, the sessions whose metadata meets ``filters`` or a user; returns the
        memories removed. Deleting sessions or a user also cancels their queued and running extraction and
        removes their job records (so nothing comes back when a running session finishes); 404 only when
        there was neither memory nor work to remove (a known user none of whose sessions meets the filters:
        0)."""
        if node is not None:
            self.memory(tenant, user, node)
            # what the removed memory had replaced is judged again, in the engine process
            return int(self.worker.call("delete", tenant, user, None, node, None))
        filters = filters or None
        cancelled = self.queue.cancel(tenant, user, [session] if session is not None else None, filters)
        known = self.store.user_id(tenant, user) is not None
        if filters and known:  # none of the scope can be stored now: the list is whole, their records go too
            self.queue.cancel(tenant, user, self.store.sessions(user, tenant=tenant, filters=filters))
        stored = known and (session is None or self.store.has_session(tenant, user, session))
        if not stored and not cancelled:
            raise NotFound("session" if session is not None else "user")
        return int(self.worker.call("delete", tenant, user, session, None, filters)) if stored else 0

    def search(self, tenant: str, user: str, query: str, k: int = shapes.DEFAULT_K,
               filters: dict[str, Any] | None = None, threshold: float | None = None, show_expired: bool = False,
               explain: bool = False, **when: str) -> list[dict[str, Any]]:
        """``when``: the question's time (``as_of``) and date window (refused by field before any work);
        ``filters``: metadata conditions (:mod:`promem_fast.store.filters`); ``threshold``: the least score;
        ``explain``: each memory says how it was ranked."""
        when = _window(when)  # first: a bad time is the caller's error whoever the user
        hits = self.store.search(self._user(tenant, user), query, k, tenant=tenant, filters=filters,
                                 threshold=threshold, show_expired=show_expired, explain=explain, **when)
        return [hit.memory() for hit in hits]

    def update(self, tenant: str, user: str, node_id: int, text: str | None = None,
               metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Edit the user's memory ``node_id`` (:func:`promem_fast.store.editing.edit`: new text, re-embedded, and/or
        metadata changes for it alone), in the engine process, the one writer."""
        self.memory(tenant, user, node_id)
        found = self.worker.call("update", tenant, node_id, text, metadata)
        if found is None:
            raise NotFound("memory")
        return dict(found)

    def reset(self, tenant: str) -> int:
        """Remove every user of the tenant (queued work included); returns the memories removed."""
        return sum(self.delete(tenant, user) for user in self.users(tenant))

    def answer(self, tenant: str, user: str, question: str, filters: dict[str, Any] | None = None,
               **when: str) -> dict[str, Any]:
        """The answer from the user's memories at the question's time whose session's metadata meets
        ``filters``; a bad time or filter is the caller's error, refused here rather than in the engine process."""
        when = _window(when)
        checked(filters)
        name = self._user(tenant, user)
        (reply,) = self.worker.call("answer", tenant, name, [question], when, filters or None)
        return shapes.answer(reply)

    def graph(self, tenant: str, user: str) -> dict[str, Any]:
        return dict(self.store.graph(self._user(tenant, user), tenant=tenant))

    def export(self, tenant: str) -> BinaryIO:
        """The tenant's export as an open file that no folder lists. A plain store's is written beside the
        store (the operator chose that disk for private data; /tmp may be shared or in RAM), 0600, and unlinked
        before it is sent, so it is gone whenever the client goes away or the process dies. An encrypted
        store's is never written to a disk in plain text: it is staged in memory (an anonymous memory file)."""
        if self.encrypted:
            staged = _memory_file()
            text = io.TextIOWrapper(staged, encoding="utf-8", newline="")
            self.store.export(text, tenant=tenant)
            text.flush()
            text.detach()
            staged.seek(0)
            return staged
        where = ({"dir": self.path.parent, "prefix": f".{self.path.name}.export-"} if isinstance(self.path, Path)
                 else {"prefix": ".promem.export-"})  # a database has no folder: the system's, 0600, unlinked at once
        handle, name = tempfile.mkstemp(suffix=".jsonl", **where)  # type: ignore[call-overload]
        os.close(handle)
        target = Path(name)
        try:
            self.store.export(target, tenant=tenant)
            reader = open(target, "rb")
        finally:
            target.unlink(missing_ok=True)
        return reader


def _memory_file() -> BinaryIO:
    """A file held in memory only: a Linux memfd (streamed like any file), else an in-process buffer."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("promem-export", os.MFD_CLOEXEC), "w+b")
    return io.BytesIO()


def _window(when: dict[str, str]) -> dict[str, str]:
    """The time arguments read by the one rule (:func:`~promem_fast.persistence.timeline.time_window`), so an
    unreadable time or an empty window is an :class:`InputError` naming the field."""
    read = time_window(when.get("as_of"), when.get("since"), when.get("until"))
    return {name: value for name, value in zip(("as_of", "since", "until"), read) if value is not None}


def _duplicates(sessions: list[Any]) -> list[dict[str, Any]]:
    """A rejection for every session whose id an earlier one of the same request has, naming both positions."""
    first: dict[str, int] = {}
    twins = []
    for index, raw in enumerate(sessions):
        sid = raw.get("session_id") if isinstance(raw, dict) else None
        if not isinstance(sid, (str, int)) or isinstance(sid, bool):
            continue
        sid = str(sid)
        if sid in first:
            twins.append({"index": index, "session_id": printable(sid), "field": f"sessions[{index}].session_id",
                          "error": f"duplicates sessions[{first[sid]}].session_id; each session of a request "
                                   "needs its own id"})
        else:
            first[sid] = index
    return twins


