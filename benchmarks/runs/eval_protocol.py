"""The evaluation protocol's cost and shape on the HaluMem development user, before and after a change.

    python -m benchmarks.runs.eval_protocol --label after                      # scripted profile, all 29 sessions
    python -m benchmarks.runs.eval_protocol --label after --profile cpu --sessions 2   # SmolLM2-135M on llama.cpp
    python -m benchmarks.runs.eval_protocol --retrieval        # evidence recall@k (scripted memories, MiniLM)

Runs ``promem eval halumem`` on /work/shared/data/halumem-dev (never copied: only aggregate figures are
written) and writes ``benchmarks/results/eval_protocol-<profile>-<label>.json``: extraction tokens and calls
per session and stage, failed steps per stage (read from the graphs file, so results of any version compare),
judge calls and tokens, how many gold points each judge graded, how many memories the update judge saw, and
the headline scores. Run it once with the code before a change (``PYTHONPATH=<old checkout>``) and once
after; ``--compare`` then writes the side-by-side table ``eval_protocol-<profile>.md``.

The scripted profile shows control flow and cost, not quality; SmolLM2-135M shows cost and reply format on a
real model, not quality either.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import RESULTS
from benchmarks.tools import figures

DEV = Path("/work/shared/data/halumem-dev/pilot_slice_user0.jsonl")


RECOVERY = ("cut_continued", "list_continuations", "continued_items", "retried_requests", "lists_left_full")
"""Counters of replies asked again and what that brought back (None where the code never counted one). The
names of ``promem_fast.eval.runner.RECOVERY_COUNTS``, written out: a "before" run imports an older
``promem_fast`` (``PYTHONPATH``), which has no such constant."""


def summarise(result: dict[str, Any], graphs: Path, seconds: float) -> dict[str, Any]:
    """The figures compared before and after, from a result and its graphs file."""
    failed: dict[str, int] = {}
    kept = dict.fromkeys(("nodes", "details", "events", "edges"), 0)
    recovery: dict[str, int | None] = dict.fromkeys(RECOVERY)  # None: never counted by that code
    cut: dict[str, int] = {}
    for line in graphs.read_text(encoding="utf-8").splitlines():
        graph = json.loads(line)
        stats = graph.get("stats", {})
        for failure in stats.get("failures", []):
            failed[failure["stage"]] = failed.get(failure["stage"], 0) + 1
        for key in kept:
            kept[key] += len(graph.get(key, []))
        for key in recovery:
            if key in stats.get("counts", {}) or recovery[key] is not None:
                recovery[key] = (recovery[key] or 0) + stats.get("counts", {}).get(key, 0)
        for stage, st in stats.get("stages", {}).items():
            if "cut_replies" in st:
                cut[stage] = cut.get(stage, 0) + st["cut_replies"]
    cost = result["cost"]["extraction"]
    judge = result["cost"]["evaluation"]["judge"]
    labels = result["labels"]
    shown = [u.get("memories_shown", 0) for u in labels["update"]]
    return {
        "code": result.get("provenance", {}).get("code", "not recorded (before provenance was kept)"),
        "sessions": result["counts"]["sessions"], "questions": result["counts"]["questions"],
        "extraction": {"tokens_per_session": cost["tokens_per_session"], "calls_per_session": cost["calls_per_session"],
                       "uncached_prefill_per_session": cost.get("uncached_prefill_per_session"),
                       "per_stage": {s: {"tokens": v["tokens"], "calls": v["calls"]}
                                     for s, v in cost["per_session"].items()},
                       "failed_steps": failed, "kept": kept, "cut_replies": cut, "recovery": recovery,
                       "failed_steps_in_report": "Failed steps per stage" in
                       (graphs.parent / "report-halumem.md").read_text(encoding="utf-8")},
        "judging": {"calls": judge["calls"], "prompt_tokens": judge["prompt_tokens"],
                    "completion_tokens": judge["completion_tokens"], "integrity_points": len(labels["integrity"]),
                    "update_points": len(labels["update"]), "accuracy_entries": len(labels["accuracy"]),
                    "update_memories_shown_mean": sum(shown) / len(shown) if shown else None,
                    "failed_eval_steps": result["counts"]["failed_eval_steps"]},
        "headline": result["headline"],
        "update": {k: (result["aggregates"]["extraction"] or {}).get("update", {}).get(k)
                   for k in ("correct", "hallucination", "omission")},
        "wall_seconds": seconds,
    }


def run(profile: str, sessions: int | None, out: Path) -> dict[str, Any]:
    from promem_fast.config import EngineConfig
    from promem_fast.eval.runner import run_eval

    config = EngineConfig.profile(profile)
    config.progress = False
    started = time.perf_counter()
    result = run_eval("halumem", DEV, config, out_dir=out, sessions=sessions)
    return summarise(result, Path(result["files"]["graphs"]), time.perf_counter() - started)


def retrieval(out: Path) -> Path:
    """Evidence recall@k on the development user: the scripted stand-in's extraction, retrieved with the CPU
    default's real embedder (all-MiniLM-L6-v2), so the figure is the store and embedder's, on stand-in memories."""
    from promem_fast.config import EmbedderConfig, EngineConfig
    from promem_fast.eval.retrieval import render, run_retrieval

    config = EngineConfig.profile("scripted")
    config.embedder = EmbedderConfig()
    result = run_retrieval("halumem", DEV, config, out_dir=out, time_aware=True)
    result["note"] = "scripted extraction (stand-in memories), all-MiniLM-L6-v2 retrieval: a retrieval-stack figure"
    path = RESULTS / "retrieval-halumem-dev.json"
    commit, dirty = figures.current_commit()
    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
             "dirty": dirty, "command": "python -m benchmarks.runs.eval_protocol --retrieval",
             "machine": machine_info()}
    kept = {k: _aggregate(v) if k in ("without_time", "with_time") else v for k, v in result.items()
            if k != "provenance"}
    path.write_text(json.dumps(stamp | kept | {"code": result["provenance"]["code"]}, indent=1), encoding="utf-8")
    figures.adopt(path, stamp["command"])  # its numeric fields become the figures the README quotes
    path.with_suffix(".md").write_text(render(result) + f"\n{result['note']}.\n", encoding="utf-8")
    return path


def _aggregate(table: dict[str, Any]) -> dict[str, Any]:
    """A retrieval table without its per-question records: they hold the development user's questions, whose
    licence does not let a copy ship (the run's own output directory keeps them)."""
    return {k: v for k, v in table.items() if k != "questions"}


def _code(summary: dict[str, Any]) -> str:
    code = summary["code"]
    if not isinstance(code, dict):
        return str(code)
    return code.get("label") or (code["commit"] or "")[:12] or f"version {code.get('package_version')}"


def _count(summary: dict[str, Any], key: str) -> str:
    value = summary["extraction"].get("recovery", {}).get(key)
    return "not counted" if value is None else str(value)


def compare(profile: str) -> str:
    """The before/after table of one profile's two summaries."""
    sides = {label: json.loads((RESULTS / f"eval_protocol-{profile}-{label}.json").read_text())
             for label in ("before", "after")}
    rows = [("extraction tokens / session", lambda s: f"{s['extraction']['tokens_per_session']:.0f}"),
            ("extraction calls / session", lambda s: f"{s['extraction']['calls_per_session']:.2f}"),
            ("uncached prefill tokens / session", lambda s: "not counted" if s["extraction"].get(
                "uncached_prefill_per_session") is None else f"{s['extraction']['uncached_prefill_per_session']:.0f}"),
            ("failed extraction steps", lambda s: json.dumps(s["extraction"]["failed_steps"])),
            ("nodes / details / events / edges kept", lambda s: " / ".join(
                str(s["extraction"].get("kept", {}).get(k, "-")) for k in ("nodes", "details", "events", "edges"))),
            ("replies cut by their token budget", lambda s: str(sum(s["extraction"]["cut_replies"].values()))
             if s["extraction"].get("cut_replies") else "not counted"),
            ("lists asked again (cut / full)", lambda s: " / ".join(
                _count(s, k) for k in ("cut_continued", "list_continuations"))),
            ("items recovered by asking again", lambda s: _count(s, "continued_items")),
            ("requests retried after an unusable reply", lambda s: _count(s, "retried_requests")),
            ("failed steps shown in the report", lambda s: str(s["extraction"]["failed_steps_in_report"])),
            ("judge calls", lambda s: str(s["judging"]["calls"])),
            ("judge prompt tokens", lambda s: str(s["judging"]["prompt_tokens"])),
            ("gold points to the integrity judge", lambda s: str(s["judging"]["integrity_points"])),
            ("update points to the update judge", lambda s: str(s["judging"]["update_points"])),
            ("memories shown per update point", lambda s: "-" if s["judging"]["update_memories_shown_mean"] is None
             else f"{s['judging']['update_memories_shown_mean']:.2f}"),
            ("Mem. Integrity / Accuracy / F1 (%)", lambda s: " / ".join(
                "-" if s["headline"][k] is None else f"{100 * s['headline'][k]:.2f}"
                for k in ("memory_integrity", "memory_accuracy", "memory_f1"))),
            ("update Correct / Halu. / Omission (%)", lambda s: " / ".join(
                "-" if s["update"][k] is None else f"{100 * s['update'][k]:.2f}"
                for k in ("correct", "hallucination", "omission"))),
            ("QA accuracy (%)", lambda s: f"{100 * s['headline']['qa_accuracy']:.2f}")]
    lines = [f"# Evaluation protocol on the HaluMem development user: {profile} profile, before → after", "",
             f"{sides['after']['sessions']} sessions, {sides['after']['questions']} questions. "
             + ("Scripted stand-ins: control flow and cost, not quality. The stand-ins give no token ids, so every "
                "prompt token counts as uncached prefill." if profile == "scripted" else
                "SmolLM2-135M: cost and reply format, not quality."), "",
             "| | before | after |", "| --- | --- | --- |",
             f"| code | {_code(sides['before'])} | {_code(sides['after'])} |"]
    lines += [f"| {name} | {get(sides['before'])} | {get(sides['after'])} |" for name, get in rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", choices=("before", "after"), default="after")
    parser.add_argument("--profile", choices=("scripted", "cpu"), default="scripted")
    parser.add_argument("--sessions", type=int, help="only the first N sessions (the cpu profile takes minutes each)")
    parser.add_argument("--compare", action="store_true", help="write the before/after table from both summaries")
    parser.add_argument("--code", help="what code ran, for a run from an export without .git (e.g. main@d2c8d77)")
    parser.add_argument("--retrieval", action="store_true", help="evidence recall@k on the development user "
                        "(results/retrieval-halumem-dev.json and .md)")
    parser.add_argument("--summarise-again", action="store_true", help="rewrite the summary from the files a "
                        "finished run left in the scratch folder (after the summary itself gained figures)")
    parser.add_argument("--command", default="python -m benchmarks.runs.eval_protocol",
                        help="with --summarise-again: the command the run was made with, when its summary lacks it")
    parser.add_argument("--work", type=Path, default=Path("eval-protocol-out"), help="scratch folder for the run")
    args = parser.parse_args()
    results = RESULTS
    if args.compare:
        path = results / f"eval_protocol-{args.profile}.md"
        path.write_text(compare(args.profile), encoding="utf-8")
        print(path.read_text(encoding="utf-8"))
        return 0
    if not DEV.is_file():
        print(f"{DEV} is not here: nothing to run", file=sys.stderr)
        return 2
    if args.retrieval:
        print(f"wrote {retrieval(args.work / 'retrieval')}")
        return 0
    work = args.work / f"{args.profile}-{args.label}"
    path = results / f"eval_protocol-{args.profile}-{args.label}.json"
    if args.summarise_again:  # the run's own files; its wall time, date and machine from the summary written then
        earlier = json.loads(path.read_text(encoding="utf-8"))
        result = json.loads((work / "result-halumem-full.json").read_text(encoding="utf-8"))
        summary = summarise(result, work / "graphs-halumem-full.jsonl", earlier["wall_seconds"])
        ran = datetime.datetime.fromtimestamp((work / "result-halumem-full.json").stat().st_mtime, datetime.timezone.utc)
        summary |= {"date": earlier.get("date") or ran.isoformat(timespec="seconds"),
                    "machine": earlier.get("machine") or machine_info(),  # scratch files are this machine's
                    "command": earlier.get("command") or args.command}
    else:
        summary = run(args.profile, args.sessions, work)
        summary |= {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "machine": machine_info(), "command": " ".join(["python -m benchmarks.runs.eval_protocol", *sys.argv[1:]])}
    if args.code:
        summary["code"] = {**summary["code"], "label": args.code} if isinstance(summary["code"], dict) else args.code
    code = summary["code"] if isinstance(summary["code"], dict) else {}
    named = figures._git("rev-parse", "--verify", args.code.rpartition("@")[2]) if args.code else None
    summary |= {"commit": named or code.get("commit"), "dirty": bool(code.get("dirty"))}
    path.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    figures.adopt(path, summary.get("command", "python -m benchmarks.runs.eval_protocol"))  # a result file README quotes
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
