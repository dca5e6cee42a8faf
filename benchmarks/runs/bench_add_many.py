"""``Memory.add`` once per conversation against one ``Memory.add_many`` of them all, side by side on the CPU default.

Run: ``python -m benchmarks.runs.bench_add_many [--rounds 1]``. Each round adds the demo's sessions (the shipped
``demo_sessions.jsonl``) to fresh stores on SmolLM2-135M (llama.cpp) and MiniLM, three ways: one ``add`` per
session; one ``add_many`` of all of them at the engine's auto window (llama.cpp: one session in flight); the same
with every session in flight at once (``max_in_flight: 64``, the window before llama.cpp stated its own). The
order rotates between rounds; the engine is loaded before the clock starts, so each figure is the extraction and
storing alone, with llama.cpp's prompt tokens evaluated and kept states restored. Writes
``benchmarks/results/bench_add_many.json``: per mode the medians over the rounds, the ratios of the rates, and
whether every store holds the same memories (the same texts, the same replaced ones).

On the CPU, llama.cpp decodes one request after another, so there is little for ``add_many`` to batch (see
:mod:`promem_fast.driver.window`). What it gains on a GPU, where a batch holds dozens of sessions' requests, is
the one-session-at-a-time row of the GPU cost model (``benchmarks/gpu/gpu_model.py``, a projection).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.paths import RESULTS
from benchmarks.runs.bench_serve_search import stamp
from benchmarks.tools.figures import adopt

RESULT = RESULTS / "bench_add_many.json"


def sessions() -> list[dict[str, Any]]:
    from importlib.resources import files

    text = files("promem_fast.data").joinpath("demo_sessions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


MODES = {"add": [], "add_many": [], "add_many_all_in_flight": ["max_in_flight=64"]}
"""Each mode and the configuration it changes."""


def one_mode(mode: str, records: list[dict[str, Any]], folder: Path) -> tuple[dict[str, Any], list[Any]]:
    """Add ``records`` to a fresh store by ``mode`` (``add``: one call each; ``add_many*``: one call)."""
    from promem_fast import EngineConfig, Memory

    config = EngineConfig.profile("cpu").with_overrides(MODES[mode])
    with Memory(folder / f"{mode}.db", config=config) as memory:
        llm = memory.engine.services.llm("draft")  # loaded before the clock starts
        before = sum(memory.engine.summary.backend_calls.values())
        started = time.perf_counter()
        if mode == "add":
            results = [memory.add(record, user_id=record["user"]) for record in records]
        else:
            results = memory.add_many(records, progress=False)
        seconds = time.perf_counter() - started
        assert all(r["added"] for r in results), results
        state = sorted((m["user_id"], m["memory"], m["superseded_by"] is not None)
                       for user in memory.store.users() for m in memory.get_all(user_id=user, history=True)["results"])
        calls = sum(memory.engine.summary.backend_calls.values()) - before
        window = memory.engine.window()
    return {"seconds": round(seconds, 1), "sessions_per_hour": round(len(records) / seconds * 3600, 1),
            "model_calls": calls, "memories": len(state), "sessions_in_flight": window,
            "prompt_tokens_sent": llm.prompt_tokens_sent, "prompt_tokens_evaluated": llm.prompt_tokens_evaluated,
            "states_restored": llm.states.restored}, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    records = sessions()
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    same = True
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            states = {}
            order = list(MODES)[r % len(MODES):] + list(MODES)[:r % len(MODES)]
            for mode in order:
                figures, states[mode] = one_mode(mode, records, Path(folder))
                runs[mode].append(figures)
                print(mode, json.dumps(figures), flush=True)
            same = same and all(state == states["add"] for state in states.values())
    medians = {mode: {key: statistics.median(run[key] for run in rounds) for key in rounds[0]}
               for mode, rounds in runs.items()}
    result = {
        "what": "the CPU default (SmolLM2-135M on llama.cpp, MiniLM): the demo's sessions added one add() each, "
                "by one add_many() at the auto window and by one add_many() with all in flight, in fresh stores; "
                f"medians over {args.rounds} round(s), order rotating",
        "sessions": len(records), "rounds": args.rounds, **medians,
        "ratio_add_many_over_add": round(medians["add_many"]["sessions_per_hour"]
                                         / medians["add"]["sessions_per_hour"], 2),
        "ratio_auto_window_over_all_in_flight": round(medians["add_many"]["sessions_per_hour"]
                                                      / medians["add_many_all_in_flight"]["sessions_per_hour"], 2),
        "same_memories": "yes" if same else "no",
        **stamp(runs),
    }
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    adopt(RESULT, "python -m benchmarks.runs.bench_add_many " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    print(json.dumps({k: result[k] for k in (*MODES, "ratio_add_many_over_add", "ratio_auto_window_over_all_in_flight",
                                             "same_memories")}))


if __name__ == "__main__":
    main()
