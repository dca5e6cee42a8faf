"""Update judging in the canonical order: asking ahead for several pending sessions of a user vs one at a time.

Run: ``python -m pytest benchmarks/suites/bench_update_order.py --benchmark-only -s -q -o python_files='bench_*.py'
--benchmark-json=benchmarks/results/bench_update_order.json``. The HaluMem development user's sessions (one
user, so every session is judged against the ones before it) are extracted once with the scripted profile,
then added to a fresh store in one call, judged by the scripted model. ``ahead`` asks ahead as the store
does with a batching chat backend (:data:`~promem_fast.store.ordering.LOOKAHEAD` sessions per round);
``one`` judges one session per engine run, the plain reading of the canonical order (and the default with
other backends). Both give the same links (checked). ``extra_info`` holds
sessions per second (CPU, scripted model: only the ratio means anything), the judge's engine runs (the rounds
a GPU pays for) and its requests (the work it batches). Skipped when the HaluMem sample is absent.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.measure import ratio_info, side_by_side
from benchmarks.common.workload import halumem_or_skip
from promem_fast.config import EngineConfig
from promem_fast.engine import Engine
from promem_fast.store import MemoryStore, ordering
from promem_fast.testing.llm_scripted import ScriptedLLM

CALLS: dict[str, list[int]] = {}
LINKS: dict[str, set[tuple[Any, ...]]] = {}


def add(graphs: list[Any], lookahead: int, name: str) -> None:
    config = EngineConfig.profile("scripted")
    llm = ScriptedLLM(config.llm)
    with tempfile.TemporaryDirectory() as folder, \
            MemoryStore(Path(folder) / "m.db", config, update_lookahead=lookahead) as store, \
            Engine(config, llm=llm) as engine:
            store.add(graphs, engine=engine)
            LINKS[name] = {(h.session_id, h.text, h.superseded_by is not None, tuple(h.sessions))
                           for h in store.hits(graphs[0].user, history=True)}
    CALLS[name] = list(llm.calls)


def test_asking_ahead_vs_one_session_per_run(benchmark: Any) -> None:
    sessions = halumem_or_skip()  # skips the benchmark, saying so, when the sample is absent
    with Engine(EngineConfig.profile("scripted")) as engine:
        graphs = list(engine.extract_stream(sessions))
    shipped = ordering.LOOKAHEAD
    medians = side_by_side({"ahead": lambda: add(graphs, shipped, "ahead"),
                            "one": lambda: add(graphs, 1, "one")}, rounds=3)
    benchmark.pedantic(add, args=(graphs, shipped, "ahead"), rounds=1, iterations=1)
    assert LINKS["ahead"] == LINKS["one"]
    info = ratio_info(medians, len(graphs), "sessions_per_s")
    info.update({"sessions": len(graphs), "lookahead": shipped, "wider": ordering.WIDER})
    for name, calls in CALLS.items():
        info.update({f"{name}_judge_engine_runs": len(calls), f"{name}_judge_requests": sum(calls)})
    benchmark.extra_info.update(info)
