"""Native core vs the pure-Python reference, at batch sizes the engine sees.

Run: ``python -m pytest benchmarks/suites/bench_native.py --benchmark-only -s -q``.
pytest-benchmark times the native call; the reference runs a few times (once at the largest size) with
``time.perf_counter`` in the same test, and the ratio is printed and stored in ``extra_info["speedup"]``.
The reference gets plain Python lists (converted outside the timing), its fastest possible input.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from promem_fast import native
from promem_fast.testing.native_reference import anchor_details_ref, clean_edges_ref

SIZES = [1_000, 100_000, 1_000_000]

TURNS_PER_SESSION = 40
DETAILS_PER_TURN = 10
ENTRIES_PER_SESSION = 30
EDGES_PER_SESSION = 40
N_RELATIONS = 12


def _anchor_case(n_details: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Details grouped by session and turn (as extracted), entries grounded to random turns.

    Shape: ~400 details per session (40 turns x ~10), so 1e5 details is ~256 sessions;
    3% of details and 10% of entries are ungrounded (turn -1).
    """
    rng = np.random.default_rng(seed)
    n_sessions = max(1, round(n_details / (TURNS_PER_SESSION * DETAILS_PER_TURN)))
    d_session = np.sort(rng.integers(0, n_sessions, n_details))
    d_turn = rng.integers(0, TURNS_PER_SESSION, n_details)
    order = np.lexsort((d_turn, d_session))
    d_session, d_turn = d_session[order], d_turn[order]
    d_turn[rng.random(n_details) < 0.03] = -1
    m = n_sessions * ENTRIES_PER_SESSION
    e_session = np.repeat(np.arange(n_sessions), ENTRIES_PER_SESSION)
    e_turn = rng.integers(0, TURNS_PER_SESSION, m)
    e_turn[rng.random(m) < 0.10] = -1
    return d_session, d_turn, e_session, e_turn


def _edge_case(n_edges: int, seed: int = 1) -> tuple[np.ndarray, ...]:
    """Candidate relations of ~40 per session over ~30 entries, 12 relation ids (4 symmetric).

    ~5% have an endpoint that was discarded (-1), ~5% are self-loops, ~10% repeat an earlier edge of
    the same session (half of them reversed).
    """
    rng = np.random.default_rng(seed)
    n_sessions = max(1, n_edges // EDGES_PER_SESSION)
    n_dup = n_edges // 10
    n_base = n_edges - n_dup
    session = rng.integers(0, n_sessions, n_base)
    source = rng.integers(0, ENTRIES_PER_SESSION, n_base)
    target = rng.integers(0, ENTRIES_PER_SESSION, n_base)
    relation = rng.integers(0, N_RELATIONS, n_base)
    loops = rng.random(n_base) < 0.05
    target[loops] = source[loops]
    source[rng.random(n_base) < 0.025] = -1
    target[rng.random(n_base) < 0.025] = -1
    pick = rng.integers(0, n_base, n_dup)
    flip = rng.random(n_dup) < 0.5
    dup_source = np.where(flip, target[pick], source[pick])
    dup_target = np.where(flip, source[pick], target[pick])
    session = np.concatenate([session, session[pick]])
    source = np.concatenate([source, dup_source])
    target = np.concatenate([target, dup_target])
    relation = np.concatenate([relation, relation[pick]])
    order = np.argsort(session, kind="stable")
    symmetric = np.zeros(N_RELATIONS, dtype=bool)
    symmetric[:4] = True
    return session[order], source[order], relation[order], target[order], symmetric


def _best_seconds(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best = float("inf")
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _native_seconds(benchmark: Any, fn: Callable[[], Any]) -> float:
    stats = getattr(benchmark, "stats", None)
    if stats is not None and getattr(stats, "stats", None) is not None:
        return float(stats.stats.median)
    return _best_seconds(fn, 3)[0]


def _report(benchmark: Any, name: str, n: int, native_s: float, python_s: float) -> float:
    speedup = python_s / native_s
    benchmark.extra_info["speedup"] = speedup
    benchmark.extra_info["python_seconds"] = python_s
    benchmark.extra_info["native_seconds"] = native_s
    print(
        f"\n[{name} n={n:>9,}] native {native_s * 1e3:9.3f} ms | python {python_s * 1e3:10.1f} ms"
        f" | speedup {speedup:7.1f}x"
    )
    return speedup


def _python_repeats(n: int) -> int:
    return 1 if n >= 1_000_000 else 3


@pytest.mark.parametrize("n", SIZES, ids=[f"{n:.0e}" for n in SIZES])
def test_anchor_details(benchmark: Any, n: int) -> None:
    ds, dt, es, et = _anchor_case(n)
    lists = [x.tolist() for x in (ds, dt, es, et)]
    benchmark.group = "anchor_details"

    def run_native() -> tuple[np.ndarray, np.ndarray]:
        return native.anchor_details(ds, dt, es, et)

    offsets, indices = benchmark(run_native)
    python_s, (ref_offsets, ref_indices) = _best_seconds(lambda: anchor_details_ref(*lists), _python_repeats(n))
    assert np.array_equal(offsets, ref_offsets) and np.array_equal(indices, ref_indices)
    _report(benchmark, "anchor_details", n, _native_seconds(benchmark, run_native), python_s)


@pytest.mark.parametrize("n", SIZES, ids=[f"{n:.0e}" for n in SIZES])
def test_clean_edges(benchmark: Any, n: int) -> None:
    s, a, r, b, sym = _edge_case(n)
    lists = [x.tolist() for x in (s, a, r, b, sym)]
    benchmark.group = "clean_edges"

    def run_native() -> np.ndarray:
        return native.clean_edges(s, a, r, b, sym)

    kept = benchmark(run_native)
    python_s, ref_kept = _best_seconds(lambda: clean_edges_ref(*lists), _python_repeats(n))
    assert np.array_equal(kept, ref_kept)
    _report(benchmark, "clean_edges", n, _native_seconds(benchmark, run_native), python_s)
