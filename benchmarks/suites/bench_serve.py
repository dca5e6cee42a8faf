"""The service's worker: sessions of many users sharing the engine's window vs each taken alone.

Run: ``python -m pytest benchmarks/suites/bench_serve.py --benchmark-only -s -q``. One :class:`Service` (the durable
queue in a fresh SQLite file, the worker, the store; no HTTP, so the figure is the worker's) drains 16 users'
10 HaluMem sessions each, with the scripted profile. ``shared`` is the default window (64 sessions in flight,
from every user at once); ``alone`` is a window of one session, what a server without batching across
requests does. Both are timed interleaved (:func:`report.side_by_side`); ``extra_info`` holds sessions per
second, the ratio, and the backend calls per session of each.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.measure import ratio_info, side_by_side
from benchmarks.common.workload import halumem_or_skip
from promem_fast.config import EngineConfig
from promem_fast.serve.service import Service

USERS = 16
SESSIONS = 10
CALLS: dict[str, float] = {}


def drain(window: int) -> float:
    """Queue every user's sessions, start the worker, wait until the queue is empty; backend calls/session."""
    config = EngineConfig.profile("scripted")
    config.max_in_flight = window
    base = [s.to_dict() for s in halumem_or_skip()]
    with tempfile.TemporaryDirectory() as folder:
        service = Service(Path(folder) / "memory.db", config)
        try:
            for user in range(USERS):
                service.submit("bench", f"user{user}", [dict(base[(user + j) % len(base)], session_id=f"u{user}-{j}",
                                                             user=f"user{user}") for j in range(SESSIONS)])
            service.start()
            deadline = time.monotonic() + 600
            while service.queue.depth() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert service.queue.depth() == 0
            return sum(service.worker.call("metrics")["calls"].values()) / (USERS * SESSIONS)
        finally:
            service.close()


def test_worker_shared_window_vs_one_session_at_a_time(benchmark: Any) -> None:
    medians = side_by_side({"shared": lambda: CALLS.__setitem__("shared", drain(64)),
                            "alone": lambda: CALLS.__setitem__("alone", drain(1))}, rounds=2)
    benchmark.pedantic(drain, args=(64,), rounds=1, iterations=1)
    info = ratio_info(medians, USERS * SESSIONS, "sessions_per_s")
    info.update({f"{name}_backend_calls_per_session": round(calls, 2) for name, calls in CALLS.items()})
    benchmark.extra_info.update(info)
    print(f"\n[serve worker, {USERS} users x {SESSIONS} sessions] {info}")
    assert CALLS["shared"] < CALLS["alone"]  # the rate is a measurement, not a pass mark: see the README
