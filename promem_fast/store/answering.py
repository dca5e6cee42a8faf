"""Answering from the store: its nodes as evaluation's QA units, and the QA program run over them.

``promem eval`` and :meth:`MemoryStore.answer` both retrieve through :func:`retrieval_index`, so a stored
node is shown to an answerer the same way wherever the question comes from.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import rows
from .schema import StoreError
from .vectors import from_blobs

if TYPE_CHECKING:
    from promem_fast.engine import Engine
    from promem_fast.eval.qa import RetrievalIndex
    from promem_fast.types import MemoryGraph

    from .store import MemoryStore


def retrieval_index(store: MemoryStore, db: sqlite3.Connection, wanted: list[str], tenant: str,
                    history: bool) -> RetrievalIndex:
    """Each wanted session's current nodes (all with ``history``) as QA units, with their vectors."""
    from promem_fast.eval.qa import RetrievalIndex, Unit

    units: dict[str, list[Unit]] = {}
    keys: dict[str, list[int]] = {}
    blobs: dict[int, bytes | None] = {}
    for lo in range(0, len(wanted), 500):
        part = wanted[lo:lo + 500]
        where = ("n.session_pk IN (SELECT s.id FROM sessions s JOIN users u ON u.id = s.user_id JOIN tenants t "
                 f"ON t.id = u.tenant_id WHERE t.name = ? AND s.session_id IN ({rows.placeholders(len(part))}))"
                 + ("" if history else " AND n.superseded_by IS NULL"))
        params = (tenant, *part)
        for sid, in db.execute(
                "SELECT s.session_id FROM sessions s JOIN users u ON u.id = s.user_id JOIN tenants t ON "
                f"t.id = u.tenant_id WHERE t.name = ? AND s.session_id IN ({rows.placeholders(len(part))})",
                params):
            units.setdefault(sid, [])
            keys.setdefault(sid, [])
        blobs.update(db.execute(f"SELECT n.id, n.vector FROM nodes n WHERE {where}", params).fetchall())
        for hit in rows.read_hits(db, where, params):
            units[hit.session_id].append(Unit(hit.session_id, hit.key(), hit.body()))
            keys[hit.session_id].append(hit.node_id)
    dim = store._dim()
    vectors = {}
    for sid, ids in keys.items():
        stored = [blobs[node] for node in ids]
        present = [i for i, blob in enumerate(stored) if blob is not None]
        missing = [i for i, blob in enumerate(stored) if blob is None]
        block = np.zeros((len(ids), dim), np.float32)
        if present:
            block[present] = from_blobs([b for b in stored if b is not None], dim)
        if missing:  # imported without vectors: embedded now, for this index only
            block[missing] = store.embedder.embed([units[sid][i].key for i in missing])
        vectors[sid] = block
    return RetrievalIndex(units=units, vectors=vectors)


def answer(store: MemoryStore, user: str, questions: Sequence[str], engine: Engine, tenant: str,
           question_time: str | None) -> list[dict[str, Any]]:
    """Every question about ``user`` asked of all their sessions (dated as stored), in one engine run."""
    from promem_fast.eval.qa import answer_questions
    from promem_fast.eval.records import Question

    dim = getattr(engine.services.embedder, "dim", None)
    if dim and store._db.execute("SELECT 1 FROM meta WHERE key = 'dim' AND value != ?", (str(dim),)).fetchone():
        raise StoreError(f"{store.path}: the engine's embedder gives {dim}-dimensional vectors, not the store's "
                         f"{store._dim()}; answer with the embedder that filled the store")
    user_pk = store._user_pk(tenant, user)
    dated = [] if user_pk is None else store._db.execute(
        "SELECT session_id, timestamp FROM sessions WHERE user_id = ? ORDER BY id", (user_pk,)).fetchall()
    index = store.retrieval_index([sid for sid, _ in dated], tenant=tenant)
    asked = [(Question(question_id=str(i), user_id=user, question=text, answer=None, question_type="ask",
                       session_ids=tuple(sid for sid, _ in dated), session_dates=tuple(ts for _, ts in dated),
                       question_time=question_time), user) for i, text in enumerate(questions)]
    answers, _ = answer_questions(engine, asked, index)
    return [a.to_dict() for a in answers]



def evaluation_index(engine: Engine, graphs: Iterable[MemoryGraph], path: Path) -> RetrievalIndex:
    """Evaluation's memory, through the store: the graphs put in a fresh store at ``path`` (a store left by an
    earlier run is replaced: the graphs file is the record) and their QA units read back. Updates across
    sessions are not judged here, so the memory answered from is the extracted one, as in the paper."""
    import time

    from .store import MemoryStore

    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    started = time.perf_counter()
    with MemoryStore(path, engine.config, embedder=engine.services.embedder, update_judge="off") as store:
        graphs = list(graphs)
        store.add(graphs, tenant="eval")
        index = store.retrieval_index([g.session_id for g in graphs], tenant="eval")
    cost = index.stats.stage("qa")
    cost.embedded_texts = sum(len(g.nodes) for g in graphs)
    cost.seconds = time.perf_counter() - started
    return index
