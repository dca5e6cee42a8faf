"""Hand-made memory graphs for the store tests, and a writer process they can start and kill.

Run as a script (``python tests/store_helpers.py DB N [--pause-in K] [--prefix P]``) it adds N sessions of
user ``w`` (ids ``P0``, ``P1``, ..., default ``w``) to the store at DB one by one, printing ``committed I``
after each; with ``--pause-in K`` it stops for good inside session K's transaction, after its rows are
written and before the commit, and prints ``inside K`` so a test can kill it there.
"""

from __future__ import annotations

import re
import sqlite3
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.types import Detail, Edge, MemoryEntry, MemoryGraph, RunStats

NODES_PER_SESSION = 40

TOPICS: tuple[frozenset[str], ...] = (
    frozenset({"work", "works", "job"}), frozenset({"paints", "watercolor"}), frozenset({"stamps"}),
    frozenset({"cello", "orchestra"}), frozenset({"owns", "cat", "dog"}), frozenset({"chess"}),
)
"""The topics :class:`TopicEmbedder` knows, each by the words that put a text on it."""


class TopicEmbedder:
    """An embedder whose neighbours the tests choose: a text's vector is one unit on each topic of
    :data:`TOPICS` it mentions plus 0.3 on an axis of its own (a hash of its words), normalised. Two texts
    on the same single topic have a cosine of about 0.92 and texts on different topics about 0, so the
    store's default ``update_min_cosine`` (0.5) is what decides which entries are compared, as it would with
    a sentence model that puts "works as a nurse" near "works as a teacher"."""

    dim = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            words = set(re.findall(r"[a-z]+", text.lower()))
            for axis, topic in enumerate(TOPICS):
                out[row, axis] = 1.0 if words & topic else 0.0
            out[row, len(TOPICS) + zlib.crc32(" ".join(sorted(words)).encode()) % (self.dim - len(TOPICS))] += 0.3
            out[row] /= np.linalg.norm(out[row])
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


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
    from promem_fast.persistence import rows
    from promem_fast.store import MemoryStore

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
