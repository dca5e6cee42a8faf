"""`make demo` with llama.cpp's prefix reuse on and off, side by side: wall seconds, prompt tokens sent and
evaluated, and whether the graphs are the same bytes.

    python -m benchmarks.runs.bench_demo_prefix                # writes benchmarks/results/demo_prefix.json
    python -m benchmarks.runs.bench_demo_prefix --rounds 3 --sessions 2
    python -m benchmarks.runs.bench_demo_prefix --settings on,prefix --rounds 1 --name demo_states

The settings: ``on`` is the default (the previous prompt's prefix kept, and each session block's KV state kept
apart, ``llm.prefix_state_mib``), ``prefix`` keeps only the previous prompt's prefix
(``llm.prefix_state_mib=0``), ``off`` evaluates every prompt whole (``llm.prefix_reuse=false``).

Each round runs the demo extraction (``promem_fast/data/demo_sessions.jsonl`` with ``data/demo.yaml``:
SmolLM2-135M on llama.cpp, MiniLM, the chat model as NLI judge) once in each setting, the order rotating from
round to round, each on a freshly loaded engine, because the machine is shared: only figures from the same
run compare. Wall seconds are those of ``Engine.extract``, model loading included, as ``make demo`` pays them
(the libraries are imported once before the first run, so no run pays the imports alone).

Per run the llama.cpp backend counts the prompt tokens it was sent and those it evaluated (the rest came from
the kept prefix of the previous prompt or a kept session state), and the session states it restored. It also
records every ``generate`` call the continuous driver made: how many requests and distinct sessions (session
blocks) it held, and, for the call's first prompt, how many tokens it shared with the prompt before it
against the most any prompt of that call shared with it. The gap is what running each call from the prompt
nearest the cached one (instead of from the smallest in token order) would save; within a call the token
order already puts a session's prompts next to each other.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common.paths import ROOT
from benchmarks.tools.figures import write_result

SESSIONS = ROOT / "promem_fast" / "data" / "demo_sessions.jsonl"
DEMO = ROOT / "promem_fast" / "data" / "demo.yaml"
log = logging.getLogger("bench_demo_prefix")


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def recording_backend(config: Any) -> Any:
    """The llama.cpp backend of ``config`` that also records what each ``generate`` call held."""
    from promem_fast.backends.llm_llamacpp import LlamaCppLLM

    class Recording(LlamaCppLLM):
        calls: list[dict[str, int]]
        _last: list[int]

        def generate(self, requests: Sequence[Any]) -> list[Any]:
            prompts = [list(r.prompt_ids) if r.prompt_ids is not None else self.encode(r.messages, r.date)
                       for r in requests]
            first = min(prompts) if self.reuses_prefix else prompts[0]
            last = getattr(self, "_last", [])
            self.calls = getattr(self, "calls", [])
            self.calls.append({
                "requests": len(requests),
                "sessions": len({r.messages[0]["content"] for r in requests}),
                "first_shared": _shared(first, last),
                "best_shared": max(_shared(p, last) for p in prompts),
            })
            self._last = max(prompts) if self.reuses_prefix else prompts[-1]
            return super().generate(requests)

    return Recording(config)


SETTINGS: dict[str, list[str]] = {
    "on": [],
    "prefix": ["llm.prefix_state_mib=0"],
    "off": ["llm.prefix_reuse=false"],
}
"""Each setting's overrides of ``demo.yaml`` (see the module notes)."""


def _setting_of(llm: Any) -> str:
    """The setting a loaded backend runs in (the load-time checks may have turned reuse or states off)."""
    return "on" if llm.keeps_states else "prefix" if llm.reuses_prefix else "off"


def run_once(setting: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """One demo extraction on a fresh engine; its figures and the graphs' bytes."""
    from promem_fast.config import EngineConfig
    from promem_fast.engine import Engine

    config = EngineConfig.resolve(file=DEMO, overrides=SETTINGS[setting])
    started = time.perf_counter()
    llm = recording_backend(config.llm)
    with Engine(config, llm=llm) as engine:
        graphs = engine.extract(sessions)
        wall = time.perf_counter() - started
        load = llm.load_seconds + engine.services.load_seconds
    text = "\n".join(g.to_json(timings=False) for g in graphs) + "\n"
    calls = getattr(llm, "calls", [])
    return {
        "setting": _setting_of(llm), "wall_s": wall, "load_s": load,
        "sent": llm.prompt_tokens_sent, "evaluated": llm.prompt_tokens_evaluated, "restored": llm.states.restored,
        "calls": len(calls), "requests": sum(c["requests"] for c in calls),
        "multi_session_calls": sum(c["sessions"] > 1 for c in calls),
        "first_prompt_gap": sum(c["best_shared"] - c["first_shared"] for c in calls),
        "graphs": text, "details": sum(len(g.details) for g in graphs), "nodes": sum(len(g.nodes) for g in graphs),
    }


def demo_sessions(count: int) -> list[dict[str, Any]]:
    """The first ``count`` demo sessions (0: all), with logging set up and the libraries every run loads
    imported once, so that no timed run pays the imports alone."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for module in ("sentence_transformers", "faiss"):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    lines = SESSIONS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[:count or None]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting (default 2)")
    parser.add_argument("--sessions", type=int, default=0, help="only the first N demo sessions (0: all 4)")
    parser.add_argument("--settings", default="on,off",
                        help=f"comma-separated, from {', '.join(SETTINGS)} (default on,off)")
    parser.add_argument("--name", default="demo_prefix", help="result file name (benchmarks/results/NAME.json)")
    args = parser.parse_args(argv)
    settings = args.settings.split(",")
    if not settings or set(settings) - set(SETTINGS) or len(set(settings)) != len(settings):
        parser.error(f"--settings: distinct names from {', '.join(SETTINGS)}")
    sessions = demo_sessions(args.sessions)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    every: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for setting in settings[r % len(settings):] + settings[:r % len(settings)]:
            out = run_once(setting, sessions)
            if out["setting"] != setting:
                raise SystemExit(f"setting {setting} asked, the backend runs {out['setting']}: a load-time check "
                                 "failed on this machine, so there is nothing to compare")
            log.info("round %d %s: %.1f s (load %.1f), %d prompt tokens sent, %d evaluated, %d states restored, "
                     "%d calls", r + 1, setting, out["wall_s"], out["load_s"], out["sent"], out["evaluated"],
                     out["restored"], out["calls"])
            runs[setting].append(out)
            every.append(out)
    identical = len({o["graphs"] for o in every}) == 1
    figures: dict[str, Any] = {"sessions": len(sessions), "rounds": args.rounds}
    for name, outs in runs.items():
        figures.update({
            f"{name}.wall_s": round(statistics.median(o["wall_s"] for o in outs), 1),
            f"{name}.load_s": round(statistics.median(o["load_s"] for o in outs), 1),
            f"{name}.prompt_tokens_sent": outs[0]["sent"], f"{name}.prompt_tokens_evaluated": outs[0]["evaluated"],
            f"{name}.states_restored": outs[0]["restored"],
        })
    for name in settings[1:]:  # each setting against the first: medians, and slowest first against fastest
        key = "speedup" if name == "off" else f"speedup_{name}"
        figures[key] = round(figures[f"{name}.wall_s"] / figures[f"{settings[0]}.wall_s"], 3)
        figures[f"{key}_min"] = round(min(b["wall_s"] for b in runs[name])
                                      / max(a["wall_s"] for a in runs[settings[0]]), 3)
    first = runs[settings[0]][0]
    figures.update({
        f"evaluated_share_{settings[0]}": round(first["evaluated"] / first["sent"], 3),
        f"{settings[0]}.generate_calls": first["calls"], f"{settings[0]}.requests": first["requests"],
        f"{settings[0]}.multi_session_calls": first["multi_session_calls"],
        f"{settings[0]}.first_prompt_gap_tokens": first["first_prompt_gap"],
        "graphs_identical": identical, "graph_sha256": hashlib.sha256(every[0]["graphs"].encode()).hexdigest()[:16],
        "nodes": every[0]["nodes"], "details": every[0]["details"],
    })
    rows = [[i + 1, o["setting"], round(o["wall_s"], 1), round(o["load_s"], 1), o["sent"], o["evaluated"],
             o["restored"], o["calls"]] for i, o in enumerate(every)]
    command = "python -m benchmarks.runs.bench_demo_prefix" + "".join(
        f" {flag} {value}" for flag, value, default in (("--settings", args.settings, "on,off"),
                                                        ("--rounds", args.rounds, 2), ("--sessions", args.sessions, 0),
                                                        ("--name", args.name, "demo_prefix"))
        if value != default)
    write_result(args.name, figures, command,
                 tables={"runs": {"columns": ["run", "setting", "wall s", "load s", "prompt tokens sent",
                                              "evaluated", "states restored", "generate calls"], "rows": rows}},
                 note="the demo extraction (SmolLM2-135M on llama.cpp, demo.yaml) in each setting (on: prefix and "
                      "session states kept; prefix: the previous prompt's prefix only; off: every prompt whole), "
                      "rotating on freshly loaded engines in one run; 2-core shared machine, medians")
    if not identical:
        log.error("the graphs differ between settings: a kept prefix or state changed an answer")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
