"""Input validation: what the checks that keep bad records from crashing a run cost, side by side.

Run: ``python -m pytest benchmarks/suites/bench_input.py --benchmark-only -s -q``.
On real HaluMem records (the pilot user's sessions, repeated with fresh ids), the check for values no
output could carry (lone surrogates, giant integers), three ways: ``write_check`` is what validation does
(write the record as UTF-8 in C, walk only when that fails), ``walk`` visits every key and value in Python,
and the whole validated read (``read_sessions``) is the yardstick for both. The manifest's per-line
hashing, done once per run, is timed against that read too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.measure import ratio_info, side_by_side
from benchmarks.common.workload import halumem_or_skip
from promem_fast.io import read_sessions
from promem_fast.jsonl import decode_line, find_unwritable, unwritable_field
from promem_fast.manifest import line_hashes

COPIES = 8
ROUNDS = 7


@pytest.fixture(scope="module")
def big_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pilot user's 29 sessions, ``COPIES`` times over with distinct ids (~15 MB at 8 copies)."""
    sessions = halumem_or_skip()
    path = tmp_path_factory.mktemp("bench") / "input.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for copy in range(COPIES):
            for session in sessions:
                record = session.to_dict()
                record["session_id"] = f"{session.session_id}#{copy}"
                handle.write(json.dumps(record) + "\n")
    return path


def test_unwritable_value_check_side_by_side(benchmark: Any, big_input: Path) -> None:
    with open(big_input, "rb") as handle:
        records = [decode_line(raw, "bench", number) for number, raw in enumerate(handle, start=1)]
    n = len(records)
    medians = side_by_side({
        "write_check": lambda: [unwritable_field(r) for r in records],
        "walk": lambda: [find_unwritable(r) for r in records],
        "read_sessions": lambda: sum(1 for _ in read_sessions(big_input)),
    }, ROUNDS)
    info = ratio_info(medians, n, "sessions_per_s")
    info["write_check_share_of_read"] = round(medians["write_check"] / medians["read_sessions"], 3)
    info["walk_share_of_read"] = round(medians["walk"] / medians["read_sessions"], 3)
    benchmark.extra_info.update(info)
    benchmark.pedantic(lambda: [unwritable_field(r) for r in records], rounds=3, iterations=1)
    print(f"\n{n} sessions: " + ", ".join(f"{k} {v}" for k, v in info.items()))


def test_manifest_hashing_against_one_read(benchmark: Any, big_input: Path) -> None:
    medians = side_by_side({
        "read": lambda: sum(1 for _ in read_sessions(big_input)),
        "hash_lines": lambda: line_hashes(big_input),
    }, ROUNDS)
    share = medians["hash_lines"] / medians["read"]
    benchmark.extra_info.update(hash_vs_read=round(share, 3))
    benchmark.pedantic(line_hashes, args=(big_input,), rounds=3, iterations=1)
    print(f"\nmanifest hashing costs {share:.3f} of one validated read of the input")
