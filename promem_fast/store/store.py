"""The memory store: where extracted graphs live, are searched, answered from, updated and exported.

One SQLite file holds every tenant's users, their sessions and each session's nodes, edges and details; a
user's memory is the union of all their sessions. Search is exact inner product over the user's node
vectors (:mod:`.vectors`), answering is evaluation's QA program over the hits, and a new session's entries
that update older ones mark those as superseded (:mod:`.update`), never deleting them.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from promem_fast.config import EngineConfig
from promem_fast.errors import InputError
from promem_fast.private import shred

from . import rows
from .connection import checkpoint, integrity_errors, transaction
from .records import Hit
from .schema import StoreError, connect
from .vectors import CACHE_MIN_VECTORS, IndexKind, VectorIndex, from_blobs, resolve_kind

if TYPE_CHECKING:
    from promem_fast.backends.base import Embedder
    from promem_fast.engine import Engine
    from promem_fast.summary import RunSummary
    from promem_fast.eval.qa import RetrievalIndex
    from promem_fast.types import MemoryGraph, Session

log = logging.getLogger(__name__)

UpdateJudge = Literal["llm", "nli", "off"]

LOAD_CHUNK = 65_536
"""Vectors read from SQLite per step when an index is filled (bounds the memory a large user takes to load)."""

ADD_CHUNK = 64
"""Graphs embedded (and judged for updates) together; each is still written in its own transaction."""


class MemoryStore:
    """``MemoryStore(path)``: open (or create) the store in ``path``; a context manager.

    ``config`` chooses the embedder (and the models of update judging and answering when no engine is
    passed); ``embedder`` overrides the configured one. ``index``: ``faiss`` / ``numpy`` / ``auto``.
    ``update_judge``: how a new entry is found to update an older one (``llm`` asks the chat model,
    ``nli`` takes a contradiction by the NLI model, ``off`` keeps every entry current).
    """

    def __init__(self, path: str | Path, config: EngineConfig | None = None, *, embedder: Embedder | None = None,
                 read_only: bool = False, index: IndexKind = "auto", update_judge: UpdateJudge = "llm",
                 update_neighbours: int = 3, update_min_cosine: float = 0.5,
                 key_file: str | Path | None = None) -> None:
        self.path = Path(path)
        self.config = (config or EngineConfig()).validate()
        self.read_only = read_only
        self.update_judge = update_judge
        self.update_neighbours = update_neighbours
        self.update_min_cosine = update_min_cosine
        self._db = connect(self.path, read_only=read_only, key_file=key_file)
        self.encrypted = key_file is not None
        """An encrypted store writes no vector index files (they would hold vectors in the clear)."""
        self._embedder = embedder
        self._engine: Engine | None = None
        self._kind = resolve_kind(index)
        self._indexes: dict[int, VectorIndex] = {}
        (self._store_id,) = self._db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        self.cache_min_vectors = CACHE_MIN_VECTORS
        """Users with at least this many vectors get their index saved next to the store on close."""
        self.write_guard: Callable[[sqlite3.Connection, str, MemoryGraph], bool] | None = None
        """Asked inside each session's write transaction whether the graph is still wanted (the service
        answers no for a session whose user was deleted while it ran); None stores every graph."""
        self._lock = threading.RLock()
        """One store object may serve several threads (a web server's pool): writes and index refreshes
        take turns, so a transaction is never shared and no row enters an index twice."""

    # ------------------------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the file; large users' vector indexes are saved first for the next process to read."""
        for user_pk, index in self._indexes.items():
            if not self.encrypted and len(index) >= self.cache_min_vectors and len(index) > index.saved and self._current(user_pk, index):
                try:
                    index.save(self._index_file(user_pk), self._store_id)
                except OSError as exc:  # a cache: a store on a read-only medium just refills next time
                    log.info("vector index of user %d not saved: %s", user_pk, exc)
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._db.close()

    def _current(self, user_pk: int, index: VectorIndex) -> bool:
        """Whether ``index`` is still the user's (not removed, no nodes removed since, maybe by another
        connection): a stale one is not saved, so removed vectors never go back to disk."""
        row = self._db.execute("SELECT generation FROM users WHERE id = ?", (user_pk,)).fetchone()
        return row is not None and int(row[0]) == index.generation

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from promem_fast.backends import create

            cfg = self.config.embedder
            self._embedder = create("embedder", cfg.backend, cfg)
        return self._embedder

    def engine(self) -> Engine:
        """The store's own engine (update judging and answering when the caller passes none)."""
        if self._engine is None:
            from promem_fast.engine import Engine

            self._engine = Engine(self.config, embedder=self.embedder)
        return self._engine

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it is committed, or none of it (a crash rolls it back on reopen)."""
        if self.read_only:
            raise StoreError(f"{self.path}: the store was opened read-only")
        with transaction(self._db, self._lock) as db:
            yield db

    # ------------------------------------------------------------------------------------ ids
    def _user_pk(self, tenant: str, user: str) -> int | None:
        row = self._db.execute("SELECT u.id FROM users u JOIN tenants t ON t.id = u.tenant_id "
                               "WHERE t.name = ? AND u.name = ?", (tenant, user)).fetchone()
        return None if row is None else int(row[0])

    def _index_file(self, user_pk: int) -> Path:
        return self.path.with_name(f"{self.path.name}.vectors") / f"user-{user_pk}.npz"

    def _has_session(self, tenant: str, user: str, session_id: str) -> bool:
        return self._db.execute(
            "SELECT 1 FROM sessions s JOIN users u ON u.id = s.user_id JOIN tenants t ON t.id = u.tenant_id "
            "WHERE t.name = ? AND u.name = ? AND s.session_id = ?", (tenant, user, session_id)).fetchone() is not None

    # ------------------------------------------------------------------------------------ writing
    def add(self, graphs: Iterable[MemoryGraph], *, tenant: str = "default", engine: Engine | None = None) -> int:
        """Store the graphs (each session in one transaction); returns how many were new.

        A session already in the store is skipped (adding is idempotent). New entries are compared with the
        user's older current entries, and those they update are marked superseded (see :mod:`.update`).
        """
        stored = 0
        chunk: list[MemoryGraph] = []
        for graph in graphs:
            chunk.append(graph)
            if len(chunk) >= ADD_CHUNK:
                stored += self._add_chunk(chunk, tenant, engine)
                chunk = []
        if chunk:
            stored += self._add_chunk(chunk, tenant, engine)
        return stored

    def _add_chunk(self, graphs: list[MemoryGraph], tenant: str, engine: Engine | None) -> int:
        from .update import find_updates

        seen: set[tuple[str, str]] = set()
        fresh = []
        for graph in graphs:
            key = (graph.user, graph.session_id)
            if key not in seen and not self._has_session(tenant, graph.user, graph.session_id):
                fresh.append(graph)
            seen.add(key)
        if not fresh:
            return 0
        vectors = self._embed_graphs(fresh)
        links = find_updates(self, tenant, fresh, vectors, engine) if self.update_judge != "off" else {}
        written: dict[tuple[int, int], int] = {}
        stored = 0
        for position, (graph, block) in enumerate(zip(fresh, vectors, strict=True)):
            with self._write() as db:
                if self.write_guard is not None and not self.write_guard(db, tenant, graph):
                    continue  # cancelled (its user or session was deleted while it was extracted)
                user_pk = rows.ensure_user(db, tenant, graph.user)
                if db.execute("SELECT 1 FROM sessions WHERE user_id = ? AND session_id = ?",
                              (user_pk, graph.session_id)).fetchone():
                    continue  # another writer stored it since we looked
                try:
                    ids = rows.insert_session(db, user_pk, rows.graph_record(graph), block)
                except integrity_errors() as exc:  # e.g. two nodes with one id: the session is not stored
                    raise InputError(f"graph cannot be stored ({exc})", session_id=graph.session_id,
                                     field="nodes") from exc
                written.update({(position, local): node for local, node in ids.items()})
                for old, new_local, reason in links.get(position, []):
                    old_id = old if isinstance(old, int) else written.get(old)
                    if old_id is not None:
                        rows.supersede(db, old_id, ids[new_local], reason)
            stored += 1
        return stored

    def _embed_graphs(self, graphs: Sequence[MemoryGraph]) -> list[np.ndarray]:
        """One embedding call for every node of ``graphs``; one (nodes, dim) block per graph."""
        from promem_fast.eval.qa import memory_units

        texts = [unit.key for graph in graphs for unit in memory_units(graph)]
        matrix = np.asarray(self.embedder.embed(texts), np.float32) if texts else np.zeros((0, 1), np.float32)
        self._check_dim(matrix.shape[1] if texts else None)
        blocks, start = [], 0
        for graph in graphs:
            blocks.append(matrix[start:start + len(graph.nodes)])
            start += len(graph.nodes)
        return blocks

    def _check_dim(self, dim: int | None) -> None:
        """Vectors of one store share a dimension; a store filled by another embedder is refused."""
        if dim is None:
            return
        row = self._db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is None:
            if not self.read_only:
                self._db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('dim', ?)", (str(dim),))
        elif int(row[0]) != dim:
            raise StoreError(f"{self.path}: the store holds {row[0]}-dimensional vectors but this embedder "
                             f"gives {dim}; open it with the embedder that filled it")

    def ingest(self, sessions: Iterable[Session | dict[str, Any]], engine: Engine, *,
               tenant: str = "default") -> RunSummary:
        """Extract and store session by session (each stored as soon as it is extracted); sessions already
        in the store are skipped, so an interrupted ingest resumes where it stopped."""
        from promem_fast.io import session_from_dict

        if self._embedder is None and engine.config.embedder == self.config.embedder:
            self._embedder = engine.services.embedder

        def todo() -> Iterator[Session]:
            for item in sessions:
                session = item if not isinstance(item, dict) else session_from_dict(item)
                if not self._has_session(tenant, session.user, session.session_id):
                    yield session

        for graph in engine.extract_stream(todo()):
            self.add([graph], tenant=tenant, engine=engine)
        return engine.summary

    # ------------------------------------------------------------------------------------ reading
    def users(self, *, tenant: str = "default") -> list[str]:
        return [name for (name,) in self._db.execute(
            "SELECT u.name FROM users u JOIN tenants t ON t.id = u.tenant_id WHERE t.name = ? ORDER BY u.id",
            (tenant,))]

    def sessions(self, user: str, *, tenant: str = "default") -> list[str]:
        return [sid for (sid,) in self._db.execute(
            "SELECT s.session_id FROM sessions s JOIN users u ON u.id = s.user_id JOIN tenants t ON "
            "t.id = u.tenant_id WHERE t.name = ? AND u.name = ? ORDER BY s.id", (tenant, user))]

    def tenants(self) -> list[str]:
        return [name for (name,) in self._db.execute("SELECT name FROM tenants ORDER BY id")]

    def get_all(self, user: str, *, tenant: str = "default", history: bool = False) -> list[dict[str, Any]]:
        """Every node of the user (current ones only unless ``history``), oldest first."""
        user_pk = self._user_pk(tenant, user)
        if user_pk is None:
            return []
        where = "n.user_id = ?" + ("" if history else " AND n.superseded_by IS NULL")
        return [hit.to_dict() for hit in rows.read_hits(self._db, where, (user_pk,))]

    def search(self, user: str, query: str, k: int = 20, *, tenant: str = "default",
               history: bool = False) -> list[Hit]:
        """The ``k`` nodes of ``user`` closest to ``query`` (cosine), best first; superseded nodes only
        with ``history``."""
        user_pk = self._user_pk(tenant, user)
        if user_pk is None or k <= 0:
            return []
        vector = np.asarray(self._embed_queries([query]), np.float32)[0]
        self._check_dim(int(vector.shape[0]))
        return self.search_vector(user_pk, vector, k, history=history)

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        embedder = self.embedder
        embed = getattr(embedder, "embed_queries", embedder.embed)
        return embed(texts)

    def search_vector(self, user_pk: int, vector: np.ndarray, k: int, *, history: bool = False) -> list[Hit]:
        """Search by an already embedded (normalised) query vector."""
        index = self.index(user_pk)
        wanted = k if history else 2 * k + 8
        while True:
            ids, scores = index.search(vector, wanted)
            score_of = dict(zip(ids.tolist(), scores.tolist(), strict=True))
            found = rows.read_hits(self._db, f"n.id IN ({rows.placeholders(len(ids))})", tuple(ids.tolist()),
                                   score_of) if len(ids) else []
            hits = [h for h in found if history or h.superseded_by is None]
            if len(hits) >= k or wanted >= len(index):
                break
            wanted *= 4
        hits.sort(key=lambda h: (-(h.score or 0.0), h.node_id))
        return hits[:k]

    def index(self, user_pk: int) -> VectorIndex:
        """The user's vector index, brought up to date with SQLite (rows added since; rebuilt after removals)."""
        with self._lock:
            row = self._db.execute("SELECT generation FROM users WHERE id = ?", (user_pk,)).fetchone()
            if row is None:  # deleted by another connection since it was looked up: no memory is left
                self._indexes.pop(user_pk, None)
                return VectorIndex(self._dim(), self._kind, -1)
            (generation,) = row
            found = self._indexes.get(user_pk)
            if found is None or found.generation != generation:
                found = (not self.encrypted and VectorIndex.load(self._index_file(user_pk), self._kind, generation,
                                                                 self._dim(), self._store_id)
                         or VectorIndex(self._dim(), self._kind, generation))
                self._indexes[user_pk] = found
            cursor = self._db.execute("SELECT id, vector FROM nodes WHERE user_id = ? AND id > ? AND vector IS NOT "
                                      "NULL ORDER BY id", (user_pk, found.last_id))
            while True:
                new = cursor.fetchmany(LOAD_CHUNK)
                if not new:
                    return found
                found.add(np.array([r[0] for r in new], np.int64), from_blobs([r[1] for r in new], found.dim))

    def retrieval_index(self, session_ids: Iterable[str], *, tenant: str = "default",
                        history: bool = False) -> RetrievalIndex:
        """The QA units of these sessions (of any user of ``tenant``) with their stored vectors: what
        evaluation's answer program retrieves from, for :meth:`answer` and ``promem eval`` alike. Sessions
        the store does not hold are left out (the answer program reports them missing)."""
        from .answering import retrieval_index

        return retrieval_index(self, self._db, list(dict.fromkeys(session_ids)), tenant, history)

    def _dim(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is not None:
            return int(row[0])
        return int(getattr(self.embedder, "dim", 0) or 1)

    def answer(self, user: str, questions: Sequence[str], *, engine: Engine, tenant: str = "default",
               question_time: str | None = None) -> list[dict[str, Any]]:
        """Answer questions about ``user`` from their memory with evaluation's QA program, all questions in
        one batched engine run; each answer as a dict (prediction, the dated memories it was shown)."""
        from .answering import answer

        return answer(self, user, questions, engine, tenant, question_time)

    def history(self, node_id: int, *, tenant: str = "default") -> list[dict[str, Any]]:
        """The supersede chain through ``node_id``: every node it updated and every node that updated it
        (transitively), oldest first. A node of another tenant, or none, gives an empty list."""
        chain = {node_id}
        frontier = [node_id]
        while frontier:
            marks = rows.placeholders(len(frontier))
            linked = self._db.execute(f"SELECT old, new FROM supersedes WHERE old IN ({marks}) OR new IN ({marks})",
                                      (*frontier, *frontier)).fetchall()
            frontier = [n for pair in linked for n in pair if n not in chain]
            chain.update(frontier)
        ids = sorted(chain)
        where = (f"n.id IN ({rows.placeholders(len(ids))}) AND n.user_id IN (SELECT u2.id FROM users u2 "
                 "JOIN tenants t2 ON t2.id = u2.tenant_id WHERE t2.name = ?)")
        return [hit.to_dict() for hit in rows.read_hits(self._db, where, (*ids, tenant))]

    def graph(self, user: str, *, tenant: str = "default") -> dict[str, Any]:
        """The user's whole memory for drawing: nodes (superseded ones included, flagged), relation and
        supersede edges, and details with the node they are anchored to."""
        hits = self._hits_of(tenant, user)
        nodes = [{"id": h.node_id, "session_id": h.session_id, "text": h.text, "date": h.date,
                  "turn_id": h.turn_id, "superseded_by": h.superseded_by} for h in hits]
        edges: list[dict[str, Any]] = []
        details: list[dict[str, Any]] = []
        for h in hits:
            edges.extend({"source": h.node_id, "target": e["node_id"], "relation": e["relation"]}
                         for e in h.edges if e["direction"] == "out")
            if h.superseded_by is not None:
                edges.append({"source": h.node_id, "target": h.superseded_by, "relation": "superseded_by"})
            details.extend({"node": h.node_id, "text": text} for text in h.details)
        return {"nodes": nodes, "edges": edges, "details": details}

    def _hits_of(self, tenant: str, user: str) -> list[Hit]:
        user_pk = self._user_pk(tenant, user)
        return [] if user_pk is None else rows.read_hits(self._db, "n.user_id = ?", (user_pk,))

    # ------------------------------------------------------------------------------------ removing
    def delete(self, *, tenant: str = "default", user: str, session: str | None = None,
               node: int | None = None) -> int:
        """Remove a node, a session or a whole user (the narrowest given); returns the nodes removed.

        Nodes that the removed ones had superseded become current again.
        """
        with self._write() as db:
            user_pk = self._user_pk(tenant, user)
            if user_pk is None:
                return 0
            if node is not None:
                where, params = "user_id = ? AND id = ?", (user_pk, node)
            elif session is not None:
                where, params = ("user_id = ? AND session_pk IN (SELECT id FROM sessions WHERE user_id = ? AND "
                                 "session_id = ?)"), (user_pk, user_pk, session)
            else:
                where, params = "user_id = ?", (user_pk,)
            (count,) = db.execute(f"SELECT COUNT(*) FROM nodes WHERE {where}", params).fetchone()
            if node is not None:
                db.execute("DELETE FROM nodes WHERE user_id = ? AND id = ?", (user_pk, node))
            elif session is not None:
                db.execute("DELETE FROM sessions WHERE user_id = ? AND session_id = ?", (user_pk, session))
            else:
                db.execute("DELETE FROM users WHERE id = ?", (user_pk,))
            db.execute("UPDATE users SET generation = generation + 1 WHERE id = ?", (user_pk,))
        self._drop_index(user_pk)
        self.checkpoint()
        return int(count)

    def checkpoint(self) -> bool:
        """Move the WAL into the file and truncate it: the pages a delete replaced (which still hold the deleted
        text) leave the ``-wal`` file; secure delete has already zeroed them in the file. False when readers
        kept the WAL busy (it is then truncated by a later checkpoint)."""
        with self._lock:
            done = checkpoint(self._db)
        if not done:
            log.warning("%s: the WAL could not be truncated now (readers busy); deleted pages stay in %s-wal "
                        "until the next checkpoint", self.path, self.path.name)
        return done

    def _drop_index(self, user_pk: int) -> None:
        """Forget the user's cached index and its file: both still hold the removed vectors, and ``close``
        would otherwise save them again (a deleted user's index would stay on disk for good)."""
        with self._lock:
            self._indexes.pop(user_pk, None)
        shred(self._index_file(user_pk))

    # ------------------------------------------------------------------------------------ moving
    def export(self, path: str | Path, *, tenant: str | None = None) -> int:
        """Write the store (or one tenant) as JSONL (see :mod:`.exchange`); returns sessions written."""
        from .exchange import export_store

        with self._lock:  # one read transaction: a consistent snapshot while a writer goes on
            self._db.execute("BEGIN")
            try:
                return export_store(self._db, Path(path), tenant)
            finally:
                self._db.execute("COMMIT")

    def import_(self, path: str | Path) -> int:
        """Read an export into this store (sessions already here are skipped); returns sessions added."""
        from .exchange import import_store

        with self._write() as db:
            return import_store(db, Path(path), self._check_dim)
