"""The memory store at scale: ingest rate, search latency (FAISS vs numpy, side by side) and bytes per node.

Run: ``python -m pytest benchmarks/suites/bench_store.py --benchmark-only -s -q`` (``-k "not 1000000"`` skips the
1M-node cases, which take a few minutes and about 5 GiB of memory).

For each size (10K, 100K, 1M nodes), held by one user or spread over 1,000 users, a fresh store file is
filled through :meth:`MemoryStore.add` with sessions of up to 50 nodes (one transaction each; updates not
judged, so this is the store's own cost), embedded by a stand-in that gives every text a fixed random
unit vector of dimension 384 (no model: the figure is the store's, not an embedder's). Then the same file
is opened twice, once with a FAISS index and once with numpy, and queries are timed alternately on each
(:meth:`MemoryStore.search`, k = 20, embedding included, current memory only), after one warm-up query
per user that fills the indexes (timed apart as ``index_fill_s``, and again in a reopened store as
``index_reopen_s``: users of 50,000 nodes or more then read the index file saved on close).
``extra_info``: nodes/s ingested, p50/p99 search milliseconds per index kind and their ratio, and bytes per
node of the SQLite file.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.common.measure import bench_threads, limit_threads
from benchmarks.common.paths import HALUMEM
from promem_fast.config import EngineConfig
from promem_fast.store import MemoryStore
from promem_fast.types import MemoryEntry, MemoryGraph, RunStats

DIM = 384
SESSION_NODES = 50
QUERIES = 200
"""Queries timed per index kind; a million-node user takes a few hundred ms a query, so it gets fewer."""
QUERIES_1M = 50
CASES = [(nodes, users) for nodes in (10_000, 100_000, 1_000_000) for users in (1, 1000)]


class RandomEmbedder:
    """A fixed random unit vector per text, the vectors of a real embedder's shape with no model: the sum of
    two rows of random tables picked by the halves of the text's CRC32 (4 billion distinct vectors)."""

    dim = DIM

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.tables = rng.standard_normal((2, 1 << 16, DIM), dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        h = np.array([zlib.crc32(t.encode()) for t in texts], np.int64)
        out = self.tables[0][h & 0xFFFF] + self.tables[1][h >> 16]
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def sessions(nodes: int, users: int) -> Iterator[MemoryGraph]:
    """Sessions of at most :data:`SESSION_NODES` nodes, dealt round-robin to the users."""
    per_user = nodes // users
    size = min(SESSION_NODES, per_user)
    made = 0
    for s in range(per_user // size):
        for u in range(users):
            texts = [f"user {u} session {s} fact {j}: item{made + j} of topic{(made + j) % 997}" for j in range(size)]
            made += size
            yield MemoryGraph(
                session_id=f"s{s}", user=f"u{u}", edges=[], details=[], events=[], stats=RunStats(),
                timestamp=f"2025-01-{1 + s % 28:02d}",
                nodes=[MemoryEntry(id=j, text=t, origin="draft", verification="entailed", turn_ids=[j])
                       for j, t in enumerate(texts)])


def percentile_ms(samples: list[float], q: float) -> float:
    return round(1e3 * float(np.percentile(samples, q)), 3)


@pytest.mark.parametrize(("nodes", "users"), CASES, ids=[f"{n}-nodes-{u}-users" for n, u in CASES])
def test_store_ingest_and_search(benchmark: Any, tmp_path: Path, nodes: int, users: int) -> None:
    config = EngineConfig.profile("scripted")
    config.search_approximate_min = 0  # exact search at every size: approximate search is bench_index.py's
    db = tmp_path / "bench.db"
    embedder = RandomEmbedder()
    with limit_threads(bench_threads()):
        started = time.perf_counter()
        with MemoryStore(db, config, embedder=embedder, update_judge="off") as store:
            stored = store.add(sessions(nodes, users))
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        ingest_s = time.perf_counter() - started
        size = db.stat().st_size
        rng = np.random.default_rng(1)
        asked = [(f"u{int(rng.integers(users))}", f"query {i} about item{int(rng.integers(nodes))}")
                 for i in range(QUERIES if nodes < 1_000_000 else QUERIES_1M)]
        with MemoryStore(db, config, embedder=embedder, read_only=True, index="faiss") as faiss_store, \
                MemoryStore(db, config, embedder=embedder, read_only=True, index="numpy") as numpy_store:
            kinds = {"faiss": faiss_store, "numpy": numpy_store}
            fill: dict[str, float] = {}
            for name, store in kinds.items():
                started = time.perf_counter()
                for user in {u for u, _ in asked}:
                    store.search(user, "warm-up", k=20)
                fill[name] = time.perf_counter() - started
            samples: dict[str, list[float]] = {name: [] for name in kinds}
            for i, (user, query) in enumerate(asked):
                order = list(kinds) if i % 2 == 0 else list(kinds)[::-1]
                results = {}
                for name in order:
                    t0 = time.perf_counter()
                    results[name] = [h.node_id for h in kinds[name].search(user, query, k=20)]
                    samples[name].append(time.perf_counter() - t0)
                assert results["faiss"] == results["numpy"], query
            benchmark.pedantic(lambda: faiss_store.search(asked[0][0], asked[0][1], k=20), rounds=3, iterations=1)
        # closing saved the indexes of users over CACHE_MIN_VECTORS; a new process reads them back
        reload: dict[str, float] = {}
        for name in kinds:
            with MemoryStore(db, config, embedder=embedder, read_only=True, index=name) as store:  # type: ignore[arg-type]
                started = time.perf_counter()
                for user in {u for u, _ in asked}:
                    store.search(user, "warm-up", k=20)
                reload[name] = time.perf_counter() - started
    info: dict[str, Any] = {
        "nodes": nodes, "users": users, "sessions": stored, "ingest_nodes_per_s": round(nodes / ingest_s, 1),
        "ingest_s": round(ingest_s, 2), "bytes_per_node": round(size / nodes, 1),
    }
    for name, times in samples.items():
        info[f"{name}_p50_ms"] = percentile_ms(times, 50)
        info[f"{name}_p99_ms"] = percentile_ms(times, 99)
        info[f"{name}_index_fill_s"] = round(fill[name], 3)
        info[f"{name}_index_reopen_s"] = round(reload[name], 3)
    info["numpy_vs_faiss_p50"] = round(info["numpy_p50_ms"] / info["faiss_p50_ms"], 2)
    info["numpy_vs_faiss_p99"] = round(info["numpy_p99_ms"] / info["faiss_p99_ms"], 2)
    benchmark.extra_info.update(info)
    print(info)




@pytest.mark.skipif(not HALUMEM.exists(), reason="the HaluMem development sample is not here")
def test_halumem_update_points_as_supersede_links(benchmark: Any, tmp_path: Path) -> None:
    """How many of the HaluMem sample's update points end as supersede links, scripted backends throughout
    (a check that the update path runs end to end on real sessions; the scripted judge is word overlap,
    so the figure says nothing about a real model's quality).

    An update point counts when the node of its session that best matches it (cosine of the store's
    embedder) superseded an older node; and again, stricter, when a node it superseded has a cosine of at
    least 0.5 with one of the point's original memories. ``extra_info`` also holds the links made.
    """
    from promem_fast.engine import Engine
    from promem_fast.eval.datasets import load_benchmark

    bench = load_benchmark("halumem", HALUMEM)
    config = EngineConfig.profile("scripted")
    with Engine(config) as engine:
        graphs = engine.extract(bench.sessions)

    def add() -> MemoryStore:
        db = tmp_path / f"halumem-{time.monotonic_ns()}.db"
        with MemoryStore(db, config) as store, Engine(config) as judge:
            store.add(graphs, engine=judge)
        return MemoryStore(db, config, read_only=True)

    store = benchmark.pedantic(add, rounds=1, iterations=1)
    points = [p for user in bench.users for p in user.memory_points if p.is_update]
    found = matched = 0
    nodes = [h for user in store.users() for h in store.hits(user, history=True)]
    replaced: dict[int, list[str]] = {}
    for h in nodes:
        if h.superseded_by is not None:
            replaced.setdefault(h.superseded_by, []).append(h.text)
    embed = store.embedder.embed
    for point in points:
        mine = [h for h in nodes if h.session_id == point.session_id]
        if not mine:
            continue
        best = mine[int(np.argmax(embed([h.text for h in mine]) @ embed([point.content])[0]))].node_id
        if best in replaced:
            found += 1
            if point.original_memories:
                olds = embed(replaced[best])
                matched += bool((olds @ embed(list(point.original_memories)).T).max() >= 0.5)
    benchmark.extra_info.update({"update_points": len(points), "update_points_superseding": found,
                                 "update_points_superseding_an_original": matched,
                                 "supersede_links": sum(h.superseded_by is not None for h in nodes),
                                 "nodes": len(nodes), "sessions": len(graphs)})
    print(benchmark.extra_info)
    store.close()
