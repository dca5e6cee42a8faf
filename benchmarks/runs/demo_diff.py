"""Two demo runs' graphs side by side: LLM calls and tokens per stage, what was kept, what the relation step did.

    promem demo -o before.jsonl        # on a checkout of the baseline commit
    promem demo -o after.jsonl
    python -m benchmarks.runs.demo_diff before.jsonl after.jsonl --name demo_diff_compact_replies

``promem demo`` runs SmolLM2-135M on llama.cpp over the four demo sessions; its graphs carry each session's
statistics (calls, prompt and reply tokens per stage, the relation step's counters). A 135M model shows what
a change costs and whether its replies still take the shape asked for, not memory quality.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.tools.figures import write_result

EDGE_COUNTERS = ("relations_inferred", "edges_candidate", "edges_cleaned_away", "edges_untested", "edges_implicit",
                 "edges_unsupported", "edges_kept")


def summary(path: Path) -> dict[str, Any]:
    """Totals over a demo output's sessions: calls and tokens per stage, nodes, details, edges, failed steps
    and the relation step's counters."""
    stages: dict[str, Counter[str]] = {}
    counts: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        graph = json.loads(line)
        for stage, st in graph["stats"]["stages"].items():
            stages.setdefault(stage, Counter()).update(
                {k: st.get(k, 0) for k in ("calls", "prompt_tokens", "completion_tokens")})
        counts.update({k: v for k, v in graph["stats"]["counts"].items() if k in EDGE_COUNTERS})
        counts["failed_steps"] += len(graph["stats"].get("failures", []))
        kept.update(nodes=len(graph["nodes"]), details=len(graph["details"]), edges=len(graph["edges"]))
    total = Counter()
    for st in stages.values():
        total.update(st)
    return {"stages": {k: dict(v) for k, v in sorted(stages.items())}, "total": dict(total), "kept": dict(kept),
            "counts": {k: counts.get(k, 0) for k in (*EDGE_COUNTERS, "failed_steps")}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--name", default="demo_diff", help="the result file's name")
    p.add_argument("--before-commit", default="", help="the commit the before file came from")
    args = p.parse_args(argv)
    sides = {"before": summary(args.before), "after": summary(args.after)}
    figures: dict[str, Any] = {}
    for side, s in sides.items():
        for key, value in s["total"].items():
            figures[f"{side}.total.{key}"] = value
        for stage, st in s["stages"].items():
            for key, value in st.items():
                figures[f"{side}.{stage}.{key}"] = value
        for key, value in {**s["kept"], **s["counts"]}.items():
            figures[f"{side}.{key}"] = value
    stages = sorted(set(sides["before"]["stages"]) | set(sides["after"]["stages"]))
    rows = [[stage, *(sides[side]["stages"].get(stage, {}).get(k, 0) for side in sides
                      for k in ("calls", "completion_tokens"))] for stage in stages]
    command = ("promem demo -o before.jsonl (on a checkout of the baseline); promem demo -o after.jsonl; "
               f"python -m benchmarks.runs.demo_diff before.jsonl after.jsonl --name {args.name}"
               + (f" --before-commit {args.before_commit}" if args.before_commit else ""))
    write_result(args.name, figures, command, note=f"SmolLM2-135M demo, baseline {args.before_commit or '?'} "
                 "against this commit: calls and tokens per stage, what was kept, the relation step's counters",
                 tables={"stages": {"columns": ["stage", "calls before", "reply tokens before", "calls after",
                                                "reply tokens after"], "rows": rows}})
    print(json.dumps(sides, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
