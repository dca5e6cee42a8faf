"""`make demo` with llama.cpp's prefix reuse on and off, side by side: wall seconds, prompt tokens sent and
evaluated, and whether the graphs are the same bytes.

    python -m benchmarks.runs.bench_demo_prefix                # writes benchmarks/results/demo_prefix.json
    python -m benchmarks.runs.bench_demo_prefix --rounds 3 --sessions 2

Each round runs the demo extraction (``promem_fast/data/demo_sessions.jsonl`` with ``data/demo.yaml``:
SmolLM2-135M on llama.cpp, MiniLM, the chat model as NLI judge) once with ``llm.prefix_reuse`` true and once
false, in alternating order (on then off, then off then on, ...), each on a freshly loaded engine, because the
machine is shared: only figures from the same run compare. Wall seconds are those of ``Engine.extract``,
model loading included, as ``make demo`` pays them (the libraries are imported once before the first run, so
no run pays the imports alone).

Per run the llama.cpp backend counts the prompt tokens it was sent and those it evaluated (the rest came from
the kept prefix of the previous prompt). It also records every ``generate`` call the continuous driver made:
how many requests and distinct sessions (session blocks) it held, and, for the call's first prompt, how many
tokens it shared with the prompt before it against the most any prompt of that call shared with it. The gap
is what running each call from the prompt nearest the cached one (instead of from the smallest in token
order) would save; within a call the token order already puts a session's prompts next to each other.
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


def run_once(reuse: bool, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """One demo extraction on a fresh engine; its figures and the graphs' bytes."""
    from promem_fast.config import EngineConfig
    from promem_fast.engine import Engine

    config = EngineConfig.resolve(file=DEMO, overrides=[f"llm.prefix_reuse={str(reuse).lower()}"])
    started = time.perf_counter()
    llm = recording_backend(config.llm)
    with Engine(config, llm=llm) as engine:
        graphs = engine.extract(sessions)
        wall = time.perf_counter() - started
        load = llm.load_seconds + engine.services.load_seconds
    text = "\n".join(g.to_json(timings=False) for g in graphs) + "\n"
    calls = getattr(llm, "calls", [])
    return {
        "reuse": llm.reuses_prefix, "wall_s": wall, "load_s": load,
        "sent": llm.prompt_tokens_sent, "evaluated": llm.prompt_tokens_evaluated,
        "calls": len(calls), "requests": sum(c["requests"] for c in calls),
        "multi_session_calls": sum(c["sessions"] > 1 for c in calls),
        "first_prompt_gap": sum(c["best_shared"] - c["first_shared"] for c in calls),
        "graphs": text, "details": sum(len(g.details) for g in graphs), "nodes": sum(len(g.nodes) for g in graphs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting (default 2)")
    parser.add_argument("--sessions", type=int, default=0, help="only the first N demo sessions (0: all 4)")
    parser.add_argument("--name", default="demo_prefix", help="result file name (benchmarks/results/NAME.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for module in ("sentence_transformers", "faiss"):  # imported once before the first timed run
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    lines = SESSIONS.read_text(encoding="utf-8").splitlines()
    sessions = [json.loads(line) for line in lines[:args.sessions or None]]
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    every: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for reuse in ((True, False) if r % 2 == 0 else (False, True)):
            out = run_once(reuse, sessions)
            if out["reuse"] != reuse:
                raise SystemExit(f"prefix reuse asked {reuse}, backend has {out['reuse']}: the load-time check "
                                 "failed on this machine, so there is nothing to compare")
            log.info("round %d reuse %s: %.1f s (load %.1f), %d prompt tokens sent, %d evaluated, %d calls",
                     r + 1, reuse, out["wall_s"], out["load_s"], out["sent"], out["evaluated"], out["calls"])
            runs[reuse].append(out)
            every.append(out)
    identical = len({o["graphs"] for o in every}) == 1
    on, off = runs[True], runs[False]
    med = {key: {k: statistics.median(o[key] for o in v) for k, v in (("on", on), ("off", off))}
           for key in ("wall_s", "load_s")}
    figures: dict[str, Any] = {
        "sessions": len(sessions), "rounds": args.rounds,
        "on.wall_s": round(med["wall_s"]["on"], 1), "off.wall_s": round(med["wall_s"]["off"], 1),
        "on.load_s": round(med["load_s"]["on"], 1), "off.load_s": round(med["load_s"]["off"], 1),
        "speedup": round(med["wall_s"]["off"] / med["wall_s"]["on"], 3),
        "speedup_min": round(min(b["wall_s"] for b in off) / max(a["wall_s"] for a in on), 3),
        "on.prompt_tokens_sent": on[0]["sent"], "on.prompt_tokens_evaluated": on[0]["evaluated"],
        "off.prompt_tokens_sent": off[0]["sent"], "off.prompt_tokens_evaluated": off[0]["evaluated"],
        "evaluated_share_on": round(on[0]["evaluated"] / on[0]["sent"], 3),
        "on.generate_calls": on[0]["calls"], "on.requests": on[0]["requests"],
        "on.multi_session_calls": on[0]["multi_session_calls"], "on.first_prompt_gap_tokens": on[0]["first_prompt_gap"],
        "graphs_identical": identical, "graph_sha256": hashlib.sha256(every[0]["graphs"].encode()).hexdigest()[:16],
        "nodes": every[0]["nodes"], "details": every[0]["details"],
    }
    rows = [[i + 1, "on" if o["reuse"] else "off", round(o["wall_s"], 1), round(o["load_s"], 1), o["sent"],
             o["evaluated"], o["calls"]] for i, o in enumerate(every)]
    write_result(args.name, figures, "python -m benchmarks.runs.bench_demo_prefix" + (f" --rounds {args.rounds}"
                 if args.rounds != 2 else "") + (f" --sessions {args.sessions}" if args.sessions else ""),
                 tables={"runs": {"columns": ["run", "prefix reuse", "wall s", "load s", "prompt tokens sent",
                                              "evaluated", "generate calls"], "rows": rows}},
                 note="the demo extraction (SmolLM2-135M on llama.cpp, demo.yaml) with llm.prefix_reuse on and off, "
                      "alternating on freshly loaded engines in one run; 2-core shared machine, medians")
    if not identical:
        log.error("the graphs differ between runs: prefix reuse changed an answer")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
