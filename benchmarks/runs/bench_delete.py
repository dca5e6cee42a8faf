"""Deleting a session from a large user, with and without the index of ``nodes.merged_into``, side by side.

Run: ``python -m benchmarks.runs.bench_delete [--sizes 100000] [--sessions 10]`` (writes
``results/bench_delete.json``). PostgreSQL is the server ``PROMEM_TEST_PG_URL`` names, else one started from the
pgserver wheel.

Each backend holds one user of ``size`` vectors (:func:`~benchmarks.runs.bench_pg_search.fill`), then
``2 x sessions`` sessions of 40 more. Half of them are deleted one by one with the index dropped (the schema
before SQLite's version 5 and PostgreSQL's version 4), the other half after it is made again; each delete is the
store's own statement (the nodes, links and full text go by cascade, and ``merged_into`` is set to NULL in any
node merged into one of them, which is what reads the node table when nothing indexes the column).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.runs.bench_pg_search import CENTRES, DIM, INSERTED_NODES, fill, record, timed_deletes, vectors
from benchmarks.tools import figures
from promem_fast.persistence import rows
from promem_fast.persistence.opening import open_persistence


def median_ms(times: list[float]) -> float:
    return round(1000 * statistics.median(times), 1)


def measure(db: object, size: int, sessions: int, rng: np.random.Generator) -> dict[str, float]:
    centres = rng.normal(size=(CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    fill(db, vectors(size, centres, rng))
    for n in range(2 * sessions):
        with db.transaction() as tx:  # type: ignore[attr-defined]
            rows.insert_session(tx, 1, record(f"added{n}", n * INSERTED_NODES, INSERTED_NODES),
                                vectors(INSERTED_NODES, centres, rng))
    with db.transaction() as tx:  # type: ignore[attr-defined]
        tx.execute("DROP INDEX nodes_merged")
    without = median_ms(timed_deletes(db, range(sessions)))
    with db.transaction() as tx:  # type: ignore[attr-defined]
        tx.execute("CREATE INDEX nodes_merged ON nodes (merged_into)")
    indexed = median_ms(timed_deletes(db, range(sessions, 2 * sessions)))
    return {"delete_ms_without_index": without, "delete_ms": indexed, "speedup": round(without / indexed, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--sessions", type=int, default=10, help="sessions deleted each way")
    args = parser.parse_args()
    from promem_fast.testing.pg_server import Server  # PROMEM_TEST_PG_URL, else the pgserver wheel

    server = Server()
    rng = np.random.default_rng(5)
    found: dict[str, float] = {}
    table = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            for size in args.sizes:
                url = server.fresh_database()
                for name, where in (("sqlite", str(Path(folder) / f"delete-{size}.db")), ("postgresql", url)):
                    db = open_persistence(where)
                    try:
                        result = measure(db, size, args.sessions, rng)
                    finally:
                        db.close()
                    print(json.dumps({"nodes": size, "backend": name, **result}), flush=True)
                    found.update({f"{size}.{name}.{key}": value for key, value in result.items()})
                    table.append([f"{size:,}", name, result["delete_ms_without_index"], result["delete_ms"],
                                  result["speedup"]])
                server.drop(url)
    finally:
        server.close()
    figures.write_result("bench_delete", found, "python -m benchmarks.runs.bench_delete " + " ".join(sys.argv[1:]),
                         tables={"main": {"columns": ["nodes", "backend", "delete ms without the index",
                                                      "delete ms with it", "ratio"], "rows": table}},
                         note=f"One user of that many synthetic vectors ({DIM} dims) plus sessions of "
                              f"{INSERTED_NODES}; the median of --sessions deletes each way, without the index of "
                              "nodes.merged_into first, then with it, in one run on the same store.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
