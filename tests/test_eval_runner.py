"""End-to-end evaluation with the scripted engine: graphs, answers, labels, the result file, the report and
its chart, resuming from existing graphs, every variant, the three benchmarks and the two commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, scripted_config
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.cli import main
from promem_fast.cli import eval as eval_cli
from promem_fast.eval import metrics
from promem_fast.eval.datasets import load_benchmark
from promem_fast.eval.judges import UPDATE_ROUTINGS
from promem_fast.eval.prompts import EVAL_TEMPLATES
from promem_fast.eval.report import load_results
from promem_fast.types import Session
from promem_fast.eval.runner import extraction_cost, run_eval
from promem_fast.eval.updates import route_points
from promem_fast.eval.variants import VARIANTS, variant_config
from promem_fast.io import load_sessions, read_graphs

FIXTURES = ROOT / "tests" / "fixtures"
HALUMEM = FIXTURES / "halumem_mini.jsonl"
LOCOMO = FIXTURES / "locomo_mini.json"
LONGMEMEVAL = FIXTURES / "longmemeval_mini.json"
PNG = b"\x89PNG\r\n\x1a\n"


class NoExtraction(ScriptedLLM):
    """The scripted model, refusing every extraction prompt: proves a run reused its graphs."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        for request in requests:
            parsed = parse_rendered(request.messages)
            assert parsed is not None and parsed[0] in EVAL_TEMPLATES, f"extraction prompt sent: {parsed}"
        return super().generate(requests)


def evaluate(kind: str, data: Path, out: Path, variant: str = "full", **kw: Any) -> dict[str, Any]:
    config = scripted_config()
    llm = kw.pop("llm", None) or ScriptedLLM(config.llm)
    return run_eval(kind, data, config, variant=variant, out_dir=out, llm=llm, **kw)


def table(report: str, title: str) -> list[list[str]]:
    """The body rows of the markdown table under the heading that starts with ``title``."""
    section = report.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


# ============================================================================================= HaluMem
def test_halumem_end_to_end_report_matches_the_raw_labels(tmp_path: Path) -> None:
    result = evaluate("halumem", HALUMEM, tmp_path, limit=2)
    stored = json.loads((tmp_path / "result-halumem-full.json").read_text())
    assert stored["headline"] == result["headline"]
    bench = load_benchmark("halumem", HALUMEM, 2)
    labels = stored["labels"]

    # every gold point of every non-distractor session judged once, an update point (its session has
    # memories) by the update judge only, as HaluMem routes it; every extracted entry judged once
    graphs = {g.session_id: g for g in read_graphs(tmp_path / "graphs-halumem-full.jsonl")}
    assert set(graphs) == {s.session_id for s in bench.sessions}
    assert all(graphs[p.session_id].nodes for p in bench.memory_points if p.is_update)
    points = {(p.session_id, p.index) for p in bench.memory_points}
    by_integrity = [(lab["session_id"], lab["index"]) for lab in labels["integrity"]]
    by_update = [(lab["session_id"], lab["index"]) for lab in labels["update"]]
    assert sorted(by_integrity + by_update) == sorted(points) and labels["update"]
    assert by_update == [(p.session_id, p.index) for p in bench.memory_points if p.is_update]
    judged = {p.session_id for p in bench.memory_points}
    assert len(labels["accuracy"]) == sum(len(graphs[sid].nodes) for sid in judged)
    assert [lab["question_id"] for lab in labels["qa"]] == [q.question_id for q in bench.questions]
    # a question nothing in memory bears on is abstained from and counted as HaluMem counts a refusal, no judge
    abstained = {a["question_id"] for a in stored["answers"] if a["abstained"]}
    assert all(lab["error"] is None and (lab["judge_reply"] is not None or lab.get("question_id") in abstained)
               for group in labels.values() for lab in group)
    assert all(lab["result_type"] in ("Omission", "Correct") for lab in labels["qa"] if lab["question_id"] in abstained)
    assert len(stored["answers"]) == len(bench.questions)
    assert all(bool(a["retrieved"]) != bool(a["abstained"]) for a in stored["answers"])
    assert stored["counts"]["failed_eval_steps"] == 0

    # aggregates recomputed from the stored raw labels alone
    extraction = metrics.halumem_extraction(labels["integrity"], labels["accuracy"])
    qa = metrics.halumem_qa(labels["qa"])
    head = stored["headline"]
    assert head["memory_integrity"] == pytest.approx(extraction["memory_integrity"])
    assert head["memory_accuracy"] == pytest.approx(extraction["memory_accuracy"])
    assert (head["qa_accuracy"], head["qa_hallucination"], head["qa_omission"]) == pytest.approx(
        (qa["correct"], qa["hallucination"], qa["omission"]))
    assert 0 < head["memory_integrity"] < 1 and head["qa_accuracy"] > 0  # the scripted judges vary their grades

    # the report: every section, numbers as the labels give them
    report = (tmp_path / "report-halumem.md").read_text()
    for heading in ("## Runs", "## Table 1: memory extraction and QA", "## Table 2: ablation",
                    "## Table 6: extraction cost per session", "## Extraction in detail", "## QA by question type",
                    "## Evaluation cost", "![Variants compared](variants-halumem.png)", "## Type-wise accuracy",
                    "## Judge records without a usable grade"):
        assert heading in report
    types = metrics.halumem_memory_type_accuracy(labels["integrity"], labels["update"])
    assert {row[0]: row[1] for row in table(report, "Type-wise accuracy")} == {
        t: f"{pct(v['accuracy'])} = {pct(v['integrity'])} + {pct(v['update'])} (n {v['n']})" for t, v in types.items()}
    assert table(report, "Judge records without a usable grade") == [
        ["ProMem (Full)", *(f"0/{len(labels[j])} (0.00%)" for j in ("integrity", "accuracy", "update", "qa"))]]
    tokens = sum(g.stats.total().tokens for g in graphs.values()) / len(graphs)
    assert table(report, "Table 1") == [["ProMem (Full)", pct(extraction["memory_integrity"]),
                                         pct(extraction["memory_accuracy"]), pct(extraction["memory_f1"]),
                                         pct(qa["correct"]), f"{tokens / 1000:.2f}K"]]
    assert table(report, "Table 2") == [["ProMem (Full)", pct(extraction["memory_integrity"]),
                                         pct(extraction["memory_accuracy"]), pct(qa["correct"]),
                                         pct(qa["hallucination"]), pct(qa["omission"])]]
    (cost_row,) = table(report, "Table 6")
    per_stage = extraction_cost(list(graphs.values()))["per_session"]
    assert cost_row[0] == "ProMem (Full)" and len(cost_row) == 10
    assert cost_row[1] == f"{per_stage['draft']['tokens'] / 1000:.3f}K ({pct(per_stage['draft']['share'])}%)"
    assert cost_row[6] == f"{tokens / 1000:.2f}K"
    calls = sum(g.stats.total().calls for g in graphs.values()) / len(graphs)
    assert cost_row[7] == f"{calls:.2f}"
    uncached = sum(g.stats.total().uncached_prefill_tokens for g in graphs.values()) / len(graphs)
    assert uncached > 0 and cost_row[8] == f"{uncached / 1000:.2f}K"
    assert (tmp_path / "variants-halumem.png").read_bytes().startswith(PNG)


def test_update_points_reach_the_update_judge_only_unless_both_is_asked(tmp_path: Path) -> None:
    official = evaluate("halumem", HALUMEM, tmp_path / "official", limit=2)
    both = evaluate("halumem", HALUMEM, tmp_path / "both", limit=2, update_routing="both")
    updates = official["labels"]["update"]
    assert updates and [u["memory_update_type"] for u in updates] == [
        u["memory_update_type"] for u in both["labels"]["update"]]
    # "both" also sends them to the integrity judge: they enter the recall denominator, as the issue measured
    n_official = official["aggregates"]["extraction"]["integrity"]["n"]
    assert both["aggregates"]["extraction"]["integrity"]["n"] == n_official + len(updates)
    assert not any(label["is_update"] for label in official["labels"]["integrity"])
    assert (official["config"]["update_routing"], both["config"]["update_routing"]) == ("official", "both")
    assert "judged as `both`" in (tmp_path / "both" / "report-halumem.md").read_text()
    # without memories HaluMem has nothing to show the update judge: the point goes to the integrity judge
    bench = load_benchmark("halumem", HALUMEM, 1)
    points = [p for p in bench.memory_points if p.session_id == "u-ada:0"]
    assert any(p.is_update for p in points) and route_points(points, False, "official") == (points, [])
    updates = [p for p in points if p.is_update]
    assert route_points(points, True, "official") == ([p for p in points if not p.is_update], updates)
    with pytest.raises(Exception, match="unknown update routing"):
        evaluate("halumem", HALUMEM, tmp_path, limit=1, update_routing="integrity")


class GarbledIntegrityJudge(ScriptedLLM):
    """The scripted model, replying to every integrity-judge prompt with text that is not a grade."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        replies = super().generate(requests)
        return [Completion("judge_failed", reply.prompt_tokens, 2)
                if (parse_rendered(request.messages) or ("",))[0] == "judge_integrity" else reply
                for request, reply in zip(requests, replies, strict=True)]


def test_a_judge_that_gives_no_grades_is_counted_and_warned_about(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = scripted_config()
    result = run_eval("halumem", HALUMEM, config, out_dir=tmp_path, limit=1, llm=GarbledIntegrityJudge(config.llm))
    n = len(result["labels"]["integrity"])
    assert n and all(label["memory_integrity_score"] is None for label in result["labels"]["integrity"])
    assert result["aggregates"]["unscored"]["integrity"] == {"n": n, "unscored": n, "share": 1.0,
                                                             "values": {"null": n}}
    assert result["aggregates"]["unscored"]["qa"]["unscored"] == 0
    (warning,) = result["aggregates"]["warnings"]
    assert warning.startswith(f"integrity judge: {n} of {n} records (100.0%) have no usable grade")
    report = (tmp_path / "report-halumem.md").read_text()
    assert f"**Warning:** ProMem (Full): {warning}." in report
    (row,) = table(report, "Judge records without a usable grade")
    assert row[1] == f"{n}/{n} (100.00%)"
    # the same from the stored labels alone
    capsys.readouterr()
    assert main(["eval", "aggregate", result["files"]["result"], "-o", str(tmp_path / "agg.json")]) == 0
    assert f"warning: {warning}" in capsys.readouterr().out.splitlines()
    recomputed = json.loads((tmp_path / "agg.json").read_text())
    assert recomputed["aggregates"]["unscored"] == result["aggregates"]["unscored"]
    assert recomputed["overall_score"]["memory_integrity"]["memory_valid_num"] == 0
    assert main(["eval", "aggregate", result["files"]["result"], "--report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"promem: {tmp_path}: cannot write: Is a directory"


def test_graphs_already_extracted_are_reused_and_missing_ones_extracted(tmp_path: Path) -> None:
    evaluate("halumem", HALUMEM, tmp_path, limit=1)
    graphs_file = tmp_path / "graphs-halumem-full.jsonl"
    first = graphs_file.read_text()
    again = evaluate("halumem", HALUMEM, tmp_path, limit=1, llm=NoExtraction())
    assert graphs_file.read_text() == first  # nothing extracted again
    lines = first.splitlines(keepends=True)
    graphs_file.write_text("".join(lines[:-1]))  # as if the last session had not finished
    evaluate("halumem", HALUMEM, tmp_path, limit=1)
    assert [json.loads(x)["session_id"] for x in graphs_file.read_text().splitlines()] == [
        json.loads(x)["session_id"] for x in lines]
    assert again["counts"]["graphs"] == len(lines)


def test_an_explicit_graphs_file_from_promem_extract_is_used(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions.jsonl"
    graphs = tmp_path / "graphs.jsonl"
    parser = argparse.ArgumentParser()
    eval_cli.register(parser.add_subparsers())
    args = parser.parse_args(["convert", "halumem", "--data", str(HALUMEM), "-o", str(sessions), "--limit", "1"])
    assert args.func(args) == 0
    assert main(["extract", str(sessions), "-o", str(graphs), "--profile", "scripted", "--no-progress"]) == 0
    result = evaluate("halumem", HALUMEM, tmp_path / "out", limit=1, graphs_path=graphs, llm=NoExtraction())
    assert result["files"]["graphs"] == str(graphs) and result["counts"]["graphs"] == result["counts"]["sessions"]
    assert not (tmp_path / "out" / "graphs-halumem-full.jsonl").exists()


def test_every_variant_lands_in_one_report(tmp_path: Path) -> None:
    results = {v: evaluate("halumem", HALUMEM, tmp_path, variant=v, limit=2) for v in VARIANTS}
    report = (tmp_path / "report-halumem.md").read_text()
    assert [row[0] for row in table(report, "Table 2")] == list(VARIANTS.values())
    rows = {row[0]: row for row in table(report, "Table 1")}
    assert rows["NativeRAG"][1:4] == ["-", "-", "-"] and rows["NativeRAG"][5] == "-"
    assert rows["NativeRAG"][4] == pct(results["native-rag"]["headline"]["qa_accuracy"])
    cost = {row[0]: row for row in table(report, "Table 6")}
    assert cost["One-off Extract"][2:6] == ["-"] * 4  # only the draft runs
    assert cost["w/o DA"][4] == "-" and cost["w/o Rel"][5] == "-"
    assert results["native-rag"]["labels"]["integrity"] == [] and results["native-rag"]["files"]["graphs"] is None
    one_off = [g for g in read_graphs(tmp_path / "graphs-halumem-one-off.jsonl")]
    assert {g.mode for g in one_off} == {"one-off"}
    assert [r["variant"] for r in load_results(tmp_path, "halumem")] == list(VARIANTS)
    assert "Warning" not in report
    evaluate("halumem", HALUMEM, tmp_path, variant="no-cc", limit=1)  # a row over other data is flagged
    assert "these results come from different data files or limits" in (tmp_path / "report-halumem.md").read_text()


def test_variant_config_switches_one_module_each() -> None:
    base = scripted_config(relations=False)
    assert variant_config(base, "full").pipeline.relations is True  # full means every module on
    assert variant_config(base, "one-off").pipeline.mode == "one-off"
    for variant, field in (("no-cc", "completeness_check"), ("no-hv", "hallucination_verification"),
                           ("no-da", "detail_anchoring"), ("no-rel", "relations")):
        pipeline = variant_config(base, variant).pipeline
        switches = {f: getattr(pipeline, f) for f in ("completeness_check", "hallucination_verification",
                                                      "detail_anchoring", "relations")}
        assert switches == {f: f != field for f in switches} and pipeline.mode == "promem"
    assert variant_config(base, "native-rag") is base
    with pytest.raises(Exception, match="unknown variant"):
        variant_config(base, "w/o everything")
    assert set(eval_cli._ROUTINGS) == set(UPDATE_ROUTINGS)


# ============================================================================================= LoCoMo, LongMemEval
def test_locomo_report_has_its_per_category_tables(tmp_path: Path) -> None:
    result = evaluate("locomo", LOCOMO, tmp_path)
    rows = result["labels"]["qa"]
    assert {r["category"] for r in rows} == {1, 2, 3, 4, 5} and all("f1" in r and "llm_correct" in r for r in rows)
    f1 = metrics.locomo_scores(rows, overall_categories=(1, 2, 3, 4))
    main_rows = [r for r in rows if r["category"] != 5]
    accuracy = sum(bool(r["llm_correct"]) for r in main_rows) / len(main_rows)
    report = (tmp_path / "report-locomo.md").read_text()
    (row,) = table(report, "Table 1")
    assert row[:3] == ["ProMem (Full)", pct(accuracy), pct(f1["overall"])]
    categories = table(report, "Per category: LLM-judge accuracy")
    assert [r[0] for r in categories] == ["single-hop", "multi-hop", "temporal", "open-domain", "adversarial"]
    assert table(report, "Per category: F1")[0] == [
        "single-hop", "2", pct(f1["by_category"]["single-hop"]["mean"])]
    assert "## Table 6" in report and (tmp_path / "variants-locomo.png").read_bytes().startswith(PNG)


def test_longmemeval_report_has_its_per_type_table(tmp_path: Path) -> None:
    result = evaluate("longmemeval", LONGMEMEVAL, tmp_path)
    labels = result["labels"]["qa"]
    assert {lab["template"] for lab in labels} == {"judge_lme", "judge_lme_abstention", "judge_lme_update"}
    scores = metrics.longmemeval_scores(labels)
    report = (tmp_path / "report-longmemeval.md").read_text()
    assert table(report, "Table 1")[0][:4] == ["ProMem (Full)", pct(scores["overall"]), pct(scores["task_average"]),
                                               pct(scores["abstention"]["accuracy"])]
    types = {r[0]: r for r in table(report, "Per question type")}
    assert set(types) == {"knowledge-update", "single-session-user", "temporal-reasoning", "abstention (any type)"}
    assert types["knowledge-update"][2] == pct(scores["by_type"]["knowledge-update"]["accuracy"])
    # sessions shared between questions are extracted once; each question sees its own dates
    graphs = list(read_graphs(tmp_path / "graphs-longmemeval-full.jsonl"))
    assert len(graphs) == len({g.session_id for g in graphs}) == result["counts"]["sessions"]


# ============================================================================================= commands
def as_read(session: Session) -> Session:
    """A loader's session as ``promem extract`` reads it back: every timestamp in the one ISO form."""
    from dataclasses import replace

    from promem_fast.times import iso_time

    turns = tuple(replace(t, timestamp=iso_time(t.timestamp)) for t in session.turns)
    return replace(session, timestamp=iso_time(session.timestamp), turns=turns)


def test_convert_writes_promem_input(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    eval_cli.register(parser.add_subparsers())
    for kind, data in (("halumem", HALUMEM), ("locomo", LOCOMO), ("longmemeval", LONGMEMEVAL)):
        out = tmp_path / f"{kind}.jsonl"
        args = parser.parse_args(["convert", kind, "--data", str(data), "-o", str(out)])
        assert args.func(args) == 0
        read = load_sessions(out)  # the same sessions, their times read once into ISO at input
        assert read == [as_read(s) for s in load_benchmark(kind, data).sessions]


def test_eval_command_through_its_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    eval_cli.register(parser.add_subparsers())
    args = parser.parse_args(["eval", "halumem", "--data", str(HALUMEM), "--limit", "2", "--profile", "scripted",
                              "--no-progress", "-o", str(tmp_path)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "result-halumem-full.json").read_text())
    assert f"result: {tmp_path / 'result-halumem-full.json'}" in printed
    assert f"report: {tmp_path / 'report-halumem.md'}" in printed
    assert f"Mem. Int. {pct(result['headline']['memory_integrity'])}" in printed


def test_promem_eval_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the ``promem`` entry point, the scripted profile answering the evaluation prompts itself."""
    status = main(["eval", "halumem", "--data", str(HALUMEM), "--limit", "2", "--profile", "scripted",
                   "--no-progress", "-o", str(tmp_path)])
    assert status == 0
    result = json.loads((tmp_path / "result-halumem-full.json").read_text())
    assert result["counts"]["failed_answers"] == 0 and result["counts"]["failed_eval_steps"] == 0
    report = (tmp_path / "report-halumem.md").read_text()
    assert "## Table 1" in report and "## Table 2" in report and "## Table 6" in report
    assert (tmp_path / "variants-halumem.png").read_bytes().startswith(PNG)
    assert f"report: {tmp_path / 'report-halumem.md'}" in capsys.readouterr().out


def test_eval_sends_an_update_point_to_the_update_judge_and_reports_its_verdict(tmp_path: Path) -> None:
    """Ada's first session updates her job from baker to pastry chef. The update judge (scripted here to say
    Hallucination, so that nothing the stand-ins share decides it) is shown that session's extracted
    memories, the earlier value and the updated fact; its verdict is what the labels, the aggregate and the
    report say."""
    config = scripted_config()
    shown: list[dict[str, str]] = []

    def judge(fields: dict[str, str]) -> dict[str, str]:
        shown.append(fields)
        return {"verdict": "Hallucination"}

    result = evaluate("halumem", HALUMEM, tmp_path, limit=1, llm=ScriptedLLM(config.llm, rules={"judge_update": judge}))
    (fields,) = shown
    assert fields["point"] == "Ada Byron's job title updated from baker to pastry chef."
    assert "Ada Byron works as a baker" in fields["previous"]
    (first, *_) = read_graphs(tmp_path / "graphs-halumem-full.jsonl")
    assert first.session_id == "u-ada:0" and first.nodes
    assert all(node.text in fields["memories"] for node in first.nodes)
    (label,) = result["labels"]["update"]
    assert label["memory_content"] == fields["point"] and label["original_memories"] == ["Ada Byron works as a baker"]
    assert label["memory_update_type"] == "Hallucination" and label["judge_reply"] == {"verdict": "Hallucination"}
    update = result["aggregates"]["extraction"]["update"]
    assert (update["correct"], update["hallucination"], update["omission"]) == (0.0, 1.0, 0.0)
    (row,) = table((tmp_path / "report-halumem.md").read_text(), "Extraction in detail")
    assert row[-4:] == ["1/1", "0.00", "100.00", "0.00"]


def test_a_session_limit_is_recorded_and_reported(tmp_path: Path) -> None:
    result = evaluate("halumem", HALUMEM, tmp_path, limit=1, sessions=1)
    assert (result["limit"], result["session_limit"]) == (1, 1)
    assert result["counts"]["sessions"] == result["counts"]["graphs"] == 1 and result["counts"]["questions"] == 2
    report = (tmp_path / "report-halumem.md").read_text()
    assert "(first 1 items, first 1 sessions of each)" in report and "Warning" not in report
    evaluate("halumem", HALUMEM, tmp_path, variant="no-cc", limit=1)  # the same users, every session
    assert "these results come from different data files or limits" in (tmp_path / "report-halumem.md").read_text()


def test_convert_with_a_session_limit_writes_one_session_per_user(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sessions.jsonl"
    assert main(["convert", "halumem", "--data", str(HALUMEM), "-o", str(out), "--sessions", "1"]) == 0
    assert [s.session_id for s in load_sessions(out)] == ["u-ada:0", "u-bo:0"]
    assert main(["convert", "halumem", "--data", str(HALUMEM), "-o", str(out), "--sessions", "-1"]) == 2
    assert "sessions must be a non-negative integer" in capsys.readouterr().err


def test_a_compressed_run_is_its_own_row_with_lower_token_cost(tmp_path: Path) -> None:
    from promem_fast.testing.tiny_compressor import build_tiny_token_classifier

    model = build_tiny_token_classifier(tmp_path / "lingua")
    out = tmp_path / "out"
    config = scripted_config()
    run_eval("halumem", HALUMEM, config, out_dir=out, limit=1, llm=ScriptedLLM(config.llm))
    config.compression.enabled, config.compression.rate, config.compression.model = True, 0.5, str(model)
    squeezed = run_eval("halumem", HALUMEM, config, out_dir=out, limit=1, llm=ScriptedLLM(config.llm))
    assert squeezed["tag"] == "full-r0.5" and (out / "result-halumem-full-r0.5.json").exists()
    rows = {row[0]: row for row in table((out / "report-halumem.md").read_text(), "Table 1")}
    full, half = rows["ProMem (Full)"], rows["ProMem (Full) (r=0.5)"]
    assert float(half[-1].rstrip("K")) < float(full[-1].rstrip("K"))  # the # Tokens column


def test_the_report_names_the_models_and_flags_rows_graded_by_another_judge(tmp_path: Path) -> None:
    evaluate("halumem", HALUMEM, tmp_path, variant="full", limit=1)
    report = (tmp_path / "report-halumem.md").read_text()
    (row,) = table(report, "Runs")
    assert row[-3:] == ["scripted", "scripted", "scripted"] and "Warning" not in report
    config = scripted_config()
    config.roles["judge"] = dataclasses.replace(config.llm, model="another-grader")
    run_eval("halumem", HALUMEM, config, variant="one-off", out_dir=tmp_path, limit=1, llm=ScriptedLLM(config.llm))
    report = (tmp_path / "report-halumem.md").read_text()
    assert {row[0]: row[-1] for row in table(report, "Runs")} == {
        "ProMem (Full)": "scripted", "One-off Extract": "scripted another-grader"}
    assert "graded by different models" in report
