"""Everything one ``promem serve`` process holds: the store, the queue, the keys, the engine and its worker.

The HTTP routes (:mod:`.app`) and the MCP tools (:mod:`.mcp_tools`) both call this class with a tenant that
came from a key (or, for MCP over stdio, from the operator), so scoping lives in one place: every method
takes the tenant first and passes it to the store; none reads a tenant from request data.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from promem_fast.config import EngineConfig
from promem_fast.errors import InputError
from promem_fast.serve import db
from promem_fast.serve.jobs import JobQueue
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

    def __init__(self, path: str | Path, config: EngineConfig, *, update_judge: UpdateJudge = "llm") -> None:
        from promem_fast.engine import Engine
        from promem_fast.store import MemoryStore

        self.path = Path(path)
        self.config = config
        self._conns = [db.connect(self.path), db.connect(self.path)]  # each owner serialises its own
        self.keys = KeyRing(self._conns[0])
        self.queue = JobQueue(self._conns[1])
        self.engine = Engine(config)
        self._embedder = self.engine.services.embedder
        self._writer = MemoryStore(self.path, config, embedder=self._embedder, update_judge=update_judge)
        self.store = MemoryStore(self.path, config, embedder=self._embedder, update_judge=update_judge)
        """The request threads' store; a connection apart from the worker's, so they read committed sessions
        only, never one the worker is writing."""
        self.metrics = Metrics(self.queue.depth, self._engine_counts)
        self.worker = Worker(self.engine, self.queue, self.metrics, self._write)
        self.gate = EngineGate(self.worker)

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
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

        good: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        max_chars = self.config.pipeline.max_turn_chars
        for index, raw in enumerate(sessions):
            record = dict(raw, user=raw.get("user", user)) if isinstance(raw, dict) else raw
            try:
                if isinstance(record, dict) and record["user"] != user:
                    sid = record.get("session_id")
                    raise InputError("must match the user of the route", session_id=None if sid is None else str(sid),
                                     field="user")
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
        if node is not None:
            self.memory(tenant, user, node)
        elif session is not None and session not in self.sessions(tenant, user):
            raise NotFound("session")
        else:
            self._user(tenant, user)
        # what the removed memory had replaced is judged again on the worker's engine
        return int(self.store.delete(tenant=tenant, user=user, session=session, node=node, engine=self.gate))

    def search(self, tenant: str, user: str, query: str, k: int) -> list[dict[str, Any]]:
        return [_plain(h) for h in self.store.search(self._user(tenant, user), query, k, tenant=tenant)]

    def answer(self, tenant: str, user: str, questions: list[str]) -> list[dict[str, Any]]:
        name = self._user(tenant, user)
        return list(self.store.answer(name, questions, engine=self.gate, tenant=tenant))

    def graph(self, tenant: str, user: str) -> dict[str, Any]:
        return dict(self.store.graph(self._user(tenant, user), tenant=tenant))

    def export(self, tenant: str, path: Path) -> int:
        return int(self.store.export(path, tenant=tenant))


def _plain(item: Any) -> dict[str, Any]:
    """A store result as JSON-able data (hits have ``to_dict``, the rest already are dicts)."""
    return item.to_dict() if hasattr(item, "to_dict") else dict(item)
