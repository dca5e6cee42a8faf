"""Ray scale-out: sessions/s with 1 vs 2 actors on a local 2-CPU cluster, and the driver's cost per session.

Run: ``python -m pytest benchmarks/suites/bench_ray.py --benchmark-only -s -q`` (needs the ``ray`` extra). The
backends are the scripted profile's (scripted LLM, lexical NLI, hashing embedder), so what is measured is
the engine in each actor plus what Ray adds: shipping shards and records, the actor pool, the driver.

Figures, all from one process, timed interleaved (:func:`report.side_by_side`):

- ``2_actors_vs_1``: wall of a 1-actor run over wall of a 2-actor run (above 1: two actors are faster).
  Each run starts its own actor pool, so actor start-up (a fresh Python importing the engine) is included.
- ``ray_1_actor_vs_single_node``: wall of a 1-actor Ray run over the same sessions through one in-process
  :class:`~promem_fast.engine.Engine`: what going through Ray costs when it cannot spread the work.
- ``busiest_actor_2_vs_1``: seconds the busiest actor spent on shards, 1-actor run over 2-actor run: the
  scaling of the work itself, without the pool's start-up (ideal 2 on two free cores).
- ``driver_cpu_ms_per_session``: CPU time of the driver process (Ray Data's scheduling threads, receiving
  the records, writing the shard files), per session, from a 2-actor run.
- ``load_average``: the machine's 1-minute load at the end; above the core count, actors share cores with
  other jobs and the 1 vs 2 ratio says little about an idle machine.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.engine_load import synthetic_sessions
from benchmarks.common.measure import ratio_info, side_by_side
from promem_fast import Engine, EngineConfig

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'promem-fast[ray]'")

SESSIONS, FILES, SHARD = 960, 2, 40
ROUNDS = 2


def _config() -> EngineConfig:
    config = EngineConfig.profile("scripted")
    config.record_timings = False
    return config


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("shards")
    sessions = [s.to_dict() for s in synthetic_sessions(SESSIONS, turns=16)]
    per = SESSIONS // FILES
    for i in range(FILES):
        (folder / f"part{i}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions[i * per:(i + 1) * per]))
    return folder


@pytest.fixture(scope="module")
def cluster() -> Any:
    ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_actors_side_by_side(benchmark: Any, cluster: Any, inputs: Path) -> None:
    from promem_fast.distributed import extract

    driver_cpu: list[float] = []
    busiest: dict[int, list[float]] = {1: [], 2: []}

    def on_ray(actors: int) -> None:
        with tempfile.TemporaryDirectory() as out:
            cpu = time.process_time()
            summary = extract(inputs, out, config=_config(), actors=actors, shard_sessions=SHARD)
            if actors == 2:
                driver_cpu.append(time.process_time() - cpu)
            assert summary.new_sessions == SESSIONS
            busiest[actors].append(max(t.seconds for t in summary.actors.values()))

    def single_node() -> None:
        assert sum(1 for _ in Engine(_config()).extract_stream(synthetic_sessions(SESSIONS, turns=16))) == SESSIONS

    medians: dict[str, float] = {}

    def once() -> None:
        medians.update(side_by_side({"ray_1_actor": lambda: on_ray(1), "ray_2_actors": lambda: on_ray(2),
                                     "single_node": single_node}, rounds=ROUNDS))

    benchmark.pedantic(once, rounds=1, iterations=1)
    info = ratio_info(medians, SESSIONS, "sessions_per_s")
    info["2_actors_vs_1"] = round(medians["ray_1_actor"] / medians["ray_2_actors"], 2)
    info["ray_1_actor_vs_single_node"] = round(medians["ray_1_actor"] / medians["single_node"], 2)
    info["busiest_actor_2_vs_1"] = round(statistics.median(busiest[1]) / statistics.median(busiest[2]), 2)
    info["driver_cpu_ms_per_session"] = round(1e3 * statistics.median(driver_cpu) / SESSIONS, 3)
    info["load_average"] = round(os.getloadavg()[0], 1)
    benchmark.extra_info.update(info)
    print(f"\n{SESSIONS} sessions in {SESSIONS // SHARD} shards: " + ", ".join(f"{k} {v}" for k, v in info.items()))
