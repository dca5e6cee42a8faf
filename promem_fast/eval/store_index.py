"""Evaluation's memory, held in a store: ``promem eval`` retrieves through the same path as
:meth:`MemoryStore.answer` (kept with evaluation, apart from :mod:`promem_fast.store.answering`, which the
store itself calls)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from promem_fast.store.store import MemoryStore

if TYPE_CHECKING:
    from promem_fast.engine import Engine
    from promem_fast.store.qa import RetrievalIndex
    from promem_fast.types import MemoryGraph


def evaluation_index(engine: Engine, graphs: Iterable[MemoryGraph], path: Path) -> RetrievalIndex:
    """Evaluation's memory, through the store: the graphs put in a fresh store at ``path`` (a store left by an
    earlier run is replaced: the graphs file is the record) and their QA units read back. Updates across
    sessions are not judged here, so the memory answered from is the extracted one, as in the paper."""
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
