"""Engine overhead per session and peak memory, flat in the number of sessions; both drivers side by side.

Run: ``python -m pytest benchmarks/suites/bench_engine.py --benchmark-only -s -q``;
``python -m benchmarks.suites.bench_engine``
writes the driver comparison (round vs continuous, CPU seconds per session at 100, 1,000 and 5,000
sessions) to ``benchmarks/results/engine_drivers.json``. The backends are the scripted
chat model with fixed replies (``benchmarks.common.engine_load``), the hashing embedder, lexical NLI and numpy similarity, so what is measured is the driver and
the session programs. Overhead = wall time minus the time spent inside the model backends
(``RunSummary.backend_seconds``) and loading them (``RunSummary.load_seconds``), per session.

A warm-up run of two sessions goes first, untimed: the first run of a process imports the pipeline
modules (tens of milliseconds, compiling them when no bytecode is cached) and fills the prompt caches,
a fixed cost per process that would otherwise be spread over the 10-session figure and hide the
per-session cost. It is reported on its own (``first_run_ms``).
"""

from __future__ import annotations

import json
import time
import tracemalloc
from typing import Any

import pytest

from benchmarks.common import paths
from benchmarks.common.engine_load import fixed_reply_llm, synthetic_sessions
from benchmarks.common.measure import machine_info
from promem_fast import Engine, EngineConfig

RESULTS: dict[int, float] = {}
DRIVER_SIZES = (100, 1_000, 5_000)
DRIVER_RESULT = paths.RESULTS / "engine_drivers.json"


def _run(n: int, window: int = 256) -> tuple[float, float]:
    config = EngineConfig.profile("scripted")
    config.max_in_flight = window
    engine = Engine(config, llm=fixed_reply_llm())
    started = time.perf_counter()
    count = sum(1 for _ in engine.extract_stream(synthetic_sessions(n)))
    wall = time.perf_counter() - started
    assert count == n
    summary = engine.summary
    return wall, (wall - sum(summary.backend_seconds.values()) - summary.load_seconds) / n


@pytest.fixture(scope="module")
def first_run_ms() -> float:
    """Wall milliseconds of the process's first (warm-up) run of two sessions."""
    wall, _ = _run(2)
    return wall * 1e3


@pytest.mark.parametrize("n", [10, 100, 1_000, 10_000])
def test_engine_overhead_per_session(benchmark: pytest.FixtureRequest, first_run_ms: float, n: int) -> None:
    out: dict[str, float] = {}

    def once() -> None:
        out["wall"], out["per_session"] = _run(n)

    benchmark.pedantic(once, rounds=1, iterations=1)
    RESULTS[n] = out["per_session"]
    benchmark.extra_info["overhead_ms_per_session"] = round(out["per_session"] * 1e3, 3)
    base = RESULTS.get(10) or RESULTS[n]
    benchmark.extra_info["ratio_to_10_sessions"] = round(out["per_session"] / base, 3)
    benchmark.extra_info["first_run_ms"] = round(first_run_ms, 1)
    print(f"\n{n:>6} sessions: {out['per_session'] * 1e3:.3f} ms/session engine overhead "
          f"({out['per_session'] / base:.2f}x the 10-session figure)")


def test_peak_memory_is_flat_with_a_bounded_window(benchmark: pytest.FixtureRequest, first_run_ms: float) -> None:
    """Peak traced memory of one 6,000-session run with a 64-session window, read after 2,000 sessions and
    at the end: the second reading must not exceed the first by much.

    The engine and the test backends keep bounded caches (prompt token counts, turn texts, the hashing
    embedder's and lexical NLI's word lists: 4,096 to 8,192 entries each), which fill over the first
    2,000 sessions of this load and then hold their size (peak 13.4 MiB after 1,000 sessions, 14.2 after
    2,000, 14.5 after 8,000 in one run here). Comparing two separate runs of 500 and 5,000 sessions
    counts that filling as growth; reading both figures in one run, after the caches are full, measures
    what a long run adds. The warm-up goes first, so imported modules count in neither.
    """
    peaks: dict[int, int] = {}
    checkpoint, total = 2_000, 6_000

    def once() -> None:
        config = EngineConfig.profile("scripted")
        config.max_in_flight = 64
        engine = Engine(config, llm=fixed_reply_llm())
        tracemalloc.start()
        for done, _ in enumerate(engine.extract_stream(synthetic_sessions(total)), 1):
            if done == checkpoint:
                peaks[checkpoint] = tracemalloc.get_traced_memory()[1]
        peaks[total] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    benchmark.pedantic(once, rounds=1, iterations=1)
    ratio = peaks[total] / peaks[checkpoint]
    benchmark.extra_info.update({f"peak_mb_{checkpoint}": round(peaks[checkpoint] / 2**20, 2),
                                 f"peak_mb_{total}": round(peaks[total] / 2**20, 2), "ratio": round(ratio, 3)})
    print(f"\npeak traced memory: {peaks[checkpoint] / 2**20:.1f} MiB after {checkpoint:,} sessions, "
          f"{peaks[total] / 2**20:.1f} MiB after {total:,} (ratio {ratio:.2f})")
    assert ratio < 1.1


def driver_run(driver: str, n: int, window: int = 256) -> dict[str, float]:
    """One run of ``n`` sessions: wall and process CPU seconds per session, and the engine's share.

    CPU time counts every thread of the process (the continuous driver's lanes too); the engine's own
    share is that minus the seconds spent inside the backends (all CPU-bound here), so the figure compares
    the drivers' bookkeeping, not the stand-in models."""
    config = EngineConfig.profile("scripted")
    config.max_in_flight = window
    config.driver = driver  # type: ignore[assignment]
    engine = Engine(config, llm=fixed_reply_llm())
    wall0, cpu0 = time.perf_counter(), time.process_time()
    count = sum(1 for _ in engine.extract_stream(synthetic_sessions(n)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    assert count == n
    backend = sum(engine.summary.backend_seconds.values())
    return {"wall_ms_per_session": 1e3 * wall / n, "cpu_ms_per_session": 1e3 * cpu / n,
            "engine_cpu_ms_per_session": 1e3 * (cpu - backend) / n, "backend_calls": sum(engine.summary.backend_calls.values())}


@pytest.mark.parametrize("n", DRIVER_SIZES[:2])
def test_both_drivers_overhead_per_session(benchmark: pytest.FixtureRequest, first_run_ms: float, n: int) -> None:
    out: dict[str, dict[str, float]] = {}

    def once() -> None:
        for driver in ("round", "continuous"):
            out[driver] = driver_run(driver, n)

    benchmark.pedantic(once, rounds=1, iterations=1)
    for driver, figures in out.items():
        benchmark.extra_info.update({f"{driver}_{k}": round(v, 3) for k, v in figures.items()})
    print(f"\n{n:>6} sessions: " + "; ".join(f"{d} {f['engine_cpu_ms_per_session']:.2f} ms engine CPU/session"
                                          for d, f in out.items()))


def main() -> None:
    """Both drivers at each size, interleaved (round, continuous, then the other way at the next size)."""
    driver_run("round", 2)  # warm-up: imports and prompt caches
    table: dict[str, dict[str, dict[str, float]]] = {"round": {}, "continuous": {}}
    for i, n in enumerate(DRIVER_SIZES):
        for driver in (("round", "continuous") if i % 2 == 0 else ("continuous", "round")):
            table[driver][str(n)] = {k: round(v, 3) for k, v in driver_run(driver, n).items()}
            print(driver, n, table[driver][str(n)], flush=True)
    flat = {d: round(t[str(DRIVER_SIZES[-1])]["engine_cpu_ms_per_session"]
                     / t[str(DRIVER_SIZES[0])]["engine_cpu_ms_per_session"], 3) for d, t in table.items()}
    result: dict[str, Any] = {
        "what": "engine CPU per session (process CPU minus seconds inside the backends), the scripted LLM with fixed replies, "
                "the scripted profile's NLI/embedder/similarity, window 256, synthetic 8-turn sessions",
        "drivers": table,
        "ratio_largest_to_smallest": flat,
        "continuous_over_round": {str(n): round(table["continuous"][str(n)]["engine_cpu_ms_per_session"]
                                                / table["round"][str(n)]["engine_cpu_ms_per_session"], 3)
                                  for n in DRIVER_SIZES},
    }
    result["machine"] = machine_info()
    DRIVER_RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("ratio_largest_to_smallest", "continuous_over_round")}))


if __name__ == "__main__":
    main()
