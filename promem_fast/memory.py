"""``Memory``: the front door for a program that keeps a memory of its users (extract, store, search, answer).

One object over one store file, with the verbs and result shapes that the HTTP API, the Python client, the
CLI and MCP use as well::

    from promem_fast import Memory

    with Memory("memory.db", profile="cpu") as memory:
        memory.add([{"role": "user", "content": "I moved to Denver last week."},
                    {"role": "assistant", "content": "How is Denver?"}], user_id="tom", date="2024-03-02")
        memory.search("Where does Tom live?", user_id="tom")
        memory.search("Where did Tom live?", user_id="tom", as_of="2024-02-01")
        memory.answer("Where did Tom live in January?", user_id="tom", as_of="2024-01-31")

Result shapes (every time ISO 8601, every memory named by one ``id``):

*memory* (``search``, ``get_all``, ``history``'s nodes)::

    {"id": 17,                             # the memory's id; history() and delete() take it
     "memory": "Tom lives in Denver.",      # the text
     "user_id": "tom",
     "session_ids": ["s2", "s3"],           # every session that said it, first the one that said it first
     "valid_from": "2024-03-02T10:00:00",   # when it was said (null: undated)
     "valid_until": null,                   # when a newer memory replaced it (the newer one's valid_from)
     "recorded_at": "2026-12-03T13:40:00Z", # when the store received it
     "superseded_by": null,                 # id of the memory that replaced it
     "reason": null,                        # why it was replaced (the update judge's words)
     "score": 0.81,                         # cosine with the query (search only, else null)
     "details": ["Denver"],                 # details anchored to it
     "links": [{"relation": "temporal", "direction": "out", "id": 18, "memory": "..."}]}

*add*: ``{"user_id", "session_id", "added": bool (false: the store had the session), "results": [event]}``
with one event per memory the session gave::

    {"id": 21, "memory": "...", "event": "add" | "update" | "duplicate",
     "replaces": [17],      # "update": the memories it superseded
     "duplicate_of": null,  # "duplicate": the memory it was merged into (which now lists this session)
     "reason": "..."}

*answer*: ``{"question", "answer" (null when the model failed), "as_of", "error", "memories": [{"id",
"memory", "session_id", "day", "score"}]}`` (the memories the answerer was shown, in the order shown).

*history*: ``{"id", "nodes": [memory...] (oldest first), "edges": [{"old", "new", "kind": "update" |
"duplicate", "reason"}]}``: the replacement graph through the memory (two facts replaced by one are two
edges into one node, not a chain).

*delete*: ``{"deleted": n}`` memories removed; what they had replaced or merged is judged again, so the
memory is exactly as if they had never been added.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promem_fast import shapes
from promem_fast.config import EngineConfig
from promem_fast.errors import InputError

if TYPE_CHECKING:
    from promem_fast.engine import Engine
    from promem_fast.store.store import MemoryStore, UpdateJudge
    from promem_fast.types import Session

class Memory:
    """``Memory(path, profile="cpu")``: a memory store at ``path`` (an SQLite file, or a ``postgresql://``
    URL; ``None``: ``$PROMEM_DB_URL``) with the engine of ``profile`` (or ``config``) that extracts sessions,
    judges updates and answers; a context manager."""

    def __init__(self, path: str | Path | None, *, profile: str = "cpu", config: EngineConfig | None = None,
                 tenant: str = "default", update_judge: UpdateJudge = "llm",
                 key_file: str | Path | None = None) -> None:
        """``key_file``: the store is encrypted with that key (see the README's data lifecycle section)."""
        from promem_fast.store import MemoryStore

        self.config = (config or EngineConfig.profile(profile)).validate()
        self.tenant = tenant
        self._profile = None if config is not None else profile
        self.store: MemoryStore = MemoryStore(path, self.config, update_judge=update_judge, profile=self._profile,
                                              key_file=key_file)
        self._engine: Engine | None = None

    # ------------------------------------------------------------------------------------ lifecycle
    @property
    def engine(self) -> Engine:
        """The engine (loaded on first use: searching needs only the embedder)."""
        if self._engine is None:
            from promem_fast.engine import Engine

            self._engine = Engine(self.config, embedder=self.store.embedder)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ verbs
    def add(self, messages: Sequence[dict[str, Any]] | dict[str, Any] | Session, *, user_id: str,
            date: str | None = None, session_id: str | None = None) -> dict[str, Any]:
        """Extract one session's memory and store it; ``messages`` is a list of ``{"role", "content"}``
        (roles ``user``/``assistant``), a session record (``promem extract``'s input) or a ``Session``."""
        session = _session(messages, user_id, date, session_id)
        sid = session.session_id
        if sid in self.store.sessions(user_id, tenant=self.tenant):
            return {"user_id": user_id, "session_id": sid, "added": False, "results": []}
        self.store.ingest([session], self.engine, tenant=self.tenant)
        return {"user_id": user_id, "session_id": sid, "added": True,
                "results": self.store.session_events(user_id, sid, tenant=self.tenant)}

    def search(self, query: str, *, user_id: str, k: int = shapes.DEFAULT_K, as_of: str | None = None,
               since: str | None = None, until: str | None = None) -> list[dict[str, Any]]:
        """The ``k`` memories closest to ``query``, best first: those current at ``as_of`` (default: now,
        the latest of each), said between ``since`` and ``until`` when given."""
        hits = self.store.search(user_id, query, k, tenant=self.tenant, as_of=as_of, since=since, until=until)
        return [hit.memory() for hit in hits]

    def answer(self, question: str, *, user_id: str, as_of: str | None = None, since: str | None = None,
               until: str | None = None) -> dict[str, Any]:
        """Answer ``question`` from the memories current at ``as_of`` (the question's own time; default
        now), each shown with its day (``2024-03-02 (Saturday)``)."""
        (reply,) = self.store.answer(user_id, [question], engine=self.engine, tenant=self.tenant, as_of=as_of,
                                     since=since, until=until)
        return shapes.answer(reply)  # the shape every surface gives

    def get_all(self, *, user_id: str, history: bool = False) -> list[dict[str, Any]]:
        """Every current memory of the user, oldest first (replaced and merged ones too with ``history``)."""
        return [hit.memory() for hit in self.store.hits(user_id, tenant=self.tenant, history=history)]

    def history(self, memory_id: int) -> dict[str, Any]:
        """The replacement graph through ``memory_id`` (see the module's shapes)."""
        return self.store.history_graph(memory_id, tenant=self.tenant)

    def delete(self, memory_id: int | None = None, *, user_id: str, session_id: str | None = None
               ) -> dict[str, int]:
        """Remove one memory, one session, or (neither given) the whole user."""
        if memory_id is not None and session_id is not None:
            raise InputError("give memory_id or session_id, not both", field="memory_id")
        narrow = memory_id is not None or session_id is not None  # what comes after it is judged again
        engine = self.engine if narrow and self.store.update_judge != "off" else None
        return {"deleted": self.store.delete(tenant=self.tenant, user=user_id, session=session_id,
                                             node=memory_id, engine=engine)}


def _session(messages: Any, user_id: str, date: str | None, session_id: str | None) -> Session:
    """The session ``add`` was given, as a validated :class:`Session` of ``user_id``."""
    from promem_fast.io import session_from_dict
    from promem_fast.types import Session

    if isinstance(messages, Session):
        if messages.user != user_id:
            raise InputError(f"the session belongs to {messages.user!r}, not {user_id!r}", field="user")
        return messages
    if isinstance(messages, dict):
        record = dict(messages)
        record.setdefault("user", user_id)
    else:
        record = {"messages": list(messages), "user": user_id}
    if date is not None:
        record["timestamp"] = date
    if session_id is not None:
        record["session_id"] = session_id
    record.setdefault("session_id", uuid.uuid4().hex[:12])
    if record["user"] != user_id:
        raise InputError(f"the session belongs to {record['user']!r}, not {user_id!r}", field="user")
    return session_from_dict(record)
