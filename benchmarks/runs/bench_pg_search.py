"""One user's search on the two persistence backends: pgvector's HNSW index in PostgreSQL against SQLite's
grouped HNSW index in process, recall@10 and single-query latency (p50, p99), side by side in one run.

Run: ``python -m benchmarks.runs.bench_pg_search [--sizes 100000] [--queries 300] [--ef-search 200 400]
[--name bench_pg_search]`` (writes ``results/NAME.json`` through :func:`benchmarks.tools.figures.write_result`). PostgreSQL is
the server ``PROMEM_TEST_PG_URL`` names, else one started from the pgserver wheel in a temporary folder.

The vectors (384 dims, normalised) are noisy copies of 2,000 random centres at cosine about 0.9 to their
centre: clustered, as sentence embeddings of one person's memories are. Each backend holds one user of
``size`` vectors, written through :func:`~promem_fast.persistence.rows.insert_session` in sessions of 1,000
nodes; the index is then built (the timed ``build_s``: pgvector's ``CREATE INDEX ... USING hnsw`` over the
typed column and ``ANALYZE``, as an import ends, with the store's build parameters, recorded as ``hnsw``; the
grouped graph on SQLite's first search). Queries are further noisy copies; recall@10
counts the ids of each backend's top 10 found in the exact top 10 (numpy, float64). Latency is
``Persistence.nearest(user, query, 10)`` as the store calls it, both backends timed alternately query by
query, the order turned by one each query (a query's first store reads the pages the next ones find cached).
``--ef-search`` adds pgvector's search width at other values, one width for the user whatever its size, beside
the product's, which follows the user's size (``postgresql_efN``: the same database and index, another
connection pool, timed in the same alternation). ``--builds 16:128`` then builds the product's index again
with other pgvector build parameters (``m``, ``ef_construction``), as ``promem migrate --hnsw-m
--hnsw-ef-construction`` does, and searches it alone (``postgresql_mM_efcN``: not alternated with the others;
``build_s`` is the concurrent rebuild). After each PostgreSQL index is searched, ``--inserts N`` sessions of
:data:`INSERTED_NODES` new vectors are written one by one into it, as extraction adds them (``insert_ms``: the
median session's commit, the index updated in it; ``insert_p99_ms``), then deleted again one by one
(``delete_ms``, the median), so the next build indexes the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.tools import figures
from promem_fast.persistence import rows
from promem_fast.persistence.opening import open_persistence
from promem_fast.persistence.postgres import EF_SEARCH, PostgresPersistence, search_width

DIM = 384
CENTRES = 2000
K = 10
INSERTED_NODES = 40
"""Nodes per inserted session (``--inserts``): about what one extracted session adds."""
BUILD_MEMORY = "4GB"
"""``maintenance_work_mem`` for the index build: 1M vectors of 384 dims and their links take about 2 GB."""


def vectors(n: int, centres: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    picked = centres[rng.integers(0, len(centres), n)]
    noisy = picked + rng.normal(0, 0.5 / np.sqrt(DIM), (n, DIM)).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def record(session_id: str, first: int, count: int) -> dict[str, object]:
    return {"session_id": session_id, "timestamp": None, "mode": "promem",
            "nodes": [{"id": i, "text": f"memory {first + i}", "turn_ids": [], "details": []} for i in range(count)],
            "edges": [], "details": [], "events": [], "stats": {}}


def fill(db: object, data: np.ndarray) -> None:
    with db.transaction() as tx:  # type: ignore[attr-defined]
        tx.execute("INSERT INTO meta (key, value) VALUES ('dim', ?) ON CONFLICT DO NOTHING", (str(DIM),))
        user = rows.ensure_user(tx, "bench", "u")
    for start in range(0, len(data), 1000):
        block = data[start:start + 1000]
        with db.transaction() as tx:  # type: ignore[attr-defined]
            rows.insert_session(tx, user, record(f"s{start // 1000}", start, len(block)), block)


def timed_inserts(db: object, sessions: int, centres: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """Median and p99 milliseconds to commit one session of :data:`INSERTED_NODES` new vectors into the
    indexed table, one session after another, then the median to delete one of them again
    (:func:`timed_deletes`)."""
    added = []
    for n in range(sessions):
        block = vectors(INSERTED_NODES, centres, rng)
        started = time.perf_counter()
        with db.transaction() as tx:  # type: ignore[attr-defined]
            rows.insert_session(tx, 1, record(f"added{n}", n * INSERTED_NODES, INSERTED_NODES), block)
        added.append(time.perf_counter() - started)
    deleted = timed_deletes(db, range(sessions))
    return {"insert_ms": round(1000 * statistics.median(added), 1), "insert_p99_ms": round(1000 * percentile(added), 1),
            "delete_ms": round(1000 * statistics.median(deleted), 1)}


def timed_deletes(db: object, numbers: range) -> list[float]:
    """Seconds to delete each session ``added{n}`` of the first user, one by one, as the store deletes a
    session (one statement; the nodes, their links and their full text go by cascade)."""
    times = []
    for n in numbers:
        started = time.perf_counter()
        with db.transaction() as tx:  # type: ignore[attr-defined]
            tx.execute("DELETE FROM sessions WHERE user_id = ? AND session_id = ?", (1, f"added{n}"))
        times.append(time.perf_counter() - started)
    return times


def percentile(times: list[float], share: float = 0.99) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def exact_top(asked: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Each query's exact top ``K`` node ids (float64 scores), a block of queries at a time (a million scores
    per query)."""
    full = data.astype(np.float64)
    tops = []
    for start in range(0, len(asked), 50):
        scores = asked[start:start + 50].astype(np.float64) @ full.T
        part = np.argpartition(-scores, K, axis=1)[:, :K]
        order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1)
        tops.append(np.take_along_axis(part, order, axis=1) + 1)  # node ids start at 1
    return np.concatenate(tops)


def timed_searches(db: object, asked: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    """Recall@10 and p50/p99 of ``db``'s searches of ``asked``, one after another."""
    times, hits = [], 0
    for row, query in enumerate(asked):
        started = time.perf_counter()
        ids, _ = db.nearest(1, query, K)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - started)
        hits += len(set(ids.tolist()) & set(exact[row].tolist()))
    return summary(sorted(times), hits, len(asked))


def summary(ordered: list[float], hits: int, queries: int) -> dict[str, float]:
    return {"recall_at_10": round(hits / (K * queries), 4), "p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * percentile(ordered), 2)}


def measure(size: int, queries: int, pg_url: str, folder: Path, rng: np.random.Generator,
            widths: list[int], builds: list[tuple[int, int]], sqlite: bool = True, inserts: int = 0
            ) -> dict[str, object]:
    centres = rng.normal(size=(CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    data = vectors(size, centres, rng)
    asked = vectors(queries, centres, rng)
    exact = exact_top(asked, data)
    out: dict[str, object] = {"nodes": size, "queries": queries}
    stores = {"sqlite": open_persistence(folder / f"bench-{size}.db", search_approximate_min=1)} if sqlite else {}
    stores["postgresql"] = open_persistence(pg_url, search_approximate_min=1)
    try:
        for name, db in stores.items():
            started = time.perf_counter()
            fill(db, data)
            loaded = time.perf_counter() - started
            started = time.perf_counter()
            if name == "postgresql":
                db.dim_recorded(DIM)
                db.analyze()  # as an import ends: without statistics the planner sorts the user's rows instead
            else:
                db.nearest(1, asked[0], K)  # builds the grouped graph
            width = search_width(size, EF_SEARCH, K + 16) if name == "postgresql" else None  # as nearest asks
            out[name] = {"ef_search": width, "load_s": round(loaded, 1),
                         "build_s": round(time.perf_counter() - started, 1)}
            if name == "postgresql":
                out[name]["hnsw"] = db.index_build()  # type: ignore[attr-defined]  # the store's, as built
        for width in sorted(set(widths)):  # the same index, searched at one width
            stores[f"postgresql_ef{width}"] = PostgresPersistence(pg_url, approximate_min=1, ef_search=width,
                                                                  narrow_width=width)
            out[f"postgresql_ef{width}"] = {"ef_search": width, "load_s": None, "build_s": None}
        times: dict[str, list[float]] = {name: [] for name in stores}
        hits: dict[str, int] = {name: 0 for name in stores}
        names = list(stores)
        for row, query in enumerate(asked):
            turn = row % len(names)  # each store first as often: the first to ask reads pages the others find cached
            for name in names[turn:] + names[:turn]:
                db = stores[name]
                started = time.perf_counter()
                ids, _ = db.nearest(1, query, K)
                times[name].append(time.perf_counter() - started)
                hits[name] += len(set(ids.tolist()) & set(exact[row].tolist()))
        for name in stores:
            out[name].update(summary(sorted(times[name]), hits[name], queries))  # type: ignore[union-attr]
        pg = stores["postgresql"]
        if inserts:
            out["postgresql"].update(timed_inserts(pg, inserts, centres, rng))  # type: ignore[union-attr]
        for m, ef_construction in builds:  # the product's index built again (promem migrate --hnsw-...)
            started = time.perf_counter()
            pg.rebuild_index(m, ef_construction)  # type: ignore[attr-defined]
            pg.analyze()  # type: ignore[attr-defined]
            out[f"postgresql_m{m}_efc{ef_construction}"] = {
                "ef_search": out["postgresql"]["ef_search"], "load_s": None,  # type: ignore[index]
                "build_s": round(time.perf_counter() - started, 1), **timed_searches(pg, asked, exact)}
            if inserts:
                out[f"postgresql_m{m}_efc{ef_construction}"].update(  # type: ignore[union-attr]
                    timed_inserts(pg, inserts, centres, rng))
    finally:
        for db in stores.values():
            db.close()
    out["load_average"] = round(os.getloadavg()[0], 1)
    return out


def write(results: list[dict[str, object]], command: str, file_name: str = "bench_pg_search") -> None:
    """``results/NAME.json``: per size and backend, recall@10, p50/p99 and the seconds to load and
    index, as figures and one table."""
    found: dict[str, object] = {}
    rows = []
    for result in results:
        size = result["nodes"]
        found[f"{size}.load_average"] = result["load_average"]
        for name in [*(["sqlite"] if "sqlite" in result else []), "postgresql", *sorted((k for k in result if k.startswith("postgresql_ef")),
                                                     key=lambda k: int(k.removeprefix("postgresql_ef"))),
                     *(k for k in result if k.startswith("postgresql_m"))]:
            for key, value in result[name].items():  # type: ignore[union-attr]
                if value is not None:
                    found[f"{size}.{name}.{key}"] = value
            got = result[name]
            rows.append([f"{size:,}", name, *("—" if v is None else v for v in (  # type: ignore[index]
                got["ef_search"], got["recall_at_10"], got["p50_ms"], got["p99_ms"],  # type: ignore[index]
                got["load_s"], got["build_s"], got.get("insert_ms"), got.get("insert_p99_ms"),  # type: ignore[index]
                got.get("delete_ms"))),
                result["load_average"]])
    figures.write_result(file_name, found, command, tables={"main": {
        "columns": ["nodes", "backend", "ef_search", "recall@10", "p50 ms", "p99 ms", "load s", "index s",
                    "insert ms", "insert p99 ms", "delete ms", "load average"],
        "rows": rows}},
        note="One user; synthetic clustered vectors (2,000 centres, cosine about 0.9), 384 dims; both backends "
             "approximate (SQLite: grouped HNSW in process; PostgreSQL: pgvector 0.6 HNSW at the ef_search "
             f"of each row (the product's follows the user's size, up to {EF_SEARCH}), built with "
             f"maintenance_work_mem {BUILD_MEMORY} and one parallel worker); queries timed alternately, in a turning "
             "order, on 2 CPU cores; rows postgresql_mM_efcN: the index built again with pgvector's m and "
             "ef_construction after the alternated queries, then searched alone; insert ms: one session of "
             f"{INSERTED_NODES} new vectors committed into that index (median, p99 of --inserts sessions, then "
             "deleted one by one, delete ms their median); the load average at the end of each size is a figure.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--ef-search", type=int, nargs="*", default=[],
                        help="pgvector search widths measured beside the product's")
    parser.add_argument("--builds", nargs="*", default=[], metavar="M:EF_CONSTRUCTION",
                        help="after the side-by-side queries, build the PostgreSQL index again with these "
                             "pgvector build parameters, one after another, and search it alone at the product's width")
    parser.add_argument("--without-sqlite", action="store_true",
                        help="PostgreSQL alone (the SQLite side's figures are in another run's file)")
    parser.add_argument("--inserts", type=int, default=0,
                        help=f"sessions of {INSERTED_NODES} vectors timed into each PostgreSQL index, then deleted")
    parser.add_argument("--name", default="bench_pg_search", help="the result file (results/NAME.json)")
    args = parser.parse_args()
    from promem_fast.testing.pg_server import Server  # PROMEM_TEST_PG_URL, else the pgserver wheel

    server = Server()
    rng = np.random.default_rng(11)
    results = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            for size in args.sizes:
                url = server.fresh_database()
                for setting in (f"maintenance_work_mem = '{BUILD_MEMORY}'", "max_parallel_maintenance_workers = 1"):
                    server.alter_database(url, setting)
                builds = [tuple(int(x) for x in b.split(":")) for b in args.builds]
                results.append(measure(size, args.queries, url, Path(folder), rng, args.ef_search,
                                       builds, sqlite=not args.without_sqlite,  # type: ignore[arg-type]
                                       inserts=args.inserts))
                server.drop(url)
                print(json.dumps(results[-1]), flush=True)
                write(results, "python -m benchmarks.runs.bench_pg_search " + " ".join(sys.argv[1:]), args.name)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
