"""The hybrid search's cost at 10K, 100K and 1M memories of one user: the dense side alone against dense + BM25.

Run: ``python -m benchmarks.runs.bench_hybrid`` (writes ``results/bench_hybrid.json``; ``--sizes 10000 100000``
for the smaller ones only).

For each size a fresh store file (the real schema, so the real FTS5 table and its triggers) is filled with
one user's memories in one transaction: their texts are real chit-chat sentences (:mod:`index_corpus`; past
the corpus's size, two sentences joined, labelled in the results), their vectors fixed random unit vectors
of dimension 384 (no model: embedding is not timed). Then, query by query and alternately:

- ``dense``: the store's dense side alone (exact FAISS: random vectors form no near-duplicate groups, and a
  grouped HNSW graph over a million of them would take hours to build here; the graph's own latency on real
  vectors is ``bench_index``'s), the same candidate depth the hybrid search takes (100), scope filtered;
- ``lexical``: the FTS5 side alone (:func:`~promem_fast.persistence.lexical.search_store`, depth 100);
- ``hybrid``: :func:`~promem_fast.store.hybrid.candidates` with every ranking part on, k = 10: both sides,
  the scope filter, the candidates' vectors and dates read, fusion and near-duplicate collapse;
- ``hybrid_without_dense``: the same with the dense side off: what the lexical side, the reads and the
  fusion add to a dense search, whichever index serves it. A hybrid search over the grouped HNSW graph
  takes the graph's search (``bench_index``) plus this.

Queries are held-out sentences (their words for BM25, a random vector for the dense side), p50 and p99 in
milliseconds over ``QUERIES`` of them, after ``WARMUP`` untimed ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.common.index_corpus import sentences
from benchmarks.common.measure import limit_threads
from benchmarks.runs.bench_index import _nodes
from benchmarks.tools import figures
from promem_fast.config import EngineConfig
from promem_fast.store import MemoryStore
from promem_fast.store.hybrid import _dense, candidates
from promem_fast.persistence.lexical import terms
from promem_fast.persistence.timeline import validity

log = logging.getLogger(__name__)

DIM = 384
SIZES = (10_000, 100_000, 1_000_000)
QUERIES = 300
WARMUP = 20
DEPTH = 100
SESSION_NODES = 50


class FixedQueries:
    """The query vector the next search embeds (set per query), so the timing leaves the embedder out."""

    dim = DIM

    def __init__(self) -> None:
        self.next = np.zeros(DIM, np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.tile(self.next, (len(texts), 1))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    out = rng.standard_normal((n, DIM), dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def fill(path: Path, texts: list[str], rng: np.random.Generator) -> float:
    """One user's memories written straight into a fresh store (real schema and triggers); seconds taken."""
    from promem_fast.persistence.schema import connect

    started = time.perf_counter()
    db = connect(path)
    db.execute("BEGIN")
    db.execute("INSERT INTO meta (key, value) VALUES ('dim', ?)", (str(DIM),))
    db.execute("INSERT INTO tenants (name) VALUES ('default')")
    db.execute("INSERT INTO users (tenant_id, name) VALUES (1, 'Maya')")
    for lo in range(0, len(texts), SESSION_NODES):
        part = texts[lo:lo + SESSION_NODES]
        day = f"2025-{1 + (lo // SESSION_NODES) % 12:02d}-{1 + (lo // SESSION_NODES) % 28:02d}T10:00:00"
        session = db.execute("INSERT INTO sessions (user_id, session_id, timestamp, mode, events, stats, said_at, "
                             "recorded_at) VALUES (1, ?, ?, 'promem', '[]', '{}', ?, ?)",
                             (f"s{lo}", day, day, day)).lastrowid
        vectors = unit_rows(rng, len(part))
        db.executemany("INSERT INTO nodes (session_pk, user_id, local_id, text, turn_id, date, data, vector, "
                       "valid_from) VALUES (?, 1, ?, ?, NULL, ?, '{}', ?, ?)",
                       [(session, i, text, day, vectors[i].tobytes(), day) for i, text in enumerate(part)])
    db.execute("COMMIT")
    db.close()
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000.0, q))


def measure(path: Path, asked: list[str], rng: np.random.Generator) -> dict[str, float]:
    embedder = FixedQueries()
    config = EngineConfig.profile("scripted")
    config.search_approximate_min = 0  # exact: random vectors have no near-duplicate groups to build a graph of
    with MemoryStore(path, config, embedder=embedder, update_judge="off", read_only=True) as store:
        started = time.perf_counter()
        index = store.db.index(1)  # type: ignore[attr-defined]  # SQLite's own; built on every thread, searched on one
        fill_s = time.perf_counter() - started
        log.info("index of %d vectors filled in %.1f s (approximate: %s)", len(index), fill_s, index.approximate)
        with limit_threads(1):
            return {"index_fill_s": fill_s, "approximate": float(index.approximate),
                    **timed(store, embedder, asked, rng)}


def timed(store: MemoryStore, embedder: FixedQueries, asked: list[str], rng: np.random.Generator
          ) -> dict[str, float]:
    """p50/p99 of each way of searching, timed alternately query by query."""
    scope = validity(None, None, None)
    times: dict[str, list[float]] = {"dense": [], "lexical": [], "hybrid": [], "hybrid_without_dense": []}
    full = store.config.ranking
    no_dense = dataclasses.replace(full, dense=False)
    for n, question in enumerate(asked[:WARMUP + QUERIES]):
        embedder.next = unit_rows(rng, 1)[0]
        words = terms(question, {"maya"})
        runs = {"dense": lambda: _dense(store, 1, embedder.next, DEPTH, *scope),
                "lexical": lambda: store.db.lexical(1, words, DEPTH),
                "hybrid": lambda: candidates(store, 1, "Maya", question, 10, scope),
                "hybrid_without_dense": lambda: candidates(store, 1, "Maya", question, 10, scope)}
        order = list(runs) if n % 2 else list(runs)[::-1]
        for name in order:
            store.config.ranking = no_dense if name == "hybrid_without_dense" else full
            t = time.perf_counter()
            runs[name]()
            if n >= WARMUP:
                times[name].append(time.perf_counter() - t)
    found: dict[str, float] = {}
    for name, values in times.items():
        found[f"{name}_p50_ms"] = percentile(values, 50)
        found[f"{name}_p99_ms"] = percentile(values, 99)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_hybrid"))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--keep", action="store_true",
                        help="keep each store file in --work, and measure one found there instead of writing it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    corpus, asked = sentences(WARMUP + QUERIES)
    args.work.mkdir(parents=True, exist_ok=True)
    found: dict[str, float | int] = {"queries": QUERIES, "depth": DEPTH, "real_sentences": len(corpus)}
    rows = []
    for n in args.sizes:
        rng = np.random.default_rng(n)
        picker = random.Random(n)
        texts = corpus[:n] + [f"{picker.choice(corpus)} {picker.choice(corpus)}" for _ in range(n - len(corpus))]
        path = args.work / f"store-{n}.db"
        if args.keep and path.exists():
            fill_s = float("nan")
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            fill_s = fill(path, texts, rng)
            log.info("store of %d memories written in %.1f s", n, fill_s)
        got = measure(path, asked, rng)
        if fill_s == fill_s:  # measured (not a kept file's)
            got["store_fill_s"] = fill_s
        log.info("%s: %s", _nodes(n), {k: round(v, 3) for k, v in got.items()})
        for key, value in got.items():
            found[f"{key}.{_nodes(n)}"] = round(value, 2)
        found[f"real_sentences.{_nodes(n)}"] = min(n, len(corpus))
        rows.append([_nodes(n), "grouped HNSW" if got["approximate"] else "exact FAISS",
                     f"{got['dense_p50_ms']:.2f} / {got['dense_p99_ms']:.2f}",
                     f"{got['lexical_p50_ms']:.2f} / {got['lexical_p99_ms']:.2f}",
                     f"{got['hybrid_p50_ms']:.2f} / {got['hybrid_p99_ms']:.2f}",
                     f"{got['hybrid_without_dense_p50_ms']:.2f} / {got['hybrid_without_dense_p99_ms']:.2f}"])
        table = {"columns": ["memories", "dense index", "dense p50 / p99 ms", "BM25 p50 / p99 ms",
                             "hybrid p50 / p99 ms", "hybrid less the dense side, p50 / p99 ms"], "rows": rows}
        print(figures.table_text({"bench_hybrid": {"tables": {"main": table}}}, "bench_hybrid", "main"), flush=True)
        if not args.no_write:
            figures.write_result(
                "bench_hybrid", found, "python -m benchmarks.runs.bench_hybrid", tables={"main": table},
                note=(f"One user; texts: real chit-chat sentences ({len(corpus):,}), two joined past that; vectors "
                      f"random (dim {DIM}); {QUERIES} held-out sentences as queries; one thread; the machine shared."))
        if not args.keep:
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
