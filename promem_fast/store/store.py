"""The memory store: where extracted graphs live, are searched, answered from, updated and exported.

The rows live in a persistence backend (:mod:`promem_fast.persistence`: one SQLite file, or PostgreSQL with
pgvector) holding every tenant's users, their sessions and each session's nodes, edges and details; a
user's memory is the union of all their sessions. Search is by cosine over the user's node vectors
(:meth:`~promem_fast.persistence.api.Persistence.nearest`), answering is evaluation's QA program over the
hits, and a new session's entries are judged against the user's older memories (:mod:`.update`), in one
canonical order (:mod:`.ordering`):
an update marks the older one superseded (kept, with the time it held, for questions about the past), a
duplicate is merged into the memory it repeats. The store records the embedder that filled it
(:mod:`promem_fast.persistence.identity`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import numpy as np

from promem_fast.config import EngineConfig
from promem_fast.persistence import rows
from promem_fast.persistence.api import Database, resolve_location
from promem_fast.persistence.connection import StoreError
from promem_fast.persistence.hits import Hit
from promem_fast.persistence.opening import open_persistence
from promem_fast.persistence.vectors import IndexKind

from .filters import SESSIONS_AS_X, metadata_scope, sessions_of, visible

if TYPE_CHECKING:
    from promem_fast.backends.base import Embedder
    from promem_fast.engine import Engine
    from promem_fast.run_summary import RunSummary
    from promem_fast.types import MemoryGraph, Session

    from .qa import RetrievalIndex

log = logging.getLogger(__name__)

UpdateJudge = Literal["llm", "nli", "off"]

ADD_CHUNK = 64
"""Graphs written (each in its own transaction, embedded in its own call) before the pending ones are judged."""


class MemoryStore:
    """``MemoryStore(path)``: open (or create) the store in ``path`` (an SQLite file) or at a
    ``postgresql://`` URL (default: ``$PROMEM_DB_URL``); a context manager.

    ``config`` chooses the embedder (and the models of update judging and answering when no engine is
    passed); ``embedder`` overrides the configured one. ``index``: ``faiss`` / ``numpy`` / ``auto``.
    ``update_judge``: who says whether a new entry adds, updates or repeats an older one (``llm`` the chat
    model, ``nli`` the NLI model, ``off`` nobody: all stay current); ``update_lookahead``: pending sessions of
    a user judged per engine run (default by chat backend, :func:`.ordering.lookahead`).
    """

    def __init__(self, path: str | Path | None, config: EngineConfig | None = None, *, embedder: Embedder | None = None,
                 read_only: bool = False, index: IndexKind = "auto", update_judge: UpdateJudge = "llm",
                 update_neighbours: int = 3, update_min_cosine: float = 0.5, profile: str | None = None,
                 update_lookahead: int | None = None, key_file: str | Path | None = None) -> None:
        from promem_fast.persistence.identity import adopt

        from .ordering import lookahead

        self.config = (config or EngineConfig()).validate()
        self.profile = profile
        self.read_only = read_only
        self.update_judge = update_judge
        self.update_neighbours = update_neighbours
        self.update_min_cosine = update_min_cosine
        self.update_lookahead = max(1, update_lookahead or lookahead(self.config.llm.backend))
        self.db = open_persistence(resolve_location(path), read_only=read_only, key_file=key_file, index=index,
                                   search_approximate_min=self.config.search_approximate_min,
                                   pg_ef_search=self.config.pg_ef_search)
        """Where the rows live (:class:`~promem_fast.persistence.api.Persistence`)."""
        self._embedder = embedder
        self._loading = threading.Lock()
        self._engine: Engine | None = None
        try:
            self.config = adopt(self.db, self.location, self.config, embedder, profile)
        except StoreError:
            self.db.close()
            raise
        self.write_guard: Callable[[Database, str, MemoryGraph], bool] | None = None
        """Asked in each session's write transaction whether it is still wanted (see the service's delete)."""

    @property
    def location(self) -> str:
        """The store file, or the database URL without its password (what messages name)."""
        return self.db.location

    # ------------------------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the store (the SQLite backend saves large users' vector indexes first, not when read-only)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self.db.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embedder(self) -> Embedder:
        with self._loading:  # two threads asking first load one model
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

    # ------------------------------------------------------------------------------------ ids
    def user_id(self, tenant: str, user: str) -> int | None:
        """The user's row id in this store, or None when the store has no such user."""
        row = self.db.execute("SELECT u.id FROM users u JOIN tenants t ON t.id = u.tenant_id "
                              "WHERE t.name = ? AND u.name = ?", (tenant, user)).fetchone()
        return None if row is None else int(row[0])

    def has_session(self, tenant: str, user: str, session_id: str) -> bool:
        return self.db.execute(
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
        """Write the new sessions (each in its own transaction, pending judgement), then judge every pending
        session in the canonical order (:mod:`.ordering`), those a killed run left included."""
        from promem_fast.persistence.pending import pending_users

        from .ordering import settle, write_pending

        seen: set[tuple[str, str]] = set()
        fresh = []
        for graph in graphs:
            key = (graph.user, graph.session_id)
            if key not in seen and not self.has_session(tenant, graph.user, graph.session_id):
                fresh.append(graph)
            seen.add(key)
        try:
            return write_pending(self, tenant, fresh, self._embed_graphs(fresh) if fresh else [])
        finally:  # a graph refused halfway leaves the ones before it stored: they are judged all the same
            if not self.read_only:
                settle(self, pending_users(self.db), engine)

    def _embed_graphs(self, graphs: Sequence[MemoryGraph]) -> list[np.ndarray]:
        """One (nodes, dim) block per graph, each from its own embedding call.

        Not one call for all: an embedder pads the texts of a batch to its longest, and a sentence model's
        vector moves with that padding, so a memory would get another vector (and then other neighbours, other
        update links) when its session arrives beside other sessions; one call per session makes a memory's
        vector a function of its session alone, however sessions are grouped on the way in."""
        from .qa import memory_units

        blocks = []
        for graph in graphs:
            texts = [unit.key for unit in memory_units(graph)]
            block = np.asarray(self.embedder.embed(texts), np.float32) if texts else np.zeros((0, 1), np.float32)
            if texts:
                self.check_dim(block.shape[1])
            blocks.append(block)
        return blocks

    def check_dim(self, dim: int | None) -> None:
        """Vectors of one store share a dimension; the first fill records it and the embedder
        (:mod:`promem_fast.persistence.identity`)."""
        from promem_fast.persistence.identity import check_dim

        check_dim(self.db, self.location, dim, self.config, self._embedder, self.profile, self.read_only)

    def ingest(self, sessions: Iterable[Session | dict[str, Any]], engine: Engine, *,
               tenant: str = "default", progress: bool | None = None) -> RunSummary:
        """Extract and store session by session (each stored as soon as it is extracted); sessions already
        in the store are skipped, so an interrupted ingest resumes where it stopped. ``progress``: as
        :meth:`~promem_fast.engine.Engine.extract_stream`'s."""
        from promem_fast.io import session_from_dict

        if self._embedder is None and engine.config.embedder == self.config.embedder:
            self._embedder = engine.services.embedder

        def todo() -> Iterator[Session]:
            for item in sessions:
                session = item if not isinstance(item, dict) else session_from_dict(item)
                if not self.has_session(tenant, session.user, session.session_id):
                    yield session

        for graph in engine.extract_stream(todo(), progress=progress):
            self.add([graph], tenant=tenant, engine=engine)
        return engine.summary

    # ------------------------------------------------------------------------------------ reading
    def tenants(self) -> list[str]:
        """Every tenant of the store (the CLI names those that have a user another tenant was asked for)."""
        return [name for (name,) in self.db.execute("SELECT name FROM tenants ORDER BY id")]

    def users(self, *, tenant: str = "default") -> list[str]:
        return [name for (name,) in self.db.execute(
            "SELECT u.name FROM users u JOIN tenants t ON t.id = u.tenant_id WHERE t.name = ? ORDER BY u.id",
            (tenant,))]

    def sessions(self, user: str, *, tenant: str = "default", filters: dict[str, Any] | None = None) -> list[str]:
        """The user's session ids in the order they arrived; with ``filters``, those whose metadata meets
        them (:mod:`.filters`: the rule searches use)."""
        where, params = metadata_scope(filters, ("t.name = ? AND u.name = ?", (tenant, user)), alias="x",
                                       dialect=self.db.dialect)
        return [sid for (sid,) in self.db.execute(
            f"SELECT x.session_id FROM {SESSIONS_AS_X} JOIN users u ON u.id = x.user_id "
            f"JOIN tenants t ON t.id = u.tenant_id WHERE {where} ORDER BY x.id",
            params)]

    def hits(self, user: str, *, tenant: str = "default", history: bool = False,
             filters: dict[str, Any] | None = None, show_expired: bool = False) -> list[Hit]:
        """Every memory of the user as hits, oldest first: current ones (not replaced, merged or expired:
        :func:`.filters.visible`; expired ones too with ``show_expired``), or with ``history`` all of them (but
        what readers are not shown while judging goes on: :func:`~promem_fast.persistence.timeline.shown`); with
        ``filters``, those whose session's metadata meets them (:mod:`.filters`)."""
        from promem_fast.persistence.timeline import shown

        user_pk = self.user_id(tenant, user)
        if user_pk is None:
            return []
        scope = (shown(), ()) if history else visible(None, None, None, show_expired=show_expired,
                                                      dialect=self.db.dialect)
        where, params = metadata_scope(filters, scope, dialect=self.db.dialect)
        return rows.read_hits(self.db, f"n.user_id = ? AND {where}", (user_pk, *params))

    def search(self, user: str, query: str, k: int = 20, *, tenant: str = "default", history: bool = False,
               as_of: str | None = None, since: str | None = None, until: str | None = None,
               filters: dict[str, Any] | None = None, threshold: float | None = None,
               show_expired: bool = False, explain: bool = False) -> list[Hit]:
        """The ``k`` memories of ``user`` best for ``query`` by the hybrid ranking (:mod:`.hybrid`), best first.

        Without times: the current memories (also the replaced ones with ``history``). ``as_of``: those that
        held then, a replaced fact included when the time is before its replacement. ``since``/``until``:
        those said within that window. Times follow :mod:`promem_fast.times` (a bare day means all of it).
        ``filters``: conditions on the metadata of the memory's session (:mod:`.filters`). ``threshold``: only
        memories whose cosine with the query (their ``score``) is at least that, in the same order (mem0's
        minimum score): fewer than ``k`` when fewer pass. A memory whose session expired (:func:`.filters.visible`)
        shows only for an earlier ``as_of``, where replaced ones do, or with ``show_expired``. ``explain``: each hit
        says how it was ranked (``score_details``, :func:`.hybrid.search`)."""
        from promem_fast.persistence.timeline import time_window

        from .hybrid import search

        window = time_window(as_of, since, until)
        scope = metadata_scope(filters, visible(*window, history=history, show_expired=show_expired,
                                                dialect=self.db.dialect), dialect=self.db.dialect)
        user_pk = self.user_id(tenant, user)
        if user_pk is None or k <= 0:
            return []
        hits = search(self, user_pk, user, query, k, scope, window[0], explain)
        return hits if threshold is None else [h for h in hits if h.score is not None and h.score >= threshold]

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Query vectors (an embedder's query prompt, when it has one)."""
        embedder = self.embedder
        embed = getattr(embedder, "embed_queries", embedder.embed)
        return embed(texts)

    def search_vector(self, user_pk: int, vector: np.ndarray, k: int, *, history: bool = False,
                      scope: tuple[str, tuple[Any, ...]] | None = None) -> list[Hit]:
        """Search by an already embedded (normalised) query vector, among the memories ``scope`` selects
        (SQL over ``nodes n`` and its parameters, :func:`.timeline.validity`; default: the current ones)."""
        from promem_fast.persistence.timeline import validity

        where, params = scope or validity(None, None, None, history=history)
        total = self.db.vector_count(user_pk)
        wanted = 2 * k + 8
        while True:
            ids, scores = self.db.nearest(user_pk, vector, wanted)
            score_of = dict(zip(ids.tolist(), scores.tolist(), strict=True))
            kept = rows.in_scope(self.db, ids.tolist(), where, params) if score_of else []  # best first
            if len(kept) >= k or wanted >= total:
                break
            wanted *= 4
        hits = rows.read_hits(self.db, f"n.id IN ({rows.placeholders(len(kept[:k]))}) AND {where}",
                              (*kept[:k], *params), score_of)  # only the k best are read in full
        rank = {node: position for position, node in enumerate(kept)}
        return sorted(hits, key=lambda h: rank[h.node_id])

    def retrieval_index(self, session_ids: Iterable[str], *, tenant: str = "default",
                        history: bool = False, as_of: str | None = None) -> RetrievalIndex:
        """The QA units of these sessions (of any user of ``tenant``) with their stored vectors: what
        evaluation's answer program retrieves from, for :meth:`answer` and ``promem eval`` alike. Sessions
        the store does not hold are left out (the answer program reports them missing). ``as_of``: as :meth:`search`."""
        from .answering import retrieval_index

        return retrieval_index(self, self.db, list(dict.fromkeys(session_ids)), tenant, history, as_of=as_of)

    def dim(self) -> int:
        """The store's vector dimension (the embedder's before the first fill)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row is not None:
            return int(row[0])
        return int(getattr(self.embedder, "dim", 0) or 1)

    def answer(self, user: str, questions: Sequence[str], *, engine: Engine, tenant: str = "default",
               question_time: str | None = None, as_of: str | None = None, since: str | None = None,
               until: str | None = None, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Answer questions about ``user`` from their memory with evaluation's QA program, all questions in
        one batched engine run; each answer as a dict (prediction, the memories it was shown with their ids
        and days). The memories are those holding at ``as_of`` (default: ``question_time``, else now) whose
        session's metadata meets ``filters``."""
        from .answering import answer

        return answer(self, user, questions, engine, tenant, question_time, as_of=as_of, since=since,
                      until=until, filters=filters)

    def history_graph(self, node_id: int, *, tenant: str = "default") -> dict[str, Any]:
        """The replacement graph through ``node_id``: its memories and the links among them (:mod:`.links`)."""
        from promem_fast.persistence.links import history_graph

        return history_graph(self.db, node_id, tenant)

    def session_events(self, user: str, session_id: str, *, tenant: str = "default") -> list[dict[str, Any]]:
        """What each memory of one stored session did (added, updated, merged as a duplicate), with reasons."""
        from promem_fast.persistence.links import session_events

        row = self._session_row(tenant, user, session_id)
        return [] if row is None else session_events(self.db, int(row[0]))

    def session_failures(self, user: str, session_id: str, *, tenant: str = "default") -> list[dict[str, Any]]:
        """The steps of one stored session's extraction that failed (``stage``, ``item``, ``error``): why a
        session may have given fewer memories than it says, or none."""
        row = self._session_row(tenant, user, session_id)
        failures = [] if row is None else json.loads(row[1] or "{}").get("failures", [])
        return [{"stage": f.get("stage"), "item": f.get("item"), "error": f.get("error")} for f in failures]

    def _session_row(self, tenant: str, user: str, session_id: str) -> Any:
        """The stored session's ``(id, stats)``, or None."""
        user_pk = self.user_id(tenant, user)
        return None if user_pk is None else self.db.execute(
            "SELECT id, stats FROM sessions WHERE user_id = ? AND session_id = ?", (user_pk, session_id)).fetchone()

    def graph(self, user: str, *, tenant: str = "default") -> dict[str, Any]:
        """The user's whole memory for drawing: nodes (replaced and expired ones included, flagged), relation and
        supersede edges, and details with the node they are anchored to (:func:`.links.drawing`)."""
        from promem_fast.persistence.links import drawing

        from .filters import expired, today

        user_pk = self.user_id(tenant, user)
        day = today()
        return drawing([] if user_pk is None else rows.read_hits(self.db, "n.user_id = ?", (user_pk,)),
                       lambda hit: expired(hit.metadata, day))

    # ------------------------------------------------------------------------------------ removing
    def delete(self, *, tenant: str = "default", user: str, session: str | None = None,
               node: int | None = None, filters: dict[str, Any] | None = None, engine: Engine | None = None) -> int:
        """Remove a node, a session, the sessions whose metadata meets ``filters`` (:mod:`.filters`) or a whole
        user (the narrowest given); returns the nodes removed.

        The memory is then as if the removed ones had never been added: the sessions from the earliest removed
        one on (canonical order) lose their links and are judged again, once for all the removed sessions (on
        ``engine``, else the store's own). The removal itself is one transaction: all or nothing.
        """
        from promem_fast.persistence.pending import key_of, reopen_from

        from .ordering import settle

        filters = filters or None  # no condition: every session, so the whole user
        narrow = node is not None or session is not None or filters is not None
        with self.db.transaction() as db:
            user_pk = self.user_id(tenant, user)
            if user_pk is None:
                return 0
            if node is not None:
                where, params = "user_id = ? AND id = ?", (user_pk, node)
            elif narrow:
                chosen, chosen_params = sessions_of(user_pk, session, filters, dialect=self.db.dialect)
                if db.execute(f"{chosen} LIMIT 1", chosen_params).fetchone() is None:
                    return 0
                where, params = f"user_id = ? AND session_pk IN ({chosen})", (user_pk, *chosen_params)
            else:
                where, params = "user_id = ?", (user_pk,)
            (count,) = db.execute(f"SELECT COUNT(*) FROM nodes WHERE {where}", params).fetchone()
            if narrow:  # sessions without nodes changed nothing: judging again starts at the first with some
                keys = [key_of(db, int(pk)) for (pk,) in db.execute(
                    f"SELECT DISTINCT session_pk FROM nodes WHERE {where}", params)]
                if keys:
                    reopen_from(db, user_pk, min(keys), inclusive=True)
            if node is not None:
                rows.forget_node(db, user_pk, node)
                db.execute("DELETE FROM nodes WHERE user_id = ? AND id = ?", (user_pk, node))
            elif narrow:
                db.execute(f"DELETE FROM sessions WHERE user_id = ? AND id IN ({chosen})", (user_pk, *chosen_params))
            else:
                db.execute("DELETE FROM users WHERE id = ?", (user_pk,))
            db.execute("UPDATE users SET generation = generation + 1 WHERE id = ?", (user_pk,))
        self.db.removed(user_pk)
        if narrow:
            settle(self, [user_pk], engine)
        self.db.compact()
        return int(count)

    # ------------------------------------------------------------------------------------ moving
    def export(self, path: str | Path | IO[str], *, tenant: str | None = None) -> int:
        """Write the store (or one tenant) as JSONL to a file or a text handle
        (:mod:`promem_fast.persistence.exchange`); returns sessions written."""
        from promem_fast.persistence.exchange import export_store

        with self.db.snapshot() as db:  # one read transaction: a consistent snapshot while a writer goes on
            return export_store(db, path if not isinstance(path, (str, Path)) else Path(path), tenant)

    def import_(self, path: str | Path) -> int:
        """Read an export into this store (sessions already here are skipped); returns sessions added."""
        from promem_fast.persistence.exchange import import_store

        with self.db.transaction() as db:
            added = import_store(db, Path(path), self.check_dim)
        if added:
            self.db.analyze()
        return added
