"""Answering from the store: its nodes as QA units (:mod:`.qa`), and the answer program run over them.

``promem eval`` and :meth:`MemoryStore.answer` both retrieve through :func:`retrieval_index`, so a stored
node is shown to an answerer the same way wherever the question comes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from promem_fast.persistence import rows
from promem_fast.persistence.api import Database
from promem_fast.persistence.connection import StoreError
from promem_fast.persistence.hits import Hit
from promem_fast.persistence.timeline import day_label, query_time, time_window
from promem_fast.times import iso_time

from .filters import metadata_scope, visible

if TYPE_CHECKING:
    from promem_fast.engine import Engine

    from .qa import RetrievalIndex
    from .protocol import StoreView


PRESELECT_ABOVE = 20_000
"""A user with more current nodes than this is not read whole to answer: each question's best nodes on each
side of the hybrid ranking (vector index and full-text table), :data:`PRESELECT_FACTOR` times ``qa_top_k``
of each, make the pool; the fused top-k of the whole user is in it unless BM25 over the pool orders it
differently than over all of the user's memories."""
PRESELECT_FACTOR = 4


def retrieval_index(store: StoreView, db: Database, wanted: list[str], tenant: str,
                    history: bool, scope: tuple[str, tuple[Any, ...]] | None = None, *,
                    as_of: str | None = None) -> RetrievalIndex:
    """Each wanted session's memories that ``scope`` selects (:func:`.timeline.validity`; default those
    holding at ``as_of``, else the current ones, all with ``history``) as QA units, with their vectors."""
    if scope is None:
        scope = visible(query_time(as_of, "as_of", end_of_day=True), None, None, history=history,
                        dialect=store.db.dialect)
    return _retrieval(store, db, wanted, tenant, scope)[0]


def _retrieval(store: StoreView, db: Database, wanted: list[str], tenant: str,
               scope: tuple[str, tuple[Any, ...]]) -> tuple[RetrievalIndex, dict[tuple[str, str], Hit]]:
    where, params = scope
    chunks, found = [], []
    for lo in range(0, len(wanted), 500):
        part = wanted[lo:lo + 500]
        sessions = ("SELECT s.id FROM sessions s JOIN users u ON u.id = s.user_id JOIN tenants t ON "
                    f"t.id = u.tenant_id WHERE t.name = ? AND s.session_id IN ({rows.placeholders(len(part))})")
        chunks.append((f"n.session_pk IN ({sessions}) AND {where}", (tenant, *part, *params)))
        found.extend(sid for (sid,) in db.execute(sessions.replace("SELECT s.id", "SELECT s.session_id"),
                                                  (tenant, *part)))
    return _index(store, db, chunks, found)


def _index(store: StoreView, db: Database, chunks: list[tuple[str, tuple[Any, ...]]],
           sessions: Sequence[str]) -> tuple[RetrievalIndex, dict[tuple[str, str], Hit]]:
    """The nodes each ``(where, params)`` chunk selects, as units grouped by session (every one of
    ``sessions`` present, maybe empty), with their stored vectors (embedded now where none is stored); and
    the hit behind each ``(session, shown text)``, so an answer names the memories it was shown."""
    from .qa import RetrievalIndex, Unit

    units: dict[str, list[Unit]] = {sid: [] for sid in sessions}
    keys: dict[str, list[int]] = {sid: [] for sid in sessions}
    blobs: dict[int, Any] = {}
    behind: dict[tuple[str, str], Hit] = {}
    owners: dict[str, str] = {}
    for where, params in chunks:
        blobs.update(db.execute(f"SELECT n.id, {db.vector_sql('n.vector')} FROM nodes n WHERE {where}",
                                params).fetchall())
        for hit in rows.read_hits(db, where, params):
            units.setdefault(hit.session_id, []).append(Unit(hit.session_id, hit.key(), hit.body(),
                                                             hit.node.get("source") or "",
                                                             hit.node.get("exchange") or ""))
            behind.setdefault((hit.session_id, hit.body()), hit)
            keys.setdefault(hit.session_id, []).append(hit.node_id)
            owners[hit.session_id] = hit.user
    dim = store.dim()
    vectors = {}
    for sid, ids in keys.items():
        stored = [blobs[node] for node in ids]
        present = [i for i, blob in enumerate(stored) if blob is not None]
        missing = [i for i, blob in enumerate(stored) if blob is None]
        block = np.zeros((len(ids), dim), np.float32)
        if present:
            block[present] = db.decode_vectors([b for b in stored if b is not None], dim)
        if missing:  # imported without vectors: embedded now, for this index only
            block[missing] = store.embedder.embed([units[sid][i].key for i in missing])
        vectors[sid] = block
    return RetrievalIndex(units=units, vectors=vectors, owners=owners), behind


def _preselected(store: StoreView, user_pk: int, user: str, questions: Sequence[str], top_k: int,
                 sessions: Sequence[str], scope: tuple[str, tuple[Any, ...]]) -> tuple[RetrievalIndex,
                                                                                 dict[tuple[str, str], Hit]]:
    """The pool of a large user: every question's best nodes in scope on each side of the hybrid ranking."""
    from .hybrid import proposals

    wanted: set[int] = set()
    for query in questions:
        _, dense, lexical = proposals(store, user_pk, user, query, PRESELECT_FACTOR * top_k, scope)
        wanted.update(dense + lexical)
    ids = sorted(wanted)
    chunks = [(f"n.id IN ({rows.placeholders(len(ids[lo:lo + 500]))})", tuple(ids[lo:lo + 500]))
              for lo in range(0, len(ids), 500)]
    return _index(store, store.db, chunks, sessions)


def answer(store: StoreView, user: str, questions: Sequence[str], engine: Engine, tenant: str,
           question_time: str | None, *, as_of: str | None = None, since: str | None = None,
           until: str | None = None, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every question about ``user`` asked of the memories holding at ``as_of`` (default the question's
    time, else now) whose session's metadata meets ``filters``, each shown with its day and weekday, in one
    engine run."""
    from .qa import Ask, answer_questions

    dim = getattr(engine.services.embedder, "dim", None)
    if dim and store.db.execute("SELECT 1 FROM meta WHERE key = 'dim' AND value != ?", (str(dim),)).fetchone():
        raise StoreError(f"{store.location}: the engine's embedder gives {dim}-dimensional vectors, not the store's "
                         f"{store.dim()}; answer with the embedder that filled the store")
    as_of, since, until = time_window(as_of, since, until)
    when = as_of or (iso_time(question_time) if question_time else None)
    scope = metadata_scope(filters, visible(when, since, until, dialect=store.db.dialect), dialect=store.db.dialect)
    user_pk = store.user_id(tenant, user)
    dated = [] if user_pk is None else store.db.execute(
        "SELECT session_id, said_at, timestamp FROM sessions WHERE user_id = ? ORDER BY id", (user_pk,)).fetchall()
    current = 0 if user_pk is None else store.db.execute(
        "SELECT COUNT(*) FROM nodes WHERE user_id = ? AND superseded_by IS NULL", (user_pk,)).fetchone()[0]
    if user_pk is not None and current > PRESELECT_ABOVE:
        index, behind = _preselected(store, user_pk, user, questions, engine.config.qa_top_k,
                                     [sid for sid, *_ in dated], scope)
    else:
        index, behind = _retrieval(store, store.db, [sid for sid, *_ in dated], tenant, scope)
    asked_at = day_label(when) if when else question_time
    asked = [(Ask(question_id=str(i), question=text, session_ids=tuple(sid for sid, *_ in dated),
                  session_dates=tuple(day_label(said) or raw for _, said, raw in dated), question_time=asked_at),
              user) for i, text in enumerate(questions)]
    answers, _ = answer_questions(engine, asked, index)
    out = []
    for reply in answers:
        shown = [(behind.get((r.session_id, r.text)), r) for r in reply.retrieved]
        out.append({**reply.to_dict(), "as_of": when, "memories": [
            {"id": None if hit is None else hit.node_id, "memory": r.text if hit is None else hit.text,
             "session_id": r.session_id, "day": r.date, "score": round(r.score, 6)} for hit, r in shown]})
    return out
