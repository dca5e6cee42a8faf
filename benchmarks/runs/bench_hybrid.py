"""The hybrid search's cost at 100K and 1M memories of one user, over the store's own grouped HNSW index: the
dense side alone against dense + BM25.

Run: ``python -m benchmarks.runs.bench_hybrid`` (writes ``results/bench_hybrid.json``; ``--sizes 100000`` for
one size, ``--add`` to add it to the file's other sizes).

The corpus: the real chit-chat sentences :mod:`~benchmarks.common.index_corpus` has embedded with the shipped
all-MiniLM-L6-v2 (run it first: ``python -m benchmarks.common.index_corpus``), each memory's text and its
own vector; past their number, *noisy copies* as ``bench_index`` makes them (a real sentence's vector plus
Gaussian noise at cosine ``bench_index.COPY_COSINE`` to it), whose text is that sentence joined to another
random one (a restated fact with something added), labelled in the results. Each memory's source (the
owner's words it was taken from, which the lexical side reads too) is its own text and the next memory's, as a
turn holds a few sentences (:func:`said`), and its exchange (the other speaker's words around it, read too)
the memories' before and two after it (:func:`heard`). For each size a store file
(the real schema, so the real FTS5 table and its triggers) is filled with them in one transaction, its
grouped HNSW index built by the store's own first search and saved beside it, both kept in the git-ignored
``benchmarks/.cache/bench_hybrid/`` (a rerun measures them again without the hours of building).

Then, query by query and alternately, on one thread:

- ``dense``: the store's dense side alone (the grouped HNSW graph, the scope filter, the candidate depth the
  hybrid search takes: 100);
- ``lexical``: the FTS5 side alone (:meth:`~promem_fast.persistence.sqlite.SqlitePersistence.lexical`,
  depth 100);
- ``hybrid``: :func:`~promem_fast.store.hybrid.candidates` with every ranking part on, k = 10: both sides,
  the scope filter, the candidates' vectors and dates read, fusion and near-duplicate collapse;
- ``hybrid_without_lexical``: the same with the lexical side off (a dense search as the store makes it);
- ``hybrid_without_dense``: the same with the dense side off: the lexical side, the reads of its candidates
  and the fusion, what it adds to a dense search at most;
- ``hybrid_without_expiry``: ``hybrid`` without the check that a memory's session is not past its
  ``expiration_date`` (one lookup of the session's metadata per candidate), what that check costs.

Queries are held-out sentences (their words for BM25, their MiniLM query vector for the dense side; the
embedder is left out of the timing). ``bm25_answers_share``: the share of questions for which BM25 finds any
memory of the user (a larger store makes more of a question's words common, left to the dense side), and
``bm25_candidates_median`` the median number it finds. Each query is asked three times (``PASSES``, the queries in the same
order each pass): ``first`` is its first timing, ``fastest`` the fastest of the three, the figure on a
machine whose other work preempts a query now and then. p50 and p99 in milliseconds over ``QUERIES``
queries, after ``WARMUP`` untimed ones. These run with the store file in the operating system's page cache.

Before them, the *cold start* (:func:`cold_start`): the file's pages dropped from the page cache
(``POSIX_FADV_DONTNEED``), as on a machine just started, the store opened and its index loaded as a service's
first search loads it, and the same questions asked once each with the hybrid search, one every
``COLD_PACE_S`` at most, with the store's read-ahead of the file (:mod:`promem_fast.persistence.pagecache`)
off and on, alternating: p50, p90 and p99 of each setting.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.common.index_corpus import embedded, sentences
from benchmarks.common.measure import limit_threads
from benchmarks.common.paths import ROOT
from benchmarks.runs.bench_index import COPY_COSINE, _nodes
from benchmarks.tools import figures
from promem_fast.config import EngineConfig
from promem_fast.persistence.lexical import terms
from promem_fast.persistence.timeline import validity
from promem_fast.store import MemoryStore
from promem_fast.store.filters import visible
from promem_fast.store.hybrid import _dense, candidates

log = logging.getLogger(__name__)

CACHE = ROOT / "benchmarks" / ".cache" / "bench_hybrid"
SIZES = (10_000, 100_000, 1_000_000)
QUERIES = 300
WARMUP = 20
PASSES = 3
COLD_RUNS = 2
COLD_PACE_S = 0.05
"""The cold start's questions come one every 50 ms at most, as to a service, not back to back."""
DEPTH = 100
SESSION_NODES = 50
WAYS = ("dense", "lexical", "hybrid", "hybrid_without_lexical", "hybrid_without_dense", "hybrid_without_expiry")


class FixedQueries:
    """The query vector the next search embeds (set per query), so the timing leaves the embedder out."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.next = np.zeros(dim, np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.tile(self.next, (len(texts), 1))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def corpus(texts: list[str], vectors: np.ndarray, n: int) -> tuple[list[str], np.ndarray]:
    """``n`` memories: the embedded real sentences first, then noisy copies (text: the source sentence and
    another one joined; vector: the source's at about ``COPY_COSINE``)."""
    real = min(n, len(vectors))
    if n <= real:
        return texts[:n], vectors[:n]
    rng = np.random.default_rng(n)
    source = rng.integers(0, real, n - real)
    other = rng.integers(0, real, n - real)
    sigma = np.float32(np.sqrt(1.0 / COPY_COSINE**2 - 1.0) / np.sqrt(vectors.shape[1]))
    noisy = vectors[source] + rng.standard_normal((n - real, vectors.shape[1]), dtype=np.float32) * sigma
    out = np.concatenate([vectors[:real], noisy / np.linalg.norm(noisy, axis=1, keepdims=True)])
    return texts[:real] + [f"{texts[s]} {texts[o]}" for s, o in zip(source, other, strict=True)], out


def said(texts: list[str], i: int) -> str:
    """Memory ``i``'s source: its text and the next memory's (the turn it came from, about two sentences)."""
    return f"{texts[i]} {texts[(i + 1) % len(texts)]}"


def heard(texts: list[str], i: int) -> str:
    """Memory ``i``'s exchange: the texts of the memories before it and two after it (the other speaker's
    message before the turn and the reply after it)."""
    return f"{texts[i - 1]} {texts[(i + 2) % len(texts)]}"


def fill(path: Path, texts: list[str], vectors: np.ndarray) -> float:
    """One user's memories written straight into a fresh store (real schema and triggers); seconds taken."""
    from promem_fast.persistence.schema import connect

    started = time.perf_counter()
    db = connect(path)
    db.execute("BEGIN")
    db.execute("INSERT INTO meta (key, value) VALUES ('dim', ?)", (str(vectors.shape[1]),))
    db.execute("INSERT INTO tenants (name) VALUES ('default')")
    db.execute("INSERT INTO users (tenant_id, name) VALUES (1, 'Maya')")
    for lo in range(0, len(texts), SESSION_NODES):
        part = texts[lo:lo + SESSION_NODES]
        day = f"2025-{1 + (lo // SESSION_NODES) % 12:02d}-{1 + (lo // SESSION_NODES) % 28:02d}T10:00:00"
        session = db.execute("INSERT INTO sessions (user_id, session_id, timestamp, mode, events, stats, said_at, "
                             "recorded_at) VALUES (1, ?, ?, 'promem', '[]', '{}', ?, ?)",
                             (f"s{lo}", day, day, day)).lastrowid
        db.executemany("INSERT INTO nodes (session_pk, user_id, local_id, text, turn_id, date, data, vector, "
                       "valid_from) VALUES (?, 1, ?, ?, NULL, ?, ?, ?, ?)",
                       [(session, i, text, day, json.dumps({"source": said(texts, lo + i), "exchange": heard(texts, lo + i)}),
                         vectors[lo + i].tobytes(), day) for i, text in enumerate(part)])
    db.execute("COMMIT")
    db.close()
    return time.perf_counter() - started


def built(n: int, real: int, texts: list[str], vectors: np.ndarray) -> tuple[Path, dict[str, float]]:
    """The cached store of ``n`` memories (``real`` of them real sentences) and its saved grouped index,
    written first if absent or made from another number of real sentences; what writing them took (read
    back from the cache's record on a rerun)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path, record = CACHE / f"store-{n}.db", CACHE / f"store-{n}.json"
    kept = json.loads(record.read_text()) if path.exists() and record.exists() else {}
    if kept.get("real_sentences") == real and kept.get("sources") and kept.get("exchanges"):
        return path, kept
    for stale in CACHE.glob(f"store-{n}.db*"):
        if stale.is_file():
            stale.unlink()
    facts = {"real_sentences": float(real), "sources": 1.0, "exchanges": 1.0,
             "store_fill_s": fill(path, texts, vectors)}
    log.info("store of %d memories written in %.0f s", n, facts["store_fill_s"])
    with MemoryStore(path, config(), embedder=FixedQueries(vectors.shape[1]), update_judge="off") as store:
        started = time.perf_counter()
        index = store.db.index(1)  # type: ignore[attr-defined]  # SQLite's own, saved on close
        facts["index_build_s"] = time.perf_counter() - started
        facts["groups"] = float(index._approx.graph.ntotal) if index._approx is not None else float(len(index))
    log.info("grouped index of %d vectors built in %.0f s", n, facts["index_build_s"])
    record.write_text(json.dumps(facts))
    return path, facts


def config() -> EngineConfig:
    found = EngineConfig.profile("scripted")
    found.search_approximate_min = 1  # the grouped HNSW graph at every size measured (the default from 50K)
    return found


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def evicted(path: Path) -> None:
    """Drop the store file's pages from the operating system's cache, as after a restart of the machine."""
    for part in (path, Path(f"{path}-wal")):
        if part.is_file():
            fd = os.open(part, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def cold_start(path: Path, asked: list[str], vectors: np.ndarray) -> dict[str, float]:
    """The hybrid search's first ``QUERIES`` questions on a store whose file is out of the page cache (a
    service just started), with the store's read-ahead (:mod:`promem_fast.persistence.pagecache`) off and on,
    each ``COLD_RUNS`` times in the order off, on, on, off: p50/p99 of each setting's pooled timings, and the
    seconds the read-ahead took (it runs while the questions are asked)."""
    scope = validity(None, None, None)
    times: dict[str, list[float]] = {"off": [], "on": []}
    read_s: list[float] = []
    for setting in ("off", "on", "on", "off")[:2 * COLD_RUNS]:
        evicted(path)
        embedder = FixedQueries(vectors.shape[1])
        with MemoryStore(path, config(), embedder=embedder, update_judge="off", read_only=True) as store:
            store.db.read_ahead = setting == "on"  # type: ignore[attr-defined]
            started = time.perf_counter()
            store.db.index(1)  # type: ignore[attr-defined]  # the index file, read as a service's first search does
            with limit_threads(1):
                for n, question in enumerate(asked[WARMUP:], start=WARMUP):
                    embedder.next = vectors[n]
                    began = time.perf_counter()
                    candidates(store, 1, "Maya", question, 10, scope)
                    times[setting].append(time.perf_counter() - began)
                    time.sleep(max(0.0, COLD_PACE_S - (time.perf_counter() - began)))
            thread = store.db.reading_ahead  # type: ignore[attr-defined]
            if thread is not None:
                thread.join()
                read_s.append(time.perf_counter() - started)
    found = {f"cold_{name}_{q}_ms": percentile(values, int(q[1:])) for name, values in times.items()
             for q in ("p50", "p90", "p99")}
    if read_s:  # a file small enough is not read ahead at all
        found["cold_read_ahead_s"] = float(np.median(read_s))
    return found


def measure(path: Path, asked: list[str], vectors: np.ndarray) -> dict[str, float]:
    embedder = FixedQueries(vectors.shape[1])
    with MemoryStore(path, config(), embedder=embedder, update_judge="off", read_only=True) as store:
        started = time.perf_counter()
        index = store.db.index(1)  # type: ignore[attr-defined]
        log.info("index of %d vectors read in %.1f s (approximate: %s)", len(index), time.perf_counter() - started,
                 index.approximate)
        assert index.approximate, "the grouped HNSW index is what this measures"
        if store.db.reading_ahead is not None:  # type: ignore[attr-defined]
            store.db.reading_ahead.join()  # type: ignore[attr-defined]  # the file cached: the cold start is apart
        with limit_threads(1):
            return timed(store, embedder, asked, vectors)


def timed(store: MemoryStore, embedder: FixedQueries, asked: list[str], vectors: np.ndarray) -> dict[str, float]:
    """p50/p99 of each way of searching, timed alternately query by query: first timing and fastest of
    ``PASSES``. The hybrid ways search the memories the store's own search sees (:func:`.filters.visible`:
    current and not past an expiry); ``hybrid_without_expiry`` leaves the expiry check out."""
    scope, unexpiring = visible(None, None, None), validity(None, None, None)
    full = store.config.ranking
    ranking = {"hybrid_without_dense": dataclasses.replace(full, dense=False),
               "hybrid_without_lexical": dataclasses.replace(full, lexical=False)}
    times = {name: np.full((PASSES, len(asked) - WARMUP), np.inf) for name in WAYS}
    found_by_bm25: list[int] = []  # BM25's candidates per question: how much the lexical side still finds
    for round_ in range(PASSES):
        for n, question in enumerate(asked if round_ == 0 else asked[WARMUP:], start=0 if round_ == 0 else WARMUP):
            embedder.next = vectors[n]
            words = terms(question, {"maya"})
            runs = {"dense": lambda: _dense(store, 1, embedder.next, DEPTH, *scope),
                    "lexical": lambda: store.db.lexical(1, words, DEPTH),
                    **dict.fromkeys(WAYS[2:5], lambda: candidates(store, 1, "Maya", question, 10, scope)),
                    "hybrid_without_expiry": lambda: candidates(store, 1, "Maya", question, 10, unexpiring)}
            for name in (WAYS if n % 2 else WAYS[::-1]):
                store.config.ranking = ranking.get(name, full)
                started = time.perf_counter()
                answer = runs[name]()
                if n >= WARMUP:
                    times[name][round_, n - WARMUP] = time.perf_counter() - started
                    if round_ == 0 and name == "lexical":
                        found_by_bm25.append(len(answer))
        store.config.ranking = full
    found = {"bm25_answers_share": float(np.mean(np.array(found_by_bm25) > 0)),
             "bm25_candidates_median": float(np.median(found_by_bm25))}
    for name, values in times.items():
        fastest = values.min(axis=0)
        found[f"{name}_p50_ms"], found[f"{name}_p99_ms"] = percentile(fastest, 50), percentile(fastest, 99)
        found[f"first_{name}_p50_ms"] = percentile(values[0], 50)
        found[f"first_{name}_p99_ms"] = percentile(values[0], 99)
    for q in ("p50", "p99"):  # what turning the lexical side on adds to the store's dense search
        found[f"lexical_adds_{q}_ms"] = found[f"hybrid_{q}_ms"] - found[f"hybrid_without_lexical_{q}_ms"]
        found[f"expiry_adds_{q}_ms"] = found[f"hybrid_{q}_ms"] - found[f"hybrid_without_expiry_{q}_ms"]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--add", action="store_true", help="add these sizes to the result file's others")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    real_vectors, query_vectors, facts = embedded(0.0)
    texts, asked = sentences(len(query_vectors))
    asked, query_vectors = asked[:WARMUP + QUERIES], query_vectors[:WARMUP + QUERIES]
    found: dict[str, float | int] = {"queries": QUERIES, "passes": PASSES, "depth": DEPTH,
                                     "copy_cosine": COPY_COSINE, "real_sentences": len(real_vectors)}
    rows: list[list[str]] = []
    if args.add and (figures.RESULTS / "bench_hybrid.json").exists():
        kept = figures.load_results().get("bench_hybrid", {})
        found = {**kept.get("figures", {}), **found}
        rows = [row for row in kept.get("tables", {}).get("main", {}).get("rows", [])
                if row[0] not in {_nodes(n) for n in args.sizes}]
    for n in args.sizes:
        path, building = built(n, min(n, len(real_vectors)), *corpus(texts, real_vectors, n))
        got = {**cold_start(path, asked, query_vectors), **measure(path, asked, query_vectors), **building}
        log.info("%s: %s", _nodes(n), {k: round(v, 3) for k, v in got.items()})
        for key, value in got.items():
            found[f"{key}.{_nodes(n)}"] = round(value, 2)
        found[f"load_average.{_nodes(n)}"] = round(os.getloadavg()[0], 1)

        def cold(setting: str) -> str:
            return " / ".join(f"{got[f'cold_{setting}_{q}_ms']:.2f}" for q in ("p50", "p90", "p99"))

        def pair(name: str, first: bool = False) -> str:
            prefix = "first_" if first else ""
            return f"{got[f'{prefix}{name}_p50_ms']:.2f} / {got[f'{prefix}{name}_p99_ms']:.2f}"

        rows.append([_nodes(n), f"{min(n, len(real_vectors)):,}", pair("dense"), pair("lexical"),
                     pair("hybrid_without_lexical"), pair("hybrid"), pair("hybrid_without_dense"),
                     pair("hybrid_without_dense", first=True), cold("off"), cold("on"),
                     f"{got['bm25_answers_share']:.0%} / {got['bm25_candidates_median']:.0f}",
                     f"{os.getloadavg()[0]:.1f}"])
        rows.sort(key=lambda row: float(row[0][:-1]) * (1e6 if row[0].endswith("M") else 1e3))
        table = {"columns": ["memories", "of them real sentences", "grouped HNSW, depth 100", "BM25, depth 100",
                             "search, lexical side off", "hybrid search", "hybrid less the dense side",
                             "the same, first timing", "hybrid search, file out of the page cache (p50 / p90 / p99)",
                             "the same, read ahead", "questions BM25 answers / its median candidates",
                             "load average"], "rows": rows}
        print(figures.table_text({"bench_hybrid": {"tables": {"main": table}}}, "bench_hybrid", "main"), flush=True)
        if not args.no_write:
            figures.write_result(
                "bench_hybrid", found, "python -m benchmarks.runs.bench_hybrid", tables={"main": table},
                note=(f"One user; {len(real_vectors):,} real chit-chat sentences with their all-MiniLM-L6-v2 vectors "
                      f"(of {facts['sentences_available']:,}), then noisy copies at cosine {COPY_COSINE} (text: "
                      f"the source sentence joined to another; its source: its text and the next memory's); the store's "
                      f"grouped HNSW index; {QUERIES} held-out "
                      f"sentences as queries, each asked {PASSES} times: p50/p99 of each query's fastest, and of "
                      "its first timing, with the store file in the page cache; then the cold start (file out of the "
                      "page cache, read-ahead off and on); one thread."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
