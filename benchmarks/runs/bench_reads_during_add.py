"""An asyncio agent's searches while its ``add`` runs: an earlier commit against this tree, side by side.

Run: ``python -m benchmarks.runs.bench_reads_during_add [--before REF] [--rounds 1]``. The earlier commit is
exported with ``git archive`` (as :mod:`bench_serve_search` does) and :mod:`reads_during_add_probe` runs on each
tree in turn, interleaved round by round: the CPU default (SmolLM2-135M on llama.cpp, MiniLM) adds the demo's
first session through ``AsyncMemory``, a client searches it 20 times idle, then the second session is added in
the background while the client searches every 250 ms until the add returns. Writes
``benchmarks/results/reads_during_add.json``: per side, the medians over rounds of the add's seconds, of the
idle and the during-the-add search latency (ms, p50 / p99 / max, as the caller sees it) and of how many searches
came back while the add was still running.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.paths import RESULTS, ROOT
from benchmarks.runs.bench_serve_search import export, git, stamp
from benchmarks.tools.figures import adopt

RESULT = RESULTS / "reads_during_add.json"


def probe(tree: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("reads_during_add_probe.py"))],
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every number over the rounds, keeping the nesting."""
    first = runs[0]
    return {key: medians([r[key] for r in runs]) if isinstance(first[key], dict)
            else round(statistics.median(r[key] for r in runs), 1) for key in first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=None, help="git ref measured as 'before' (default: HEAD~1)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--result", type=Path, default=RESULT, help=f"where to write (default {RESULT.name})")
    args = parser.parse_args()
    before = args.before or "HEAD~1"
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        sides = {"before": export(before, Path(folder)), "after": ROOT}
        for r in range(args.rounds):
            for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                runs[name].append(probe(sides[name]))
                print(name, json.dumps(runs[name][-1]), flush=True)
    result = {
        "what": "AsyncMemory on the CPU default: search latency as the caller sees it, idle and while the next "
                f"session is added in the background; medians over {args.rounds} interleaved rounds",
        "before": {"commit": git("rev-parse", before), **medians(runs["before"])},
        "after": {"commit": git("rev-parse", "HEAD"), **medians(runs["after"])},
        **stamp(runs),
    }
    args.result.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    adopt(args.result, "python -m benchmarks.runs.bench_reads_during_add " + " ".join(shlex.quote(a)
                                                                                       for a in sys.argv[1:]))
    print(json.dumps({k: result[k] for k in ("before", "after")}, indent=2))


if __name__ == "__main__":
    main()
