"""Every figure the READMEs quote comes from a result file in benchmarks/results/ and says what it says.

These tests sit beside the tool they test; ``make test`` runs them with the suite (``testpaths``).

The first test reads the real READMEs and result files: it fails when a quoted figure was edited by hand,
when its result file or key is gone, or when a measurement-looking number sits in the prose without a marker.
The others pin the mechanism on small hand-written inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.paths import ROOT
from benchmarks.tools import figures


def test_every_figure_in_both_readmes_matches_a_result_file() -> None:
    results = figures.load_results()
    problems: list[str] = []
    for path in figures.READMES:
        text = path.read_text(encoding="utf-8")
        label = str(path.relative_to(ROOT))
        problems += figures.check(text, results, label)
        problems += [f"{label}:{line}: {fig!r} has no result file" for line, fig in figures.unquoted_figures(text)]
    assert problems == []


def test_every_result_file_says_where_and_how_it_was_measured() -> None:
    for name, result in figures.load_results().items():
        assert result["name"] == name
        for field in ("date", "commit", "command", "machine", "figures"):
            assert result.get(field), f"{name}.json has no {field}"
        assert isinstance(result["projection"], bool)


RESULTS: dict[str, dict[str, Any]] = {
    "bench_x": {"projection": False, "figures": {"ms.10": 1.234, "ms.100": 2.5, "ms.1000": 0.9, "nodes": 1000000,
                                                  "best": "numpy"},
                "tables": {"main": {"columns": ["n", "p99 ms"], "rows": [["10K", "0.8"], ["1M", "2.9"]]}}},
    "gpu_cost": {"projection": True, "figures": {"sessions_per_hour": 5400.0},
                 "tables": {"stages": {"columns": ["stage", "s"], "rows": [["draft", "1.0"]]}}},
}


def test_a_marker_is_filled_with_its_value_a_range_or_a_projection_label() -> None:
    text = ("flat <!--fig bench_x ms.* .2f-->?<!--/fig-->, one <!--fig bench_x ms.10-->?<!--/fig--> ms, "
            "<!--fig bench_x nodes-->?<!--/fig--> nodes, <!--fig bench_x best-->?<!--/fig--> wins, "
            "GPU <!--fig gpu_cost sessions_per_hour ,.0f-->?<!--/fig--> sessions/hour")
    assert figures.render(text, RESULTS) == (
        "flat <!--fig bench_x ms.* .2f-->0.90–2.50<!--/fig-->, one <!--fig bench_x ms.10-->1.23<!--/fig--> ms, "
        "<!--fig bench_x nodes-->1,000,000<!--/fig--> nodes, <!--fig bench_x best-->numpy<!--/fig--> wins, "
        "GPU <!--fig gpu_cost sessions_per_hour ,.0f-->5,400 (projection)<!--/fig--> sessions/hour")


def test_a_marker_in_a_code_span_or_block_is_an_example_and_left_as_written() -> None:
    text = "write `<!--fig bench_x ms.10-->?<!--/fig-->` or\n```\n<!--fig bench_gone k-->?<!--/fig-->\n```\n"
    assert figures.render(text, RESULTS) == text
    assert figures.check(text, RESULTS, "README.md") == []


def test_a_table_is_rendered_and_a_projection_table_says_so() -> None:
    text = "<!--table bench_x main-->\nold\n<!--/table-->\n<!--table gpu_cost stages-->\n<!--/table-->"
    assert figures.render(text, RESULTS) == (
        "<!--table bench_x main-->\n| n | p99 ms |\n| --- | --- |\n| 10K | 0.8 |\n| 1M | 2.9 |\n<!--/table-->\n"
        "<!--table gpu_cost stages-->\n*Projection, not a measurement (`benchmarks/results/gpu_cost.json`).*\n\n"
        "| stage | s |\n| --- | --- |\n| draft | 1.0 |\n<!--/table-->")


def test_check_names_a_changed_figure_a_missing_file_and_a_missing_key_with_their_lines() -> None:
    text = ("a <!--fig bench_x ms.10-->1.41<!--/fig-->\n"
            "b <!--fig bench_gone ms.10-->1.23<!--/fig-->\n"
            "c <!--fig bench_x ms.7-->1.23<!--/fig-->\n"
            "d <!--fig bench_x ms.10-->1.23<!--/fig-->\n"
            "<!--table bench_x main-->\n| n |\n<!--/table-->\n")
    assert figures.check(text, RESULTS, "README.md") == [
        "README.md:1: quotes '1.41' for bench_x ms.10, the result file says '1.23'",
        "README.md:2: no result file benchmarks/results/bench_gone.json",
        "README.md:3: benchmarks/results/bench_x.json has no figure 'ms.7'",
        "README.md:5: table bench_x main differs from the result file (run `make figures`)",
    ]


def test_unquoted_measurements_are_found_outside_markers_code_and_given_spans() -> None:
    text = ("The worker ran 1.41× faster, in 53–106 ms.\n"
            "```\nwall 445.12 s\n```\n"
            "quoted <!--fig bench_x ms.10-->1.23<!--/fig--> ms; the paper's <!--given-->13.47K tokens<!--/given-->\n"
            "k = 20, HTTP 422, 16 users, at 19 sessions/s and 5.36%\n")
    assert figures.unquoted_figures(text) == [(1, "1.41×"), (1, "53–106 ms"), (6, "19 sessions/s"), (6, "5.36%")]


def test_a_pytest_benchmark_file_becomes_one_result_file_per_suite(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "latest.json"
    source.write_text(
        '{"datetime": "2026-12-03T10:00:00+00:00", "commit_info": {"id": "abc123", "dirty": false},'
        ' "machine": {"cpu": "test cpu"}, "benchmarks": ['
        '{"fullname": "benchmarks/suites/bench_engine.py::test_overhead[10]", "name": "test_overhead[10]",'
        ' "stats": {"median": 0.5}, "extra_info": {"ms": 1.2}},'
        '{"fullname": "benchmarks/suites/bench_native.py::test_anchor", "name": "test_anchor",'
        ' "stats": {"median": 0.25}, "extra_info": {"speedup": 40.0}}]}', encoding="utf-8")
    monkeypatch.setattr(figures, "RESULTS", tmp_path / "results")
    figures.import_pytest_benchmark(source, "make bench")
    results = figures.load_results(tmp_path / "results")
    assert sorted(results) == ["bench_engine", "bench_native"]
    engine = results["bench_engine"]
    assert engine["figures"] == {"overhead.ms.10": 1.2, "overhead.median_s.10": 0.5}
    assert (engine["commit"], engine["date"], engine["command"], engine["machine"]) == (
        "abc123", "2026-12-03T10:00:00+00:00", "make bench", {"cpu": "test cpu"})
    assert results["bench_native"]["figures"] == {"anchor.speedup": 40.0, "anchor.median_s": 0.25}
