"""Result files and the figures the READMEs quote from them: write, render, check.

Every figure quoted in ``README.md`` or ``benchmarks/README.md`` comes from a result file
``benchmarks/results/NAME.json`` that one command regenerates. A result file is::

    {"name": "bench_engine", "date": "2026-12-03T14:02:11+00:00", "commit": "6fb4e48…", "dirty": false,
     "command": "python -m pytest benchmarks/suites/bench_engine.py …", "machine": {...}, "projection": false,
     "note": "…", "figures": {"overhead_ms_per_session.10": 1.31, …},
     "tables": {"main": {"columns": ["nodes", …], "rows": [["10K", …], …]}}}

A README quotes a figure between markers that this module fills (HTML comments: invisible on GitHub)::

    <!--fig bench_engine overhead_ms_per_session.* .2f-->1.29–1.71<!--/fig-->
    <!--table bench_index main-->
    | nodes | … |
    <!--/table-->

``fig FILE KEY [FORMAT]``: ``KEY`` may hold ``*`` (any characters); several matching values are quoted as
their range ``low–high``. ``FORMAT`` is a Python format spec (``.2f``, ``,.0f``); without one integers get
thousands separators and other numbers three significant digits. A result file with ``"projection": true``
(a GPU cost projection, say) is rendered with "(projection)" after each figure and a line above each table,
so it cannot be read as a measurement.

Numbers in the prose that are not measured here (a setting, the paper's own figure, an estimate) stand
between ``<!--given-->`` and ``<!--/given-->``; :func:`unquoted_figures` finds every other figure-looking
number (``1.4×``, ``53 ms``, ``19 sessions/s``, ``5.36%``…) outside markers and code blocks, which
``benchmarks/tools/test_figures.py`` refuses.

Commands::

    python -m benchmarks.tools.figures render          # fill every marker of both READMEs from results/
    python -m benchmarks.tools.figures check           # exit 1, naming each figure that differs or has no file
    python -m benchmarks.tools.figures import-pytest benchmarks/results/latest.json --command "make bench"
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import logging
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import RESULTS, ROOT

log = logging.getLogger(__name__)

READMES = (ROOT / "README.md", ROOT / "benchmarks" / "README.md")

FIG = re.compile(r"<!--fig (?P<file>[\w.-]+) (?P<key>[^\s>]+)(?: (?P<fmt>[^ >]+))?-->(?P<text>.*?)<!--/fig-->", re.S)
TABLE = re.compile(r"<!--table (?P<file>[\w.-]+) (?P<name>[\w.-]+)-->\n(?P<text>.*?)<!--/table-->", re.S)
GIVEN = re.compile(r"<!--given-->.*?<!--/given-->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
FIGURE_LIKE = re.compile(
    r"(?<![\w.])[−-]?\d[\d,.]*(?:\s?[–-]\s?\d[\d,.]*)?\s?"
    r"(?:×|x\b|ms\b|µs\b|s\b|%|MiB|GiB|KiB|minutes?\b|seconds?\b|(?:sessions|nodes|tokens|texts|pairs)/(?:s|hour)\b)"
    r"|(?<![\w.])\d+\.\d+K\b")
"""A number with a unit of time, rate, ratio, share or size, or a count in thousands with decimals (27.3K):
what a reader takes for a measurement (a round size such as 10K or 1M is a setting)."""
CODE_SPAN = re.compile(r"`[^`\n]+`")


# ---------------------------------------------------------------- writing result files

def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def current_commit() -> tuple[str | None, bool]:
    """HEAD's hash and whether the tracked files differ from it (a measurement of uncommitted code)."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, bool(status)


def write_result(name: str, figures: dict[str, Any], command: str, *, tables: dict[str, dict[str, Any]] | None = None,
                 projection: bool = False, note: str | None = None, machine: dict[str, Any] | None = None,
                 date: str | None = None, commit: str | None = None, dirty: bool | None = None) -> Path:
    """Write ``results/NAME.json``: the figures with the machine, commit, command and date they came from.

    ``machine``, ``date``, ``commit`` and ``dirty`` default to this machine, now and HEAD; a converter of an
    older measurement passes the ones it recorded.
    """
    if machine is None:
        machine = machine_info()
    if commit is None:
        commit, dirty = current_commit()
    record = {"name": name, "date": date or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "commit": commit, "dirty": bool(dirty), "command": command, "machine": machine,
              "projection": projection, "note": note, "figures": figures, "tables": tables or {}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("wrote %s (%d figures, %d tables)", path, len(figures), len(record["tables"]))
    return path


def _flat_key(test_name: str, key: str) -> str:
    """``test_clean_edges[1e+03]`` + ``speedup`` → ``clean_edges.speedup.1e+03``: the test (two tests of a suite
    may store the same key), the key, then the parameters, so a ``*`` in a marker can span them."""
    base, _, params = test_name.partition("[")
    name = f"{base.removeprefix('test_')}.{key}"
    return f"{name}.{params.rstrip(']')}" if params else name


def import_pytest_benchmark(path: Path, command: str, name: str | None = None) -> list[Path]:
    """One result file per suite (``bench_engine.py`` → ``results/bench_engine.json``) from a pytest-benchmark
    JSON: every benchmark's ``extra_info`` and median seconds as figures, keyed as :func:`_flat_key` says; its
    date, commit and machine. ``name``: one result file of that name for every suite in the JSON (a second
    run of one suite with other settings)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    commit_info = data.get("commit_info") or {}
    by_suite: dict[str, dict[str, Any]] = {}
    for bench in data.get("benchmarks", []):
        suite = name or Path(bench["fullname"].split("::", 1)[0]).stem
        figures = by_suite.setdefault(suite, {})
        for key, value in bench.get("extra_info", {}).items():
            figures[_flat_key(bench["name"], key)] = value
        figures[_flat_key(bench["name"], "median_s")] = bench["stats"]["median"]
    written = []
    for suite, figures in sorted(by_suite.items()):
        written.append(write_result(suite, figures, command, machine=data.get("machine") or data.get("machine_info"),
                                    date=data.get("datetime"), commit=commit_info.get("id"),
                                    dirty=commit_info.get("dirty")))
    return written


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Numeric and string leaves of nested dicts as ``a.b.c`` keys (lists and the machine left out)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            if key not in ("machine", "machine_info", "runs", "figures"):
                out.update(_leaves(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value} if isinstance(value, (int, float, str)) and not isinstance(value, bool) else {}


def adopt(path: Path, command: str) -> None:
    """Make a tool's own JSON output a result file in place: its content stays, its numeric leaves become
    ``figures`` (``before.load_p99_ms``), and the date and commit are the ones it records or else those of
    the commit that added the file (the measured code is that commit's parent or its own tree)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    added = _git("log", "--diff-filter=A", "--format=%H %aI", "-1", "--", str(path))
    commit, _, date = (added or "").partition(" ")
    data.update({"name": path.stem, "date": data.get("date") or date or None,
                 "commit": data.get("commit") or commit or None, "dirty": bool(data.get("dirty", False)),
                 "command": command, "projection": bool(data.get("projection", False)),
                 "figures": _leaves(data), "machine": data.get("machine") or data.get("machine_info") or {}})
    data.setdefault("tables", {})
    data.setdefault("note", "a tool's own output, adopted as a result file: its figures are its numeric fields")
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("adopted %s (%d figures)", path, len(data["figures"]))


# ---------------------------------------------------------------- rendering and checking

class FigureError(LookupError):
    """A marker naming a result file, figure or table that does not exist."""


def load_results(folder: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """The result files of ``folder`` (JSON with ``figures``): other JSON there is a tool's raw output, which
    a README cannot quote until a result file carries its figures."""
    found = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}
    return {name: data for name, data in found.items() if isinstance(data, dict) and "figures" in data}


def _format(value: Any, fmt: str | None) -> str:
    if fmt:
        return format(value, fmt)
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.3g}"


def figure_text(results: dict[str, dict[str, Any]], file: str, key: str, fmt: str | None = None) -> str:
    """What a ``fig`` marker quotes: one value, or ``low–high`` over the figures ``key`` matches."""
    if file not in results:
        raise FigureError(f"no result file benchmarks/results/{file}.json")
    figures = results[file]["figures"]
    if "*" in key:
        pattern = re.compile(fnmatch.translate(key.replace("[", "[[]")))
        values = [v for k, v in figures.items() if pattern.fullmatch(k)]
    else:
        values = [figures[key]] if key in figures else []
    if not values:
        raise FigureError(f"benchmarks/results/{file}.json has no figure {key!r}")
    if len(values) == 1 or isinstance(values[0], str):
        text = _format(values[0], fmt)
    else:
        low, high = _format(min(values), fmt), _format(max(values), fmt)
        text = low if low == high else f"{low}–{high}"
    return f"{text} (projection)" if results[file].get("projection") else text


def table_text(results: dict[str, dict[str, Any]], file: str, name: str) -> str:
    """A result file's table as markdown (with a projection line above it when the file is a projection)."""
    if file not in results:
        raise FigureError(f"no result file benchmarks/results/{file}.json")
    table = results[file].get("tables", {}).get(name)
    if table is None:
        raise FigureError(f"benchmarks/results/{file}.json has no table {name!r}")
    lines = []
    if results[file].get("projection"):
        lines += [f"*Projection, not a measurement (`benchmarks/results/{file}.json`).*", ""]
    lines.append("| " + " | ".join(table["columns"]) + " |")
    lines.append("| " + " | ".join("---" for _ in table["columns"]) + " |")
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in table["rows"]]
    return "\n".join(lines) + "\n"


def _in_code(text: str) -> Callable[[int], bool]:
    """Whether an offset of ``text`` lies in a code block or span: a marker there is an example, not a quote."""
    spans = [m.span() for pattern in (FENCE, CODE_SPAN) for m in pattern.finditer(text)]
    return lambda offset: any(start <= offset < end for start, end in spans)


def _markers(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    in_code = _in_code(text)
    return [m for m in pattern.finditer(text) if not in_code(m.start())]


def render(text: str, results: dict[str, dict[str, Any]]) -> str:
    """``text`` with every marker filled from ``results``; raises :class:`FigureError` for a missing one."""
    in_code = _in_code(text)

    def fig(m: re.Match[str]) -> str:
        if in_code(m.start()):
            return m.group(0)
        head = m.group(0)[: m.start("text") - m.start()]
        return f"{head}{figure_text(results, m['file'], m['key'], m['fmt'])}<!--/fig-->"

    def table(m: re.Match[str]) -> str:
        if in_code(m.start()):
            return m.group(0)
        head = m.group(0)[: m.start("text") - m.start()]
        return f"{head}{table_text(results, m['file'], m['name'])}<!--/table-->"

    tabled = TABLE.sub(table, text)
    in_code = _in_code(tabled)
    return FIG.sub(fig, tabled)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def check(text: str, results: dict[str, dict[str, Any]], label: str) -> list[str]:
    """Every way ``text`` misquotes ``results``: a marker without its file or figure, a quoted figure that
    differs from the file's, one line each with the README line."""
    problems = []
    for m in _markers(FIG, text):
        try:
            expected = figure_text(results, m["file"], m["key"], m["fmt"])
        except FigureError as err:
            problems.append(f"{label}:{_line(text, m.start())}: {err}")
            continue
        if m["text"] != expected:
            problems.append(f"{label}:{_line(text, m.start())}: quotes {m['text']!r} for {m['file']} {m['key']}, "
                            f"the result file says {expected!r}")
    for m in _markers(TABLE, text):
        try:
            expected = table_text(results, m["file"], m["name"])
        except FigureError as err:
            problems.append(f"{label}:{_line(text, m.start())}: {err}")
            continue
        if m["text"] != expected:
            problems.append(f"{label}:{_line(text, m.start())}: table {m['file']} {m['name']} differs from the "
                            "result file (run `make figures`)")
    return problems


def unquoted_figures(text: str) -> list[tuple[int, str]]:
    """Figure-looking numbers outside markers, ``given`` spans, code blocks and code spans, with their line
    numbers (a figure in backticks is an example of syntax, not a claim)."""
    blanked = text
    for pattern in (FENCE, TABLE, FIG, GIVEN, CODE_SPAN):
        blanked = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), blanked)
    return [(_line(blanked, m.start()), m.group(0).strip()) for m in FIGURE_LIKE.finditer(blanked)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("render", help="fill the figure markers of README.md and benchmarks/README.md")
    sub.add_parser("check", help="exit 1 when a quoted figure has no result file or differs from it")
    imp = sub.add_parser("import-pytest", help="split a pytest-benchmark JSON into one result file per suite")
    imp.add_argument("json", type=Path)
    imp.add_argument("--command", required=True, help="the command that produced the JSON, as a user would rerun it")
    imp.add_argument("--name", help="one result file of this name instead of one per suite")
    ado = sub.add_parser("adopt", help="make a tool's own JSON output a result file in place")
    ado.add_argument("json", type=Path)
    ado.add_argument("--command", required=True, help="the command that wrote it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.action == "adopt":
        adopt(args.json.resolve(), args.command)
        return 0
    if args.action == "import-pytest":
        import_pytest_benchmark(args.json, args.command, args.name)
        return 0
    results = load_results()
    problems = []
    for path in READMES:
        label = str(path.relative_to(ROOT))
        text = path.read_text(encoding="utf-8")
        if args.action == "render":
            try:
                rendered = render(text, results)
            except FigureError as err:
                problems.append(f"{label}: {err}")
                continue
            if rendered != text:
                path.write_text(rendered, encoding="utf-8")
                log.info("rendered %s", label)
        problems += check(path.read_text(encoding="utf-8"), results, label)
        problems += [f"{label}:{line}: {figure!r} is not quoted from a result file (a fig marker) nor marked given"
                     for line, figure in unquoted_figures(text)]
    for problem in problems:
        log.error("%s", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
