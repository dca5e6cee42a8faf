"""Turn a pytest-benchmark JSON file into the committed summary: the JSON plus the machine, and a markdown table.

Run after ``make bench`` (which writes ``benchmarks/results/latest.json``)::

    python -m benchmarks.tools.report                      # reads and updates benchmarks/results/latest.json
    python -m benchmarks.tools.report --json other.json --md other.md

Every suite measures its alternatives side by side (``benchmarks.common.measure``); this report puts those
figures next to the raw timings and says on what hardware and library versions they were taken.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import RESULTS

log = logging.getLogger(__name__)


def describe_machine(machine: dict[str, Any]) -> str:
    """One paragraph for the top of the markdown report."""
    libs = ", ".join(f"{k} {v}" for k, v in machine["libraries"].items() if v)
    gpus = "; ".join(machine["gpus"]) or "none"
    return (f"CPU: {machine['cpu']} ({machine['usable_cores']} usable of {machine['logical_cores']} logical cores), "
            f"memory {machine['memory_gib']} GiB, GPUs: {gpus}. Python {machine['python']} on {machine['platform']}. "
            f"Libraries: {libs}.")


def _seconds(value: float) -> str:
    """A timing with a unit that keeps three significant digits readable."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def _extra(info: dict[str, Any]) -> str:
    """``extra_info`` as ``key=value`` pairs, floats to four significant digits."""
    return "; ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())


def markdown(data: dict[str, Any]) -> str:
    """The report: machine paragraph, then one table row per benchmark (grouped by suite file)."""
    lines = ["# Benchmark results", "", f"Taken {data.get('datetime', 'at an unknown time')}.", "",
             describe_machine(data["machine"]), "",
             "Each suite times its alternatives side by side in the same run; compare the ratios in the last "
             "column, not absolute timings across machines.", ""]
    by_file: dict[str, list[dict[str, Any]]] = {}
    for bench in data.get("benchmarks", []):
        by_file.setdefault(bench["fullname"].split("::", 1)[0], []).append(bench)
    for suite, benches in sorted(by_file.items()):
        lines += [f"## {suite}", "", "| benchmark | median | min | rounds | side-by-side figures |",
                  "| --- | --- | --- | --- | --- |"]
        for bench in benches:
            stats = bench["stats"]
            lines.append(f"| `{bench['name']}` | {_seconds(stats['median'])} | {_seconds(stats['min'])} | "
                         f"{stats['rounds']} | {_extra(bench.get('extra_info', {}))} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", type=Path, default=RESULTS / "latest.json",
                        help="pytest-benchmark JSON (updated in place: machine added, per-round samples dropped)")
    parser.add_argument("--md", type=Path, default=None, help="markdown output (default: the JSON's name, .md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    data = json.loads(args.json.read_text(encoding="utf-8"))
    data["machine"] = machine_info()
    for bench in data.get("benchmarks", []):
        # Every round's sample (18,000 for the native kernels) would make a committed file of megabytes;
        # the summary statistics stay.
        bench["stats"].pop("data", None)
    args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path = args.md or args.json.with_suffix(".md")
    md_path.write_text(markdown(data), encoding="utf-8")
    log.info("%d benchmarks: %s and %s", len(data.get("benchmarks", [])), args.json, md_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
