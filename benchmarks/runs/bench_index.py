"""Approximate (an HNSW graph over groups of near-duplicates) vs exact search over one user's vectors, on
real MiniLM embeddings of dialogue.

Run: ``python -m benchmarks.runs.bench_index`` (writes ``results/bench_index.json``; ``--embed-budget S`` first
embeds more real sentences for up to S seconds, see :mod:`index_corpus`).

What is measured, per size (10K, 100K, 1M vectors): the store's own :class:`~promem_fast.persistence.vectors.
VectorIndex`, filled the way the store fills it (blocks of 65,536 rows), once exact (FAISS ``IndexFlatIP``)
and once approximate (:mod:`promem_fast.persistence.ann`, forced on from the first block at every size); the
seconds each fill takes (what a user's first search after a restart without index file, or after a delete,
costs); recall@10 of the approximate top 10 against the exact top 10 over 1,000 queries (real sentences of
held-out conversations) at several graph search widths (``EF_SEARCH``); and single-query latency
(``VectorIndex.search``, k = 10, FAISS on one thread), exact and approximate timed alternately query by
query, p50 and p99. Each query is asked ``PASSES`` times (the queries in the same order each pass): the
figures are of each query's fastest timing (on a shared machine another job preempts a query now and then),
and ``first_...`` those of its first.

The vectors: every real sentence embedded so far (all-MiniLM-L6-v2, normalised), then, to reach a size
larger than that, *noisy copies*: a real sentence's vector plus Gaussian noise, renormalised, so that a copy
sits at cosine ``COPY_COSINE`` from its source. Copies are labelled as such in the results
(``real_vectors`` of ``nodes``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

import numpy as np

from benchmarks.common.index_corpus import embedded
from benchmarks.common.measure import limit_threads
from benchmarks.tools import figures
from promem_fast.persistence import ann
from promem_fast.persistence.vectors import VectorIndex

log = logging.getLogger(__name__)

SIZES = (10_000, 100_000, 1_000_000)
K = 10
FILL_BLOCK = 65_536
EXACT_QUERIES = {10_000: 1000, 100_000: 400, 1_000_000: 150}
"""Queries timed on the exact index per size (each exact query at 1M costs a full scan); the approximate
index is timed on all 1,000 and its recall counted on all 1,000."""
PASSES = 3


COPY_COSINE = 0.95
"""Cosine between a noisy copy and its real source: a close paraphrase, "real sentences plus small noise"."""

CORPORA = {"duplicate-free": (0.80, None), "duplicate-heavy": (COPY_COSINE, 41)}
"""``--corpora``: the two corpora the grouped index must hold up on, as (copy cosine, vectors per distinct
sentence). Duplicate-free: every real sentence, then copies at cosine 0.80 from their source (under
``ann.GROUP_COSINE``: each vector leads its own group, a plain HNSW graph). Duplicate-heavy: a 41st of the
size in distinct real sentences, each with about 40 copies at cosine 0.95 (groups fill up and split)."""


def copy_cosine(real: np.ndarray, rng: np.random.Generator, sample: int = 2000) -> float:
    """Median cosine between a real sentence and its nearest other real sentence (a sample of them)."""
    chosen = rng.choice(len(real), size=min(sample, len(real)), replace=False)
    scores = real[chosen] @ real.T
    scores[np.arange(len(chosen)), chosen] = -1.0
    return float(np.median(scores.max(axis=1)))


def vectors_of_size(real: np.ndarray, n: int, cosine: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors: the real ones first, then noisy copies at about ``cosine`` from their source."""
    if n <= len(real):
        return real[:n]
    sigma = np.sqrt(1.0 / cosine**2 - 1.0)
    out = np.empty((n, real.shape[1]), np.float32)
    out[: len(real)] = real
    for start in range(len(real), n, FILL_BLOCK):
        stop = min(n, start + FILL_BLOCK)
        source = real[rng.integers(0, len(real), stop - start)]
        noisy = source + rng.standard_normal(source.shape, dtype=np.float32) * np.float32(sigma / np.sqrt(real.shape[1]))
        out[start:stop] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    return out


def fill(vectors: np.ndarray, approximate: bool) -> tuple[VectorIndex, float]:
    index = VectorIndex(vectors.shape[1], "faiss", 0, approximate_min=1 if approximate else 0)
    started = time.perf_counter()
    for start in range(0, len(vectors), FILL_BLOCK):
        block = vectors[start:start + FILL_BLOCK]
        index.add(np.arange(start + 1, start + 1 + len(block), dtype=np.int64), block)
    return index, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure(vectors: np.ndarray, queries: np.ndarray, exact_queries: int, efs: list[int]) -> dict[str, float]:
    """Fill both indexes, then per query: the approximate search at each graph search width and (for the
    first ``exact_queries``) the exact one, timed alternately; recall against a batched exact search."""
    exact, exact_s = fill(vectors, approximate=False)
    approx, approx_s = fill(vectors, approximate=True)
    assert approx._approx is not None and not exact.approximate
    with limit_threads(0):
        _, rows = exact._faiss.search(queries, K)  # ground truth for all queries in one batched scan
    truth = [set((r + 1).tolist()) for r in rows]  # ids were assigned 1..n in row order
    exact_queries = min(exact_queries, len(queries))
    timings = {"exact": np.full((PASSES, exact_queries), np.inf),
               **{f"approx_ef{ef}": np.full((PASSES, len(queries)), np.inf) for ef in efs}}
    hits = dict.fromkeys(efs, 0)
    with limit_threads(1):
        for round_ in range(PASSES):
            for i, q in enumerate(queries):
                for ef in efs:
                    ann.EF_SEARCH = ef
                    started = time.perf_counter()
                    got, _ = approx.search(q, K)
                    timings[f"approx_ef{ef}"][round_, i] = time.perf_counter() - started
                    if round_ == 0:
                        hits[ef] += len(set(got.tolist()) & truth[i])
                if i < exact_queries:
                    started = time.perf_counter()
                    exact.search(q, K)
                    timings["exact"][round_, i] = time.perf_counter() - started
    out = {"exact_fill_s": exact_s, "approx_build_s": approx_s, "groups": int(approx._approx.graph.ntotal),
           "largest_group": int(np.bincount(approx._approx.group).max())}
    for ef in efs:
        out[f"recall_at_10_ef{ef}"] = hits[ef] / (K * len(queries))
    for name, values in timings.items():
        for prefix, timed in (("", values.min(axis=0)), ("first_", values[0])):
            out[f"{prefix}{name}_p50_ms"] = statistics.median(timed.tolist()) * 1e3
            out[f"{prefix}{name}_p99_ms"] = percentile(timed.tolist(), 0.99) * 1e3
    return out


def corpora(real: np.ndarray, queries: np.ndarray, facts: dict, sizes: list[int], names: list[str], add: bool,
            no_write: bool) -> int:
    """The chosen :data:`CORPORA` at each size, side by side in one run; ``add``: beside the result file's
    other rows (a 1M row takes long enough to be run on its own)."""
    chosen = ann.EF_SEARCH
    efs = sorted({chosen, 2 * chosen})
    found: dict[str, float | int | str] = {"real_vectors": len(real), "queries": len(queries),
                                           "group_cosine": ann.GROUP_COSINE, "max_group": ann.MAX_GROUP,
                                           "max_scored": ann.MAX_SCORED, "hnsw_ef_search": chosen, "passes": PASSES}
    rows: list[list[str]] = []
    if add and (figures.RESULTS / "bench_index_corpora.json").exists():
        kept = figures.load_results().get("bench_index_corpora", {})
        found = {**kept.get("figures", {}), **found}
        rows = [row for row in kept.get("tables", {}).get("main", {}).get("rows", [])
                if (row[0], row[1]) not in {(name, _nodes(n)) for name in names for n in sizes}]
    for n in sizes:
        for name in names:
            cosine, per_sentence = CORPORA[name]
            distinct = real if per_sentence is None else real[:max(1, n // per_sentence)]
            vectors = vectors_of_size(distinct, n, cosine, np.random.default_rng(0))
            got = measure(vectors, queries, EXACT_QUERIES.get(n, 150), efs)
            del vectors
            ann.EF_SEARCH = chosen
            log.info("%s %s: %s", name, _nodes(n), {k: round(v, 4) for k, v in got.items()})
            for key, value in got.items():
                found[f"{key}.{name}.{_nodes(n)}"] = round(value, 4 if key.startswith("recall") else 2)
            found[f"real_vectors.{name}.{_nodes(n)}"] = min(n, len(distinct))
            rows.append([name, _nodes(n), f"{min(n, len(distinct)):,}",
                         f"{got['groups']:,} (largest {got['largest_group']})",
                         f"{got['approx_build_s']:,.0f}",
                         " / ".join(f"{got[f'recall_at_10_ef{ef}']:.4f}" for ef in efs),
                         f"{got['exact_p50_ms']:.2f} / {got['exact_p99_ms']:.2f}",
                         " · ".join(f"{got[f'approx_ef{ef}_p50_ms']:.2f} / {got[f'approx_ef{ef}_p99_ms']:.2f}"
                                    for ef in efs),
                         f"{got[f'first_approx_ef{chosen}_p50_ms']:.2f} / {got[f'first_approx_ef{chosen}_p99_ms']:.2f}",
                         f"{os.getloadavg()[0]:.1f}"])
            rows.sort(key=lambda row: (float(row[1][:-1]) * (1e6 if row[1].endswith("M") else 1e3), row[0]))
            table = {"columns": ["corpus", "nodes", "distinct real sentences", "groups", "grouped build s",
                                 "recall@10 (ef " + " / ".join(map(str, efs)) + ")", "exact p50 / p99 ms",
                                 "grouped p50 / p99 ms (ef " + " · ".join(map(str, efs)) + ")",
                                 f"the same, first timing (ef {chosen})", "load average"], "rows": rows}
            print(figures.table_text({"bench_index_corpora": {"tables": {"main": table}}}, "bench_index_corpora",
                                     "main"), flush=True)
            if not no_write:
                figures.write_result(
                    "bench_index_corpora", found, "python -m benchmarks.runs.bench_index --corpora --sizes "
                    + " ".join(map(str, sizes)) + (" --add" if add else ""), tables={"main": table},
                    note=(f"{len(real):,} real chit-chat sentences embedded with all-MiniLM-L6-v2 (of "
                          f"{facts['sentences_available']:,}; benchmarks/index_corpus.py). Duplicate-free: all of "
                          "them, then copies at cosine 0.80 from a random source. Duplicate-heavy: a 41st of the "
                          "size in distinct sentences, then copies at cosine 0.95, about 41 vectors per sentence. "
                          f"Queries: {len(queries)} sentences of held-out conversations, each asked {PASSES} "
                          "times: p50/p99 of each query's fastest timing, and of its first. Search on one FAISS "
                          "thread; the machine shared with other work."))
    return 0


def _nodes(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n / 1000:g}K"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--embed-budget", type=float, default=0.0,
                        help="seconds to spend embedding more real sentences first (default 0: use the cache)")
    parser.add_argument("--no-write", action="store_true", help="print only (tuning runs)")
    parser.add_argument("--add", action="store_true",
                        help="add these sizes (with --corpora: these corpora at these sizes) to the existing result "
                             "file instead of replacing it")
    parser.add_argument("--corpora", action="store_true",
                        help="the duplicate-free and duplicate-heavy corpora (CORPORA) → results/bench_index_corpora.json")
    parser.add_argument("--corpus", nargs="+", choices=list(CORPORA), default=list(CORPORA),
                        help="with --corpora: these corpora only (default both)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    real, queries, facts = embedded(args.embed_budget)
    if args.corpora:
        return corpora(real, queries, facts, args.sizes, args.corpus, args.add, args.no_write)
    rng = np.random.default_rng(0)
    nn_cosine = copy_cosine(real, rng)
    log.info("%d real vectors, %d queries, median nearest-neighbour cosine %.3f", len(real), len(queries), nn_cosine)
    found: dict[str, float | int | str] = {"real_vectors": len(real), "queries": len(queries),
                                           "copy_cosine": COPY_COSINE, "real_nn_cosine": round(nn_cosine, 3),
                                           "group_cosine": ann.GROUP_COSINE, "probe_groups": ann.PROBE_GROUPS,
                                           "hnsw_m": ann.M, "hnsw_ef_construction": ann.EF_CONSTRUCTION,
                                           "hnsw_ef_search": ann.EF_SEARCH,
                                           "sentences_available": facts["sentences_available"]}
    chosen = ann.EF_SEARCH
    efs = sorted({chosen // 2, chosen, 2 * chosen})
    rows: list[list[str]] = []
    previous = figures.RESULTS / "bench_index.json"
    if args.add and previous.exists():
        kept = figures.load_results().get("bench_index", {})
        found = {**kept.get("figures", {}), **found}
        rows = [row for row in kept.get("tables", {}).get("main", {}).get("rows", [])
                if row[0] not in {_nodes(n) for n in args.sizes}]
    for n in args.sizes:
        vectors = vectors_of_size(real, n, COPY_COSINE, rng)
        got = measure(vectors, queries, EXACT_QUERIES.get(n, 150), efs)
        del vectors
        ann.EF_SEARCH = chosen
        log.info("%s: %s", _nodes(n), {k: round(v, 4) for k, v in got.items()})
        for key, value in got.items():
            found[f"{key}.{_nodes(n)}"] = round(value, 4 if key.startswith("recall") else 2)
        found[f"real_vectors.{_nodes(n)}"] = min(n, len(real))
        found[f"load_average.{_nodes(n)}"] = round(os.getloadavg()[0], 1)
        rows.append([_nodes(n), f"{min(n, len(real)):,}", f"{got['exact_fill_s']:.1f} / {got['approx_build_s']:.1f}",
                     f"{got['groups']:,}", f"{got[f'recall_at_10_ef{chosen}']:.4f}",
                     f"{got['exact_p50_ms']:.2f} / {got['exact_p99_ms']:.2f}",
                     f"{got[f'approx_ef{chosen}_p50_ms']:.2f} / {got[f'approx_ef{chosen}_p99_ms']:.2f}",
                     f"{os.getloadavg()[0]:.1f}"])
        rows.sort(key=lambda row: float(row[0][:-1]) * (1e6 if row[0].endswith("M") else 1e3))
        table = {"columns": ["nodes", "of them real sentences", "fill s, exact / grouped", "groups",
                             f"recall@10 (ef {chosen})", "exact p50 / p99 ms", "grouped p50 / p99 ms",
                             "load average"], "rows": rows}
        print(figures.table_text({"bench_index": {"tables": {"main": table}}}, "bench_index", "main"), flush=True)
        if not args.no_write:  # after each size: a run stopped at 1M keeps the smaller ones
            figures.write_result(
                "bench_index", found, "python -m benchmarks.runs.bench_index", tables={"main": table},
                note=(f"{len(real):,} real chit-chat sentences embedded with all-MiniLM-L6-v2 (of "
                      f"{facts['sentences_available']:,}); larger sizes add noisy copies of them at cosine "
                      f"{COPY_COSINE} to their source. Queries: {len(queries)} sentences of held-out "
                      "conversations. Search on one FAISS thread; fills on the default threads."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
