"""Search latency of ``promem serve`` under extraction load: an earlier commit against this tree, side by side.

Run: ``python benchmarks/bench_serve_search.py [--before REF] [--rounds 2] [--load 160]``. The earlier
commit (default: where this branch left ``main``) is exported with ``git archive`` to a temporary folder,
and :mod:`serve_search_probe` runs against each source tree in turn, interleaved round by round so both
meet the same load on a shared machine. Writes ``benchmarks/results/serve_search.json``: per tree, the
median over rounds of idle and loaded search p50 / p99 (ms, over HTTP) and of sessions per second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from report import machine_info  # noqa: E402

RESULT = HERE / "results" / "serve_search.json"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


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


def probe(tree: Path, load: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(HERE / "serve_search_probe.py"), "--load", str(load)], env=env,
                         cwd=tree, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=None,
                        help="git ref measured as 'before' (default: merge-base with main; once main has merged "
                             "this work, name the commit before that merge)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load", type=int, default=160)
    args = parser.parse_args()
    before = args.before or git("merge-base", "HEAD", "main")
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        trees = {"before": export(before, Path(folder)), "after": ROOT}
        for r in range(args.rounds):
            for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                runs[name].append(probe(trees[name], args.load))
                print(name, json.dumps(runs[name][-1]), flush=True)
    summary = {name: {key: round(statistics.median(run[key] for run in rs), 2) for key in rs[0]}
               for name, rs in runs.items()}
    result = {
        "what": "promem serve (scripted profile, real uvicorn on 127.0.0.1): search latency over HTTP, idle and "
                f"while {args.load} sessions of 16 users are extracted; medians over {args.rounds} interleaved rounds",
        "before": {"commit": git("rev-parse", before), **summary["before"]},
        "after": {"commit": git("rev-parse", "HEAD"), "uncommitted_changes": bool(git("status", "--porcelain")),
                  **summary["after"]},
        "load_p99_ratio_before_over_after": round(summary["before"]["load_p99_ms"] / summary["after"]["load_p99_ms"], 2),
        "runs": runs,
        "machine": machine_info(),
    }
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("before", "after", "load_p99_ratio_before_over_after")}, indent=2))


if __name__ == "__main__":
    main()
