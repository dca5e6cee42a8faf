"""Deleting the sessions of one scope (mem0's ``delete_all(user_id=, agent_id=)``): at once vs one by one.

Run: ``python -m pytest benchmarks/suites/bench_scoped_delete.py --benchmark-only -s -q -o python_files='bench_*.py'
--benchmark-json=benchmarks/results/bench_scoped_delete.json``. The HaluMem development user's sessions are
extracted once with the scripted profile; every third one is added with ``agent_id`` ``bot``, the rest without, to
a store judged by the scripted model. From copies of that store, the bot's sessions are deleted ``at_once``
(``store.delete(filters=...)``: one transaction, the later sessions judged once) and ``one_by_one`` (one
``store.delete(session=...)`` per session, which judges the later sessions again after each). Both leave the same
memory (checked against a store never given the bot's sessions). ``extra_info`` holds the judge's requests
(what a GPU pays for) and engine runs of each, and the time of each side by side (CPU, scripted model: only the
ratio means anything). Skipped when the HaluMem sample is absent.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.measure import ratio_info, side_by_side
from benchmarks.common.workload import halumem_or_skip
from promem_fast.config import EngineConfig
from promem_fast.engine import Engine
from promem_fast.store import MemoryStore
from promem_fast.testing.llm_scripted import ScriptedLLM

BOT = {"agent_id": "bot"}
CALLS: dict[str, list[int]] = {}
LINKS: dict[str, set[tuple[Any, ...]]] = {}


def links(store: MemoryStore, user: str) -> set[tuple[Any, ...]]:
    return {(h.session_id, h.text, h.superseded_by is not None, h.merged_into is not None, tuple(h.sessions))
            for h in store.hits(user, history=True)}


def build(graphs: list[Any], path: Path) -> None:
    config = EngineConfig.profile("scripted")
    with MemoryStore(path, config) as store, Engine(config) as engine:
        store.add(graphs, engine=engine)


def delete(source: Path, folder: Path, name: str, user: str) -> None:
    """The bot's sessions deleted from a copy of ``source``, the ``name`` way; the judge's calls kept."""
    copy = folder / f"{name}.db"
    for leftover in folder.glob(f"{name}.db*"):
        leftover.unlink() if leftover.is_file() else shutil.rmtree(leftover)
    shutil.copyfile(source, copy)
    config = EngineConfig.profile("scripted")
    llm = ScriptedLLM(config.llm)
    with MemoryStore(copy, config) as store, Engine(config, llm=llm) as engine:
        if name == "at_once":
            store.delete(user=user, filters=BOT, engine=engine)
        else:
            for sid in store.sessions(user, filters=BOT):
                store.delete(user=user, session=sid, engine=engine)
        LINKS[name] = links(store, user)
    CALLS[name] = list(llm.calls)


def test_deleting_a_scope_at_once_vs_one_session_at_a_time(benchmark: Any) -> None:
    sessions = halumem_or_skip()  # skips the benchmark, saying so, when the sample is absent
    with Engine(EngineConfig.profile("scripted")) as engine:
        graphs = list(engine.extract_stream(sessions))
    tagged = [dataclasses.replace(g, metadata=BOT) if i % 3 == 1 else g for i, g in enumerate(graphs)]
    user = graphs[0].user
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        build(tagged, folder / "full.db")
        build([g for g in tagged if g.metadata != BOT], folder / "never.db")
        with MemoryStore(folder / "never.db", read_only=True) as never:
            expected = links(never, user)
        medians = side_by_side({way: (lambda way=way: delete(folder / "full.db", folder, way, user))
                                for way in ("at_once", "one_by_one")}, rounds=3)
        benchmark.pedantic(delete, args=(folder / "full.db", folder, "at_once", user), rounds=1, iterations=1)
    assert LINKS["at_once"] == LINKS["one_by_one"] == expected
    deleted = sum(1 for g in tagged if g.metadata == BOT)
    info = ratio_info(medians, deleted, "sessions_deleted_per_s")
    info.update({"sessions": len(graphs), "sessions_deleted": deleted})
    for way, calls in CALLS.items():
        info.update({f"{way}_judge_engine_runs": len(calls), f"{way}_judge_requests": sum(calls)})
    benchmark.extra_info.update(info)
