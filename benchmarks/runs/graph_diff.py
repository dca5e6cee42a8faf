"""What the scripted profile extracts from the HaluMem sample, compared between two code versions.

    python -m benchmarks.runs.graph_diff write OUT.jsonl [--set pipeline.detail_source=turn ...]
    python -m benchmarks.runs.graph_diff diff BEFORE.jsonl AFTER.jsonl [--out benchmarks/results/graph_diff.json]

``write`` extracts every session of the sample with the scripted profile (with the code on ``PYTHONPATH``:
run it once from an export of the baseline commit) and writes one graph per line; ``diff`` counts, over all
sessions, the nodes, details and edges only one side has (nodes by text, details by turn and text, edges by
their two node texts and relation), and the nodes both have whose verification changed. A few of the
differing items are printed as examples, never written to ``--out``: they are the dataset's words, reworded,
and its licence does not let a reworded copy ship (the results file holds counts only).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common.paths import HALUMEM
from benchmarks.common.workload import load_halumem_sessions


def write(out: Path, overrides: list[str]) -> None:
    from promem_fast.config import EngineConfig
    from promem_fast.engine import Engine

    config = EngineConfig.profile("scripted").with_overrides(overrides)
    config.record_timings = False
    graphs = Engine(config).extract(load_halumem_sessions(HALUMEM))
    out.write_text("".join(g.to_json(timings=False) + "\n" for g in graphs), encoding="utf-8")


def _parts(graph: dict[str, Any]) -> tuple[dict[str, str], set[tuple[Any, str]], set[tuple[str, str, str]]]:
    nodes = graph["nodes"]
    texts = {n["text"]: n["verification"] for n in nodes}
    details = {(d["turn_id"], d["text"]) for d in graph["details"]}
    edges = {(nodes[e["source"]]["text"], e["relation"], nodes[e["target"]]["text"]) for e in graph["edges"]}
    return texts, details, edges


def diff(before: Path, after: Path) -> dict[str, Any]:
    old = [json.loads(line) for line in before.read_text(encoding="utf-8").splitlines()]
    new = [json.loads(line) for line in after.read_text(encoding="utf-8").splitlines()]
    totals: Counter[str] = Counter()
    relabelled: Counter[str] = Counter()
    examples: dict[str, list[Any]] = {}
    for a, b in zip(old, new):
        (na, da, ea), (nb, db, eb) = _parts(a), _parts(b)
        for name, x, y in (("nodes", set(na), set(nb)), ("details", da, db), ("edges", ea, eb)):
            totals[f"{name}_before"] += len(x)
            totals[f"{name}_after"] += len(y)
            totals[f"{name}_only_before"] += len(x - y)
            totals[f"{name}_only_after"] += len(y - x)
            for side, items in (("only_before", x - y), ("only_after", y - x)):
                examples.setdefault(f"{name}_{side}", []).extend(sorted(items, key=str)[:2])
        for text in set(na) & set(nb):
            if na[text] != nb[text]:
                relabelled[f"{na[text]} -> {nb[text]}"] += 1
    return {"sessions": len(new), "counts": dict(totals), "verification_changed": dict(relabelled),
            "examples": {k: v[:6] for k, v in examples.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    w.add_argument("--set", action="append", default=[], dest="overrides")
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    d.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "write":
        write(args.out, args.overrides)
        return 0
    result = diff(args.before, args.after)
    print(json.dumps(result, indent=1, default=list))
    if args.out:
        kept = {k: v for k, v in result.items() if k != "examples"}
        args.out.write_text(json.dumps(kept, indent=1, default=list) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
