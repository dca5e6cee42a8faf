"""Hand-made memory graphs for the store tests, and a writer process they can start and kill.

Run as a script (``python tests/store_helpers.py DB N [--pause-in K] [--prefix P]``) it adds N sessions of
user ``w`` (ids ``P0``, ``P1``, ..., default ``w``) to the store at DB one by one, printing ``committed I``
after each; with ``--pause-in K`` it stops for good inside session K's transaction, after its rows are
written and before the commit, and prints ``inside K`` so a test can kill it there.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.types import Detail, Edge, MemoryEntry, MemoryGraph, RunStats

NODES_PER_SESSION = 40


def graph(session_id: str, user: str, texts: Sequence[str], *, timestamp: str | None = "2025-01-01T10:00:00",
          details: Sequence[Sequence[str]] = (), edges: Sequence[tuple[int, int, str]] = ()) -> MemoryGraph:
    """A graph whose node ``i`` has text ``texts[i]``, grounded in turn ``i``, with ``details[i]`` anchored."""
    all_details: list[Detail] = []
    nodes = []
    for i, text in enumerate(texts):
        mine = list(details[i]) if i < len(details) else []
        indices = list(range(len(all_details), len(all_details) + len(mine)))
        all_details.extend(Detail(d, i) for d in mine)
        nodes.append(MemoryEntry(id=i, text=text, origin="draft", verification="entailed", turn_ids=[i],
                                 details=indices))
    return MemoryGraph(session_id=session_id, user=user, nodes=nodes,
                       edges=[Edge(s, t, r) for s, t, r in edges], details=all_details, events=[],
                       stats=RunStats(), timestamp=timestamp)


def worker_graph(index: int, prefix: str = "w") -> MemoryGraph:
    return graph(f"{prefix}{index}", "w", [f"fact {j} of session {prefix}{index} about topic{index} item{j}"
                                           for j in range(NODES_PER_SESSION)])


def main(argv: list[str]) -> int:
    import argparse

    from promem_fast.config import EngineConfig
    from promem_fast.store import MemoryStore, rows

    parser = argparse.ArgumentParser()
    parser.add_argument("db", type=Path)
    parser.add_argument("n", type=int)
    parser.add_argument("--pause-in", type=int, default=-1)
    parser.add_argument("--prefix", default="w", help="session ids are PREFIX0, PREFIX1, ...")
    args = parser.parse_args(argv)
    real = rows.insert_session

    def insert(db: sqlite3.Connection, user_pk: int, record: dict[str, Any], vectors: np.ndarray | None,
               **how: Any) -> dict[int, int]:
        ids = real(db, user_pk, record, vectors, **how)
        if record["session_id"] == f"{args.prefix}{args.pause_in}":
            print(f"inside {args.pause_in}", flush=True)
            time.sleep(600)
        return ids

    rows.insert_session = insert
    with MemoryStore(args.db, EngineConfig.profile("scripted"), update_judge="off") as store:
        for i in range(args.n):
            store.add([worker_graph(i, args.prefix)])
            print(f"committed {i}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
