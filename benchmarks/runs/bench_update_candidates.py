"""What arrival-order independence costs the write path: update candidates searched exactly, memories embedded
one session per call.

Run: ``python -m benchmarks.runs.bench_update_candidates [--size 200000] [--queries 200] [--rounds 3]``
(writes ``results/bench_update_candidates.json`` through :func:`benchmarks.tools.figures.write_result`).

``search``: one user of ``size`` vectors in an SQLite store searched through its grouped approximate index
(the vectors of :mod:`benchmarks.runs.bench_pg_search`: noisy copies of 2,000 centres, 384 dims). Per new
memory, update judging asks for ``4 x update_neighbours`` (12) candidates: ``approximate`` is that search
through the index (what it was), ``exact`` a scan of every vector plus the candidates' vectors read back and
scored again in one rounding, one memory at a time (what :func:`promem_fast.store.update.candidate_pairs`
did first), and ``exact_batched`` the same for a session's ``SESSION`` memories at once, the stored vectors
read once for all of them (what it does now; per memory: the session's time over ``SESSION``); the three
are timed alternately session by session. ``embed``: the memories of the HaluMem development user's sessions (the
scripted extraction) embedded by all-MiniLM-L6-v2 in one call for all sessions (what a store did with the
sessions of one ``add``) against one call per session (now), side by side; left out when the sample is absent.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.measure import bench_threads, limit_threads, side_by_side
from benchmarks.common.paths import HALUMEM
from benchmarks.runs.bench_pg_search import CENTRES, DIM, fill, vectors
from benchmarks.tools import figures
from promem_fast.persistence import pending
from promem_fast.persistence.opening import open_persistence
from promem_fast.store.update import exact_ranking

WANTED = 12
"""Candidates asked for per new memory: ``4 x`` the store's default ``update_neighbours`` (3)."""

SESSION = 16
"""New memories per session in ``exact_batched`` (the scripted extraction keeps about 17 per HaluMem session)."""


def search(size: int, queries: int, folder: Path) -> dict[str, float]:
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    db = open_persistence(folder / "update.db", search_approximate_min=1)
    try:
        fill(db, vectors(size, centres, rng))
        started = time.perf_counter()
        db.nearest(1, vectors(1, centres, rng)[0], WANTED)  # builds the grouped graph
        built = time.perf_counter() - started
        times: dict[str, list[float]] = {"approximate": [], "exact": [], "exact_batched": []}
        asked = vectors(queries, centres, rng)
        for start in range(0, len(asked) - SESSION + 1, SESSION):
            session = asked[start:start + SESSION]
            for query in session:
                started = time.perf_counter()
                db.nearest(1, query, WANTED)
                times["approximate"].append(time.perf_counter() - started)
                started = time.perf_counter()
                ids = db.nearest(1, query, WANTED, exact=True)[0].tolist()
                exact_ranking(pending.vectors_of(db, ids, DIM), ids, query)
                times["exact"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for query, (found, _) in zip(session, db.nearest_many(1, session, WANTED, exact=True), strict=True):
                exact_ranking(pending.vectors_of(db, found.tolist(), DIM), found.tolist(), query)
            times["exact_batched"].append((time.perf_counter() - started) / SESSION)
    finally:
        db.close()
    out = {"nodes": size, "queries": queries, "index_build_s": round(built, 1)}
    for name, samples in times.items():
        ordered = sorted(samples)
        out[f"{name}_p50_ms"] = round(1000 * statistics.median(ordered), 2)
        out[f"{name}_p99_ms"] = round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2)
    out["exact_over_approximate"] = round(out["exact_p50_ms"] / out["approximate_p50_ms"], 2)
    out["exact_over_batched"] = round(out["exact_p50_ms"] / out["exact_batched_p50_ms"], 2)
    return out


def embed(rounds: int) -> dict[str, float]:
    from benchmarks.common.workload import load_halumem_sessions
    from promem_fast.backends import create
    from promem_fast.config import EmbedderConfig, EngineConfig
    from promem_fast.engine import Engine
    from promem_fast.store.qa import memory_units

    with Engine(EngineConfig.profile("scripted")) as engine:
        graphs = list(engine.extract_stream(load_halumem_sessions(HALUMEM)))
    per_session = [[unit.key for unit in memory_units(g)] for g in graphs]
    everything = [text for texts in per_session for text in texts]
    model: Any = create("embedder", "sentence-transformers", EmbedderConfig(device="cpu"))
    with limit_threads(bench_threads()):
        medians = side_by_side({"one_call": lambda: model.embed(everything),
                                "per_session": lambda: [model.embed(texts) for texts in per_session]}, rounds)
    out = {"sessions": len(graphs), "memories": len(everything)}
    for name, seconds in medians.items():
        out[f"{name}_ms_per_session"] = round(1000 * seconds / len(graphs), 1)
    out["per_session_over_one_call"] = round(medians["per_session"] / medians["one_call"], 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        found.update({f"search.{k}": v for k, v in search(args.size, args.queries, Path(folder)).items()})
    if HALUMEM.is_file():
        found.update({f"embed.{k}": v for k, v in embed(args.rounds).items()})
    figures.write_result(
        "bench_update_candidates", found, "python -m benchmarks.runs.bench_update_candidates " + " ".join(sys.argv[1:]),
        note=f"2 CPU cores shared with other work; {bench_threads()} thread(s) per library for the embedder "
             "(PROMEM_BENCH_THREADS); the search figures are per new memory, the embedding ones per session.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
