"""``promem eval`` and ``promem convert``: benchmarks evaluated end to end, or converted into extraction input.

Heavy modules (the runner, the engine) wait until a command runs, so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.eval.variants import KINDS, VARIANTS

_SESSIONS_HELP = ("keep only the first N sessions of each item (LoCoMo: both speakers' copies of a session count "
                  "as one) and their gold points; a question stays when every session of its evidence is kept "
                  "or, when it names no evidence, the session it is asked after (HaluMem: its own session; "
                  "LoCoMo, LongMemEval: the last of the conversation or haystack, so only when nothing is cut)")
"""``--sessions`` of both commands: the rule of :meth:`promem_fast.eval.benchmark.Benchmark.first_sessions`."""


_ROUTINGS = ("official", "both")
"""The keys of :data:`promem_fast.eval.updates.UPDATE_ROUTINGS`, repeated so the parser imports nothing heavy."""


def register(subparsers: Any) -> None:
    """Add ``eval`` and ``convert`` to the ``promem`` subcommands (``subparsers`` from ``add_subparsers``).

    ``eval`` takes an action: a benchmark to run (``promem eval halumem --data …``) or ``aggregate``, which
    recomputes the scores from stored judge labels (``promem eval aggregate LABELS.json``)."""
    p = subparsers.add_parser(
        "eval", help="evaluate on HaluMem, LoCoMo or LongMemEval, or aggregate stored judge labels",
        description="`promem eval KIND --data FILE` extracts (or reuses) memory graphs for a benchmark, answers "
                    "its questions from them, judges with the configured LLM, and writes "
                    "OUT/result-<kind>-<variant>.json plus a report of every variant in OUT (OUT/report-<kind>.md, "
                    "OUT/variants-<kind>.png). `promem eval aggregate LABELS.json` recomputes the scores from "
                    "judge labels alone.")
    actions = p.add_subparsers(dest="action", required=True, metavar="{" + ",".join((*KINDS, "aggregate")) + "}")
    for kind in KINDS:
        _add_benchmark(actions, kind)
    a = actions.add_parser(
        "aggregate", help="recompute the scores from judge labels (ours or HaluMem's record files)",
        description="Recompute the scores from stored judge labels, without asking a judge: a promem result "
                    "(result-<kind>-<variant>.json), its labels object, or HaluMem's own record files (the "
                    "per-user files of its evaluation or its *_eval_stat_result.json; several are pooled). Every "
                    "record is checked; a bad one is reported by file, record and field. Grades a judge did not "
                    "give (null, \"judge_failed\") are counted and their share shown, with a warning past 5%.")
    a.add_argument("labels", type=Path, nargs="+", metavar="LABELS.json", help="labels file(s)")
    a.add_argument("-o", "--output", type=Path, help="also write the aggregates as JSON here (for HaluMem labels "
                   "with HaluMem's overall_score key names too)")
    a.add_argument("--report", type=Path, help="also write the markdown report here")
    a.set_defaults(func=cmd_aggregate)

    p = subparsers.add_parser("convert", help="write a benchmark's sessions as promem input JSONL",
                              description="Convert a benchmark file into the session JSONL that "
                                          "`promem extract` reads (one session per line, each once).")
    p.add_argument("kind", choices=KINDS, help="benchmark")
    p.add_argument("--data", type=Path, required=True, help="the benchmark file")
    p.add_argument("-o", "--output", type=Path, required=True, help="sessions JSONL to write")
    p.add_argument("--limit", type=int, help="only the first N users / conversations / questions")
    p.add_argument("--sessions", type=int, metavar="N", help=_SESSIONS_HELP)
    p.set_defaults(func=cmd_convert)


def _add_benchmark(actions: Any, kind: str) -> None:
    """``promem eval KIND``: one benchmark's evaluation run and its options."""
    p = actions.add_parser(kind, help=f"evaluate on {kind} (one variant per run)")
    p.add_argument("--data", type=Path, required=True, help="the benchmark file (HaluMem JSONL, LoCoMo or "
                   "LongMemEval JSON)")
    p.add_argument("--limit", type=int, help="only the first N users / conversations / questions")
    p.add_argument("--sessions", type=int, metavar="N", help=_SESSIONS_HELP)
    p.add_argument("--variant", choices=tuple(VARIANTS), default="full",
                   help="full ProMem, an ablation (one-off, no-cc, no-hv, no-da, no-rel) or the NativeRAG "
                        "baseline (raw turns retrieved, nothing extracted); default: full")
    p.add_argument("-o", "--out-dir", type=Path, default=Path("eval-out"), help="output folder (default: eval-out)")
    p.add_argument("--graphs", type=Path, help="graphs JSONL to reuse and extend (default: "
                   "OUT/graphs-<kind>-<variant>.jsonl; sessions already in it are not extracted again)")
    p.add_argument("--users", metavar="START:END", help="only the users (conversations, questions) at these "
                   "positions of the file, e.g. 5: to keep the first five apart for calibration")
    p.add_argument("--tau", type=Path, metavar="TAU.json", help="use the tau_comp of `promem calibrate tau -o`; "
                   "refused when it was calibrated for another embedder or on any user evaluated here")
    p.add_argument("--retrieval", action="store_true",
                   help="measure retrieval only: evidence recall@k per question category (no answering, no judge; "
                        "writes OUT/retrieval-<kind>.json and .md)")
    p.add_argument("--k", default="1,5,10,20", metavar="K,K,…", help="with --retrieval: the k of recall@k")
    p.add_argument("--time-aware", action="store_true",
                   help="with --retrieval: also measure with each question seeing only the memories that held at "
                        "its time (the store's as_of)")
    if kind == "halumem":
        p.add_argument("--update-points", choices=_ROUTINGS, default="official",
                       help="official (default, as HaluMem's own evaluation): a gold point with is_update and "
                            "earlier values goes to the update judge with the store's top-10 memories for it, any "
                            "other point (or one the search finds nothing for) to the integrity judge; both: every "
                            "point to the integrity judge too, so recall covers every gold point")
        p.add_argument("--judge-prompts", type=Path, metavar="PATH",
                       help="grade with HaluMem's official judge prompts, read from PATH: your checkout of the "
                            "HaluMem repository (its eval/eval_tools.py) or that file; the result records the file "
                            "and its sha256 (default: the project's own judge prompts)")
    config_args(p)
    p.set_defaults(func=cmd_eval, kind=kind)


def headline(kind: str, result: dict[str, Any]) -> str:
    """The main figures of a result on one line (percentages, then extraction tokens per session)."""
    from promem_fast.eval.report import HEADLINE_METRICS

    head = result["headline"]
    parts = [f"{name} {'-' if head[key] is None else f'{100 * head[key]:.2f}'}"
             for name, key in HEADLINE_METRICS[kind]]
    tokens = head["tokens_per_session"]
    parts.append(f"tokens/session {'-' if tokens is None else f'{tokens / 1000:.2f}K'}")
    return "  ".join(parts)


def cmd_eval(args: argparse.Namespace) -> int:
    from promem_fast.eval.runner import run_eval

    if args.retrieval:
        return _retrieval(args)

    result = run_eval(args.kind, args.data, build_config(args), limit=args.limit, sessions=args.sessions,
                      variant=args.variant, out_dir=args.out_dir, graphs_path=args.graphs,
                      update_routing=getattr(args, "update_points", "official"),
                      judge_prompts_path=getattr(args, "judge_prompts", None), users=args.users,
                      tau_path=args.tau)
    counts = result["counts"]
    print(f"{result['benchmark']} [{result['label']}]: {counts['users']} users, {counts['sessions']} sessions, "
          f"{counts['questions']} questions, {counts['graphs']} graphs")
    print(headline(args.kind, result))
    _print_warnings(result["aggregates"])
    failed = (result["cost"]["extraction"] or {}).get("failed_steps") or {}
    if failed:
        print("failed extraction steps: " + "  ".join(f"{stage} {n}" for stage, n in failed.items())
              + " (see each graph's stats.failures and the report)")
    if counts["failed_answers"] or counts["failed_eval_steps"]:
        print(f"failed answers {counts['failed_answers']}, failed evaluation steps {counts['failed_eval_steps']} "
              f"(see eval_failures in the result)")
    for name in ("result", "report", "chart", "graphs"):
        if result["files"][name]:
            print(f"{name}: {result['files'][name]}")
    return _judged(result["aggregates"])


JUDGE_FAILED_SHARE = 0.5
"""Past this share of judge records without a usable grade, a run's figures are not a measurement."""


def _judged(aggregates: dict[str, Any]) -> int:
    """0, or 3 with one line on stderr when the judges gave no usable grade for most records: the figures
    printed then (a 0.00 among them) describe the judge's failures, not the memory."""
    import sys

    table = aggregates.get("unscored") or {}
    total, bad = sum(row["n"] for row in table.values()), sum(row["unscored"] for row in table.values())
    if total and bad / total > JUDGE_FAILED_SHARE:
        print(f"promem: the judges gave no usable grade for {bad} of {total} records ({100 * bad / total:.0f}%); "
              "the figures above are not a measurement (see the warnings and eval_failures in the result)",
              file=sys.stderr)
        return 3
    return 0


def _retrieval(args: argparse.Namespace) -> int:
    """``promem eval KIND --retrieval``: evidence recall@k, printed as the report's table."""
    from promem_fast.errors import ConfigError
    from promem_fast.eval.retrieval import render, run_retrieval

    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        raise ConfigError(f"--k takes integers separated by commas, got {args.k!r}") from None
    result = run_retrieval(args.kind, args.data, build_config(args), out_dir=args.out_dir, limit=args.limit,
                           sessions=args.sessions, graphs_path=args.graphs, ks=ks, time_aware=args.time_aware,
                           users=args.users, tau_path=args.tau)
    print(render(result))
    print(f"retrieval: {args.out_dir / f'retrieval-{args.kind}.json'}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from promem_fast.eval.datasets import load_benchmark
    from promem_fast.private import open_private, private_dirs

    bench = load_benchmark(args.kind, args.data, args.limit, sessions=args.sessions)
    private_dirs(args.output.parent)
    n = 0
    with open_private(args.output, "w", encoding="utf-8") as handle:
        for session in bench.iter_sessions():
            handle.write(json.dumps(session.to_dict(), ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} sessions of {bench.name} to {args.output}")
    return 0


def _print_warnings(aggregates: dict[str, Any]) -> None:
    for warning in aggregates.get("warnings", []):
        print(f"warning: {warning}")


def cmd_aggregate(args: argparse.Namespace) -> int:
    from promem_fast.eval.aggregate import aggregate, load_labels, render

    labels = load_labels(args.labels)
    result = aggregate(labels)
    counts = ", ".join(f"{n} {group}" for group, n in result["counts"].items())
    routing = f"; update points: {labels.update_routing}" if labels.update_routing else ""
    print(f"{labels.kind} labels from {len(labels.sources)} file(s), {labels.format} format: {counts}{routing}")
    print(headline(labels.kind, {"headline": {**result["headline"], "tokens_per_session": None}}))
    unscored = result["aggregates"].get("unscored", {})
    if unscored:
        print("unscored: " + "  ".join(
            f"{judge} {row['unscored']}/{row['n']}" + ("" if row["share"] is None else f" ({100 * row['share']:.1f}%)")
            for judge, row in unscored.items()))
    _print_warnings(result["aggregates"])
    if args.output:
        _write(args.output, json.dumps(result, ensure_ascii=False, indent=1))
        print(f"aggregates: {args.output}")
    if args.report:
        _write(args.report, render(result))
        print(f"report: {args.report}")
    return 0


def _write(path: Path, text: str) -> None:
    """Write an output file; a path that cannot be written is the user's to fix: one line naming it."""
    from promem_fast.errors import InputError
    from promem_fast.private import write_private

    try:
        write_private(path, text)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=str(path)) from None
