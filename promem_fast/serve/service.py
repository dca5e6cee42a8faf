"""Everything one ``promem serve`` process holds: the store, the queue, the keys, the engine and its worker.

The HTTP routes (:mod:`.app`) and the MCP tools (:mod:`.mcp_tools`) both call this class with a tenant that
came from a key (or, for MCP over stdio, from the operator), so scoping lives in one place: every method
takes the tenant first and passes it to the store; none reads a tenant from request data.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from promem_fast.config import EngineConfig
from promem_fast.errors import InputError
from promem_fast.jsonl import printable
from promem_fast.serve import db
from promem_fast.private import shred
from promem_fast.serve.jobs import DEFAULT_RETENTION_S, STILL_WANTED, JobQueue
from promem_fast.serve.keys import KeyRing
from promem_fast.serve.metrics import Metrics
from promem_fast.serve.worker import EngineGate, Worker
from promem_fast.store.store import UpdateJudge
from promem_fast.types import MemoryGraph

log = logging.getLogger(__name__)


class NotFound(LookupError):
    """The tenant has no such user, memory or job (whether another tenant has one is never told)."""


class Service:
    """The memory service over one store file."""

    def __init__(self, path: str | Path, config: EngineConfig, *, update_judge: UpdateJudge = "llm",
                 key_file: str | Path | None = None, job_retention_s: float = DEFAULT_RETENTION_S) -> None:
        from promem_fast.engine import Engine
        from promem_fast.store import MemoryStore

        self.path = Path(path)
        self.config = config
        self._conns = [db.connect(self.path, key_file=key_file), db.connect(self.path, key_file=key_file)]
        self.keys = KeyRing(self._conns[0])  # each owner serialises its own connection
        self.queue = JobQueue(self._conns[1], retention_s=job_retention_s)
        self.engine = Engine(config)
        self._embedder = self.engine.services.embedder
        self._writer = MemoryStore(self.path, config, embedder=self._embedder, update_judge=update_judge,
                                   key_file=key_file)
        self._writer.write_guard = _still_wanted
        self.store = MemoryStore(self.path, config, embedder=self._embedder, update_judge=update_judge,
                                 key_file=key_file)
        """The request threads' store; a connection apart from the worker's, so they read committed sessions
        only, never one the worker is writing."""
        self.metrics = Metrics(self.queue.depth, self._engine_counts)
        self.worker = Worker(self.engine, self.queue, self.metrics, self._write)
        self.gate = EngineGate(self.worker)

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for stale in self.path.parent.glob(f".{self.path.name}.export-*"):  # left by a killed process
            shred(stale)
        self.worker.start()

    def close(self) -> None:
        self.worker.stop()
        self.store.close()
        self._writer.close()
        self.engine.close()
        for conn in self._conns:
            conn.close()

    def _engine_counts(self) -> tuple[int, dict[str, int]]:
        summary = self.engine.summary
        return summary.rounds, dict(summary.backend_calls)

    def _write(self, tenant: str, graphs: list[MemoryGraph]) -> None:
        """Store finished sessions. The store skips a session it already has, so one run again after a crash
        between the store's commit and the queue's still leaves exactly one graph. Update judging runs on
        the worker's own engine (this is called on the worker's thread, between its rounds)."""
        self._writer.add(graphs, tenant=tenant, engine=self.engine)

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
        return (self.queue.submit(tenant, user, good) if good else None), rejected

    def job(self, tenant: str, job_id: str) -> dict[str, Any]:
        found = self.queue.status(tenant, job_id)
        if found is None:
            raise NotFound("job")
        return found

    def users(self, tenant: str) -> list[str]:
        return list(self.store.users(tenant=tenant))

    def _user(self, tenant: str, user: str) -> str:
        """``user`` when the tenant has them (one indexed lookup, not the tenant's whole user list), else 404."""
        if self.store._user_pk(tenant, user) is None:
            raise NotFound("user")
        return user

    def memories(self, tenant: str, user: str, *, history: bool = False) -> list[dict[str, Any]]:
        return [_plain(m) for m in self.store.get_all(self._user(tenant, user), tenant=tenant, history=history)]

    def memory(self, tenant: str, user: str, node_id: int) -> dict[str, Any]:
        """One memory with its versions; only found among the tenant's user's own nodes."""
        name = self._user(tenant, user)
        chain = [_plain(h) for h in self.store.history(node_id, tenant=tenant)]
        for item in chain:
            if item["id"] == node_id and item["user"] == name:
                return {**item, "history": chain}
        raise NotFound("memory")

    def sessions(self, tenant: str, user: str) -> list[str]:
        return list(self.store.sessions(self._user(tenant, user), tenant=tenant))

    def delete(self, tenant: str, user: str, *, session: str | None = None, node: int | None = None) -> int:
        """Remove a memory, a session or a user; returns the memories removed. Deleting a session or a user
        also cancels its queued and running extraction and removes its job records (so nothing comes back
        when a running session finishes); 404 only when there was neither memory nor work to remove."""
        if node is not None:
            self.memory(tenant, user, node)
            # what the removed memory had replaced is judged again on the worker's engine
            return int(self.store.delete(tenant=tenant, user=user, node=node, engine=self.gate))
        cancelled = self.queue.cancel(tenant, user, session)
        stored = self.store._user_pk(tenant, user) is not None and (
            session is None or session in self.store.sessions(user, tenant=tenant))
        if not stored and not cancelled:
            raise NotFound("session" if session is not None else "user")
        if not stored:
            return 0
        return int(self.store.delete(tenant=tenant, user=user, session=session, engine=self.gate))

    def search(self, tenant: str, user: str, query: str, k: int) -> list[dict[str, Any]]:
        return [_plain(h) for h in self.store.search(self._user(tenant, user), query, k, tenant=tenant)]

    def answer(self, tenant: str, user: str, questions: list[str]) -> list[dict[str, Any]]:
        name = self._user(tenant, user)
        return list(self.store.answer(name, questions, engine=self.gate, tenant=tenant))

    def graph(self, tenant: str, user: str) -> dict[str, Any]:
        return dict(self.store.graph(self._user(tenant, user), tenant=tenant))

    def export(self, tenant: str) -> BinaryIO:
        """The tenant's export as an open file that no folder lists: it is written beside the store (the
        operator chose that disk for private data; /tmp may be shared or in RAM), 0600, and unlinked
        before it is sent, so it is gone whenever the client goes away or the process dies."""
        handle, name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.export-", suffix=".jsonl")
        os.close(handle)
        target = Path(name)
        try:
            self.store.export(target, tenant=tenant)
            reader = open(target, "rb")
        finally:
            target.unlink(missing_ok=True)
        return reader


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


def _still_wanted(conn: sqlite3.Connection, tenant: str, graph: MemoryGraph) -> bool:
    """The writer's guard: a graph is stored only while its claimed queue row is there (see ``STILL_WANTED``)."""
    return conn.execute(STILL_WANTED, (tenant, graph.user, graph.session_id)).fetchone() is not None


def _plain(item: Any) -> dict[str, Any]:
    """A store result as JSON-able data (hits have ``to_dict``, the rest already are dicts)."""
    return item.to_dict() if hasattr(item, "to_dict") else dict(item)
