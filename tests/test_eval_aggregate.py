"""``promem eval aggregate``: scores recomputed from stored judge labels, in our format and in HaluMem's.

The HaluMem records below are written the way HaluMem's ``eval/evaluation.py`` writes its per-user files
(``is_update`` as the strings "True"/"False", ``is_included_in_golden_memories`` as "true"/"True"/"false",
a failed judge call as ``null``), plus a third-party judge's ``"judge_failed"``; every expected figure was
worked out by hand from HaluMem's ``aggregate_eval_results``, the arithmetic written beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, scripted_config
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.cli import main
from promem_fast.errors import InputError
from promem_fast.eval.aggregate import aggregate, load_labels, render
from promem_fast.eval.runner import run_eval

HALUMEM = ROOT / "tests" / "fixtures" / "halumem_mini.jsonl"
approx = pytest.approx


def point(mtype: str, source: str, importance: float, score: Any, update: str = "False") -> dict[str, Any]:
    return {"memory_content": f"{mtype} {source} {importance}", "memory_type": mtype, "memory_source": source,
            "importance": importance, "is_update": update, "memory_integrity_score": score}


def updated(mtype: str, importance: float, verdict: Any) -> dict[str, Any]:
    return {"memory_content": f"{mtype} changed", "memory_type": mtype, "memory_source": "primary",
            "importance": importance, "is_update": "True", "original_memories": ["before"],
            "memories_from_system": ["after"], "memory_update_type": verdict}


def entry(score: Any, included: Any) -> dict[str, Any]:
    return {"memory_content": "an extracted memory", "memory_accuracy_score": score,
            "is_included_in_golden_memories": included}


def asked(result: Any, qtype: str) -> dict[str, Any]:
    return {"question": "q?", "answer": "a", "system_response": "r", "question_type": qtype, "result_type": result}


USER_1 = {
    "memory_integrity_records": [
        point("Persona Memory", "primary", 1.0, 2),
        point("Event Memory", "secondary", 0.5, 1),
        point("Relationship Memory", "primary", 0.8, 0),
        point("Persona Memory", "primary", 0.6, 2, update="True"),  # an update point the system found nothing for
        point("Event Memory", "interference", 0.3, 0),
        point("Persona Memory", "interference", 0.4, 2),
    ],
    "memory_accuracy_records": [entry(2, "true"), entry(1, "True"), entry(0, "false"), entry(None, "false")],
    "memory_update_records": [updated("Event Memory", 0.9, "Correct"), updated("Persona Memory", 0.7, "Hallucination")],
    "question_answering_records": [asked("Correct", "Basic Fact Recall"), asked("Omission", "Memory Boundary"),
                                   asked(None, "Basic Fact Recall")],
}
USER_2 = {
    "memory_integrity_records": [
        point("Event Memory", "primary", 1.0, "judge_failed"),
        point("Persona Memory", "secondary", 0.5, 2),
        point("Relationship Memory", "interference", 0.2, None),
    ],
    "memory_accuracy_records": [entry("judge_failed", "false"), entry(2, "true")],
    "memory_update_records": [updated("Relationship Memory", 0.5, "Omission"), updated("Persona Memory", 0.5, "Other"),
                              updated("Event Memory", 0.5, None)],
    "question_answering_records": [asked("Hallucination", "Memory Conflict"), asked("Correct", "Memory Conflict")],
}


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# ============================================================================================= HaluMem's records
def test_halumem_records_pooled_from_per_user_files_give_halumem_figures_by_hand(tmp_path: Path) -> None:
    files = [write(tmp_path / "u1.json", USER_1), write(tmp_path / "u2.json", USER_2)]
    labels = load_labels(files)
    assert (labels.kind, labels.format, labels.update_routing) == ("halumem", "halumem", "official")
    score = aggregate(labels)["overall_score"]
    # integrity: six non-interference points (1.0 + 0.5 + 0.8 + 0.6 + 1.0 + 0.5 = 4.4 importance), three
    # scored 2; "judge_failed" is not a valid score, so five valid (importance 3.4);
    # weighted: 0.5·(2·1.0 + 1·0.5 + 0·0.8 + 2·0.6 + 2·0.5) = 2.35
    assert score["memory_integrity"] == approx({
        "recall(all)": 3 / 6, "recall(valid)": 3 / 5, "weighted_recall(all)": 2.35 / 4.4,
        "weighted_recall(valid)": 2.35 / 3.4, "memory_valid_importance_sum": 3.4, "memory_importance_sum": 4.4,
        "memory_valid_num": 5, "memory_num": 6})
    # interference: three planted, two graded, one of those resisted (0); accuracy: six entries, three
    # marked in the gold set (0.5·(2 + 1 + 2) = 2.5), four graded (0.5·(2 + 1 + 0 + 2) = 2.5)
    assert score["memory_accuracy"] == approx({
        "interference_accuracy(all)": 1 / 3, "interference_accuracy(valid)": 1 / 2,
        "interference_memory_valid_num": 2, "interference_memory_num": 3,
        "target_accuracy(all)": 2.5 / 3, "target_accuracy(valid)": 2.5 / 3, "target_memory_valid_num": 3,
        "target_memory_num": 3, "weighted_accuracy(all)": 2.5 / 6, "weighted_accuracy(valid)": 2.5 / 4,
        "memory_valid_num": 4, "memory_num": 6})
    # updates: five, four with one of the four labels, one of each
    assert score["memory_update"] == approx({
        **{f"{n}_update_memory_ratio(all)": 1 / 5 for n in ("correct", "hallucination", "omission", "other")},
        **{f"{n}_update_memory_ratio(valid)": 1 / 4 for n in ("correct", "hallucination", "omission", "other")},
        "update_memory_valid_num": 4, "update_memory_num": 5})
    assert score["question_answering"] == approx({
        "correct_qa_ratio(all)": 2 / 5, "correct_qa_ratio(valid)": 2 / 4, "hallucination_qa_ratio(all)": 1 / 5,
        "hallucination_qa_ratio(valid)": 1 / 4, "omission_qa_ratio(all)": 1 / 5, "omission_qa_ratio(valid)": 1 / 4,
        "qa_valid_num": 4, "qa_num": 5})
    # type-wise, every integrity record (interference too) and every update record of a type:
    # Persona = 2, 2, interference 2, 2 (four hits) + Hallucination, Other -> 4/6 + 0
    # Event = 1, interference 0, "judge_failed" + Correct, null -> 0 + 1/5; Relationship = 0, null + Omission
    types = score["memory_type_accuracy"]
    assert set(types) == {"Persona Memory", "Event Memory", "Relationship Memory"}
    assert types["Persona Memory"] == approx({"memory_integrity_acc": 4 / 6, "memory_update_acc": 0.0,
                                              "total_num": 6, "memory_acc": 4 / 6})
    assert types["Event Memory"] == approx({"memory_integrity_acc": 0.0, "memory_update_acc": 1 / 5, "total_num": 5,
                                            "memory_acc": 1 / 5})
    assert types["Relationship Memory"] == {"memory_integrity_acc": 0.0, "memory_update_acc": 0.0, "total_num": 3,
                                            "memory_acc": 0.0}
    head = aggregate(labels)["headline"]
    # F1 = 2·0.5·(5/6) / (0.5 + 5/6) = 5/8
    assert (head["memory_integrity"], head["memory_accuracy"], head["memory_f1"]) == approx((0.5, 5 / 6, 5 / 8))


def test_judge_records_without_a_grade_are_counted_shown_and_warned(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: a headline accuracy resting on 2 of 1,576 records."""
    records = {"memory_accuracy_records": [entry(2, "true"), entry(1, "true")]
               + [entry("judge_failed", "false")] * 1574,
               "question_answering_records": [asked("Correct", "Basic Fact Recall")] * 40
               + [asked("judge_failed", "Basic Fact Recall")]}
    path = write(tmp_path / "records.json", records)
    report = tmp_path / "report.md"
    assert main(["eval", "aggregate", str(path), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "Mem. Acc. 75.00" in out  # (0.5·2 + 0.5·1) / 2 target entries
    assert "accuracy 1574/1576 (99.9%)" in out and "qa 1/41 (2.4%)" in out
    (warning,) = [line for line in out.splitlines() if line.startswith("warning:")]  # QA at 2.4% does not warn
    assert warning == ('warning: accuracy judge: 1574 of 1576 records (99.9%) have no usable grade '
                       '(e.g. "judge_failed"), so its figures rest on 2')
    text = report.read_text()
    assert "**Warning:** accuracy judge: 1574 of 1576 records" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| labels |") and "1574/1576" in line]
    assert "1574/1576 (99.87%)" in row and "1/41 (2.44%)" in row


# ============================================================================================= our labels
def _evaluate(out: Path, **kw: Any) -> dict[str, Any]:
    config = scripted_config()
    return run_eval("halumem", HALUMEM, config, out_dir=out, limit=2, llm=ScriptedLLM(config.llm), **kw)


def test_our_result_reaggregates_to_its_own_figures_whatever_the_routing(tmp_path: Path) -> None:
    for routing in ("official", "both"):
        result = _evaluate(tmp_path / routing, update_routing=routing)
        path = tmp_path / routing / "result-halumem-full.json"
        again = aggregate(load_labels([path]))
        assert again["update_routing"] == routing
        assert again["headline"] == {k: v for k, v in result["headline"].items() if k != "tokens_per_session"}
        assert again["aggregates"]["extraction"] == result["aggregates"]["extraction"]
        # its labels alone, and a result written before the routing was recorded, say the same
        doc = json.loads(path.read_text())
        labels_only = write(tmp_path / f"labels-{routing}.json", doc["labels"])
        assert aggregate(load_labels([labels_only]))["headline"] == again["headline"]
        del doc["config"]["update_routing"]
        older = write(tmp_path / f"older-{routing}.json", doc)
        assert load_labels([older]).update_routing == routing
        # HaluMem spells the flag "True"/"False" (the string "False" is truthy): the same figures
        for label in doc["labels"]["integrity"]:
            label["is_update"] = str(bool(label.get("is_update")))
        spelled = write(tmp_path / f"spelled-{routing}.json", doc)
        assert aggregate(load_labels([spelled]))["aggregates"]["extraction"] == again["aggregates"]["extraction"]


def test_the_aggregate_report_has_the_score_tables_and_no_cost(tmp_path: Path) -> None:
    _evaluate(tmp_path)
    result = aggregate(load_labels([tmp_path / "result-halumem-full.json"]))
    report = render(result)
    for heading in ("## Table 1", "## Extraction in detail", "## Type-wise accuracy",
                    "## Judge records without a usable grade", "## QA by question type"):
        assert heading in report
    assert "Table 6" not in report and "update points judged as `official`" in report
    # NativeRAG extracts nothing: its extraction judges had nothing to grade
    qa = json.loads((tmp_path / "result-halumem-full.json").read_text())["labels"]["qa"]
    native = render(aggregate(load_labels([write(tmp_path / "native.json", {"qa": qa})])))
    row = native.split("## Judge records without a usable grade")[1].strip().splitlines()[-1]
    assert row == f"| labels | - | - | - | 0/{len(qa)} (0.00%) |"


def test_locomo_and_longmemeval_results_reaggregate(tmp_path: Path) -> None:
    for kind, data in (("locomo", "locomo_mini.json"), ("longmemeval", "longmemeval_mini.json")):
        config = scripted_config()
        result = run_eval(kind, ROOT / "tests" / "fixtures" / data, config, out_dir=tmp_path,
                          llm=ScriptedLLM(config.llm))
        again = aggregate(load_labels([tmp_path / f"result-{kind}-full.json"]))
        assert again["headline"] == {k: v for k, v in result["headline"].items() if k != "tokens_per_session"}
        assert "## Table 1" in render(again) and "Table 6" not in render(again)
    # a LoCoMo judge that failed on two questions of three: counted and warned about
    rows = [{"category": 4, "prediction": "Paris", "answer": "Paris", "llm_correct": grade}
            for grade in (True, None, "judge_failed")]
    locomo = aggregate(load_labels([write(tmp_path / "l.json", {"kind": "locomo", "labels": {"qa": rows}})]))
    assert locomo["aggregates"]["unscored"]["qa"]["unscored"] == 2
    assert locomo["aggregates"]["warnings"][0].startswith("qa judge: 2 of 3 records (66.7%)")
    assert "**Warning:** qa judge: 2 of 3" in render(locomo)
    # LongMemEval scores a failed judge call as "no"; it is counted all the same
    rows = [{"question_id": f"q{i}", "question_type": "temporal-reasoning", "label": False, "error": "no reply"}
            for i in range(2)] + [{"question_id": "q9", "question_type": "temporal-reasoning", "label": True}]
    lme = aggregate(load_labels([write(tmp_path / "m.json", {"kind": "longmemeval", "labels": {"qa": rows}})]))
    assert lme["headline"]["accuracy"] == approx(1 / 3)
    assert lme["aggregates"]["unscored"]["qa"] == {"n": 3, "unscored": 2, "share": approx(2 / 3),
                                                   "values": {"null": 2}}


# ============================================================================================= bad input
BAD_RECORDS = [
    ({"memory_integrity_records": [point("Event Memory", "primary", 1.0, 2), {"memory_type": "Event Memory"}]},
     "memory_integrity_records[1].memory_integrity_score", "missing"),
    ({"memory_integrity_records": [point("Event Memory", "primary", "high", 2)]},
     "memory_integrity_records[0].importance", "must be a finite number >= 0"),
    ({"memory_integrity_records": [point("Event Memory", "", 1.0, 2)]},
     "memory_integrity_records[0].memory_source", "must be a non-empty string"),
    ({"memory_integrity_records": [point("Event Memory", "primary", 1.0, 2, update="maybe")]},
     "memory_integrity_records[0].is_update", 'must be true, false, "true" or "false"'),
    ({"memory_integrity_records": [point("Event Memory", "primary", 1.0, [2])]},
     "memory_integrity_records[0].memory_integrity_score", "must be a string, number or null"),
    ({"kind": "halumem", "labels": {"update": [{**updated("Event Memory", 1.0, "Correct"), "index": [0]}]}},
     "labels.update[0].index", "must be a string, number or null"),
    ({"memory_accuracy_records": [entry(2, "yes")]},
     "memory_accuracy_records[0].is_included_in_golden_memories", 'must be true, false, "true" or "false"'),
    ({"memory_update_records": [{**updated("Event Memory", 1.0, "Correct"), "memory_type": None}]},
     "memory_update_records[0].memory_type", "must be a non-empty string"),
    ({"question_answering_records": [{"result_type": "Correct"}]},
     "question_answering_records[0].question_type", "missing"),
    ({"question_answering_records": ["Correct"]}, "question_answering_records[0]", "must be a JSON object"),
    ({"memory_update_records": {"a": 1}}, "memory_update_records", "must be a list of records"),
    ({"kind": "halumem", "labels": {"qa": [{"result_type": "Correct", "question_type": 3}]}},
     "labels.qa[0].question_type", "must be a non-empty string"),
    ({"kind": "locomo", "labels": {"qa": [{"category": 2, "prediction": "x", "answer": None, "llm_correct": True}]}},
     "labels.qa[0].answer", "category 2 needs a gold answer"),
    ({"kind": "locomo", "labels": {"qa": [{"category": 9, "prediction": "x", "answer": "y", "llm_correct": True}]}},
     "labels.qa[0].category", "must be a LoCoMo category"),
    ({"kind": "halumem", "labels": {"integrity": [], "accuracy": []}, "config": {"update_routing": "sideways"}},
     "config.update_routing", "must be one of official, both"),
    ({"kind": "trec", "labels": {}}, "kind", "must be one of halumem, locomo, longmemeval"),
    ({"integrity": [], "extra": []}, None, "no judge labels found"),
]


@pytest.mark.parametrize(("doc", "field", "message"), BAD_RECORDS)
def test_every_bad_field_is_named_with_its_record(tmp_path: Path, doc: Any, field: str | None, message: str) -> None:
    path = write(tmp_path / "labels.json", doc)
    with pytest.raises(InputError) as caught:
        load_labels([path])
    assert caught.value.file == str(path) and caught.value.field == field
    assert message in caught.value.message


def test_bad_files_are_one_line_errors_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"memory_integrity_records": [\n  {"memory_type": }\n]}')
    assert main(["eval", "aggregate", str(broken)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"promem: {broken}:2: not JSON")
    assert main(["eval", "aggregate", str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.strip() == f"promem: {tmp_path / 'missing.json'}: no such file"
    assert main(["eval", "aggregate", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    bad = write(tmp_path / "bad.json", {"memory_accuracy_records": [entry(2, "yes")]})
    assert main(["eval", "aggregate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"promem: {bad}, field 'memory_accuracy_records[0].is_included_in_golden_memories': must be "
                    'true, false, "true" or "false", got "yes"')]


def test_files_of_different_benchmarks_or_routings_are_not_pooled(tmp_path: Path) -> None:
    halumem = write(tmp_path / "h.json", USER_1)
    locomo = write(tmp_path / "l.json", {"kind": "locomo", "labels": {"qa": []}})
    with pytest.raises(InputError, match="kind 'locomo' differs from 'halumem'"):
        load_labels([halumem, locomo])
    both = write(tmp_path / "b.json", {"kind": "halumem", "labels": {}, "config": {"update_routing": "both"}})
    with pytest.raises(InputError, match="update_routing 'both' differs from 'official'"):
        load_labels([halumem, both])
