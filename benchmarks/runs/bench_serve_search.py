"""Search latency of ``promem serve`` under extraction load: an earlier commit against this tree, side by side.

Run: ``python -m benchmarks.runs.bench_serve_search [--before REF] [--rounds 2] [--load 160]
[--variant after_idle="--engine-priority idle"]``. The earlier commit (default: where this branch left
``main``) is exported with ``git archive`` to a temporary folder, and :mod:`serve_search_probe` runs against
each source tree in turn (and this tree again per ``--variant``, with more ``promem serve`` options),
interleaved round by round so all meet the same load on a shared machine. Writes
``benchmarks/results/serve_search.json``: per side, the median over rounds of idle and loaded search p50 / p99
(ms, over HTTP), of sessions per second and of the 1-minute load average (this run's own processes included).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import RESULTS, ROOT
from benchmarks.tools.figures import adopt

RESULT = RESULTS / "serve_search.json"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def stamp(runs: dict[str, Any]) -> dict[str, Any]:
    """What a before/after result file ends with: its raw rounds, the machine, when, and which tree ran."""
    return {"runs": runs, "machine": machine_info(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def export(ref: str, folder: Path) -> Path:
    """The source tree of ``ref`` with this tree's native module (rebuilt when ``csrc`` differs)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    same_native = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", ref, "--", "csrc", "setup.py"]).returncode == 0
    if same_native:
        for built in (ROOT / "promem_fast").glob("_native*.so"):
            shutil.copy2(built, folder / "promem_fast" / built.name)
    else:
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=folder, check=True)
    return folder


def probe(tree: Path, load: int, serve_args: str = "", more: tuple[str, ...] = ()) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("serve_search_probe.py")), "--load", str(load),
                          "--serve-args", serve_args, *more], env=env, cwd=tree, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=None,
                        help="git ref measured as 'before' (default: merge-base with main; once main has merged "
                             "this work, name the commit before that merge)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load", type=int, default=160)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                        help="also measure this tree as NAME with these promem serve options (repeatable)")
    parser.add_argument("--result", type=Path, default=RESULT, help=f"where to write (default {RESULT.name})")
    parser.add_argument("--clients", type=int, nargs="+", metavar="N",
                        help="clients searching at once, each every 250 ms: before and after per count "
                             "(results/serve_search_clients.json)")
    args = parser.parse_args()
    before = args.before or git("merge-base", "HEAD", "main")
    if args.clients:
        return by_clients(before, args)
    variants = dict(v.split("=", 1) for v in args.variant)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": [], **{name: [] for name in variants}}
    with tempfile.TemporaryDirectory() as folder:
        sides = {"before": (export(before, Path(folder)), ""), "after": (ROOT, ""),
                 **{name: (ROOT, options) for name, options in variants.items()}}
        for r in range(args.rounds):
            for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                tree, options = sides[name]
                runs[name].append(probe(tree, args.load, options))
                print(name, json.dumps(runs[name][-1]), flush=True)
    summary = {name: {key: round(statistics.median(run[key] for run in rs), 2) for key in rs[0]}
               for name, rs in runs.items()}
    result = {
        "what": "promem serve (scripted profile, real uvicorn on 127.0.0.1): search latency over HTTP, idle and "
                f"while {args.load} sessions of 16 users are extracted; medians over {args.rounds} interleaved rounds",
        "before": {"commit": git("rev-parse", before), **summary["before"]},
        "after": {"commit": git("rev-parse", "HEAD"), "uncommitted_changes": bool(git("status", "--porcelain")),
                  **summary["after"]},
        **{name: {"serve_options": options, **summary[name]} for name, options in variants.items()},
        "load_p99_ratio_before_over_after": round(summary["before"]["load_p99_ms"] / summary["after"]["load_p99_ms"], 2),
        **stamp(runs),
    }
    args.result.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    adopt(args.result, "python -m benchmarks.runs.bench_serve_search " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    print(json.dumps({k: result[k] for k in ("before", "after", *variants, "load_p99_ratio_before_over_after")},
                     indent=2))


def by_clients(before: str, args: argparse.Namespace) -> None:
    """Before and after at each client count, interleaved round by round, idle and under extraction."""
    result_path = args.result if args.result != RESULT else RESULT.with_name("serve_search_clients.json")
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        sides = {"before": export(before, Path(folder)), "after": ROOT}
        for r in range(args.rounds):
            for n in args.clients:
                for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                    got = probe(sides[name], args.load, "", ("--clients", str(n), "--every-ms", "250"))
                    runs.setdefault(f"{name}.{n}", []).append(got)
                    print(name, n, json.dumps(got), flush=True)
    keys = ("idle_p50_ms", "idle_p99_ms", "load_p50_ms", "load_p99_ms", "sessions_per_s", "loadavg_1m_end")
    summary = {side: {k: round(statistics.median(run[k] for run in rs), 2) for k in keys} for side, rs in runs.items()}
    ratios = {f"{n}.{k}": round(summary[f"before.{n}"][k] / summary[f"after.{n}"][k], 2)
              for n in args.clients for k in ("idle_p99_ms", "load_p99_ms")}
    rows = [[str(n), *(f"{summary[f'{side}.{n}'][f'{phase}_p50_ms']:.1f} / {summary[f'{side}.{n}'][f'{phase}_p99_ms']:.1f}"
                       for phase in ("idle", "load") for side in ("before", "after")),
             f"{ratios[f'{n}.load_p99_ms']:.2f}x"] for n in args.clients]
    result = {
        "what": "promem serve (scripted profile, real uvicorn on 127.0.0.1): search latency over HTTP with N clients "
                f"each searching every 250 ms, idle and while {args.load} sessions of 16 users are extracted; "
                f"medians over {args.rounds} interleaved rounds",
        "before_commit": git("rev-parse", before), "summary": summary, "ratios_before_over_after": ratios,
        "tables": {"clients": {"columns": ["clients", "idle p50 / p99 ms, before", "idle, after",
                                           "under extraction, before", "under extraction, after",
                                           "p99 under extraction, before / after"], "rows": rows}},
        **stamp(runs),
    }
    result_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    adopt(result_path, "python -m benchmarks.runs.bench_serve_search " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    print(json.dumps({"summary": summary, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
