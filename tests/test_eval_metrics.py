"""Metrics on hand-computed examples: every expected number below was worked out by hand from the formulas
(the arithmetic is written next to the less obvious ones), not produced by running the code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from promem_fast.eval.metrics import (
    answer_tokens,
    halumem_accuracy,
    halumem_extraction,
    halumem_integrity,
    halumem_memory_f1,
    halumem_memory_type_accuracy,
    halumem_qa,
    halumem_unscored,
    halumem_update,
    judge_says_yes,
    locomo_score,
    locomo_scores,
    longmemeval_scores,
    normalize_answer,
    token_f1,
    unscored_warnings,
)

approx = pytest.approx

# ============================================================================================= LoCoMo
LOCOMO_TABLE = [
    # (gold, prediction, category, expected)
    ("Paris", "paris", 4, 1.0),
    ("A red car!", "the red car", 4, 1.0),
    # gold [potteri, class] (2); prediction "she took a pottery class on monday" minus "a" -> 6 tokens,
    # 2 shared: P = 2/6, R = 2/2, F1 = 2·(1/3)·1 / (1/3 + 1) = (2/3)/(4/3) = 0.5
    ("pottery class", "She took a pottery class on Monday", 4, 0.5),
    (2022, "2022", 2, 1.0),  # gold stored as an int
    ("7 May 2023", "May 7, 2023", 2, 1.0),  # same token multiset {7, may, 2023}
    # 2 of 3 tokens shared each way: P = R = 2/3, F1 = 2/3
    ("7 May 2023", "8 May 2023", 2, 2 / 3),
    ("Yes; she likes hiking", "yes", 3, 1.0),  # category 3: gold cut before ';' -> "Yes"
    # gold "likely no" (2 tokens) vs "no" (1): P = 1, R = 1/2, F1 = 2·1·0.5/1.5 = 2/3
    ("likely no; because she is allergic", "No", 3, 2 / 3),
    # category 1: gold items painting | swimming | hiking; best F1 of each against {swimming, paints}:
    # painting~paints (both stem to "paint") = 1, swimming = 1, hiking = 0 -> (1 + 1 + 0)/3 = 2/3
    ("painting, swimming, hiking", "swimming, paints", 1, 2 / 3),
    # gold items "beach trip" | "camping" vs the one prediction "trip to beach" (3 tokens):
    # beach trip: 2 shared, P = 2/3, R = 1, F1 = 0.8; camping: 0 -> (0.8 + 0)/2 = 0.4
    ("beach trip, camping", "a trip to the beach", 1, 0.4),
    ("cats and dogs", "dogs, cats", 4, 1.0),  # LoCoMo also drops "and" (and commas)
    # gold [veri, veri, good] vs [veri, good]: clipped overlap 2, P = 1, R = 2/3, F1 = (4/3)/(5/3) = 0.8
    ("very very good", "very good", 4, 0.8),
    ("Max", "", 4, 0.0),
    (None, "No information available about that.", 5, 1.0),
    ("a sunset", "He painted a sunset.", 5, 0.0),  # adversarial: answering the trap scores 0
    (None, "That was NOT MENTIONED in the conversation", 5, 1.0),
]


@pytest.mark.parametrize(("gold", "prediction", "category", "expected"), LOCOMO_TABLE)
def test_locomo_score_table(gold, prediction, category, expected):
    assert locomo_score(prediction, gold, category) == approx(expected)


def test_locomo_scores_per_category_and_overall():
    rows = [{"answer": g, "prediction": p, "category": c} for g, p, c, _ in LOCOMO_TABLE]
    out = locomo_scores(rows)
    by = out["by_category"]
    assert list(by) == ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"]
    # single-hop: (1 + 1 + 0.5 + 1 + 0.8 + 0)/6 = 4.3/6
    assert by["single-hop"] == {"category": 4, "n": 6, "mean": approx(4.3 / 6)}
    assert by["temporal"]["mean"] == approx((1 + 1 + 2 / 3) / 3)
    assert by["open-domain"]["mean"] == approx((1 + 2 / 3) / 2)
    assert by["multi-hop"]["mean"] == approx((2 / 3 + 0.4) / 2)
    assert by["adversarial"] == {"category": 5, "n": 3, "mean": approx(2 / 3)}
    # total = 4.3 + 8/3 + 5/3 + 16/15 + 2 = 11.7 over 16 rows
    assert out["n"] == 16 and out["overall"] == approx(11.7 / 16)
    without_adversarial = locomo_scores(rows, overall_categories=(1, 2, 3, 4))
    assert without_adversarial["n"] == 13 and without_adversarial["overall"] == approx(9.7 / 13)
    assert without_adversarial["by_category"]["adversarial"]["n"] == 3


def test_locomo_edge_cases():
    assert locomo_scores([]) == {"overall": None, "n": 0, "by_category": {}}
    with pytest.raises(ValueError):
        locomo_score("x", "y", 6)
    with pytest.raises(ValueError):
        locomo_score("x", None, 2)
    with pytest.raises(ValueError):
        locomo_scores([{"prediction": "x", "answer": "y"}])


def test_normalize_answer():
    assert normalize_answer("The Cat, and a Hat!") == "cat hat"
    assert normalize_answer("  An  apple\tpie. ") == "apple pie"
    assert normalize_answer(42) == "42"
    assert answer_tokens("Painting the dogs") == ["paint", "dog"]


_ANSWERS = st.text(alphabet=st.sampled_from("abcdehimnorst ,.;!'"), max_size=40)


@given(_ANSWERS, _ANSWERS)
def test_token_f1_is_symmetric_and_bounded(a, b):
    assert token_f1(a, b) == token_f1(b, a)
    assert 0.0 <= token_f1(a, b) <= 1.0


@given(_ANSWERS)
def test_token_f1_of_an_answer_with_itself(a):
    assert token_f1(a, a) == (1.0 if answer_tokens(a) else 0.0)


# ============================================================================================= HaluMem
def _point(score, importance=1.0, source="secondary", mtype="Event Memory"):
    return {"memory_integrity_score": score, "importance": importance, "memory_source": source, "memory_type": mtype}


INTEGRITY = [
    _point(2, 1.0, mtype="Event Memory"),
    _point(1, 0.5, mtype="Persona Memory"),
    _point(0, 0.75, source="primary", mtype="Persona Memory"),
    _point("2", 0.75, mtype="Relationship Memory"),  # the judge's score as a string still parses
    _point(None, 1.0, mtype="Event Memory"),  # unparsed judge reply: invalid
    _point(0, source="interference"),
    _point(2, source="interference"),
    _point(0, source="interference", mtype="Persona Memory"),
]

ACCURACY = [
    {"memory_accuracy_score": 2, "is_included_in_golden_memories": "true"},
    {"memory_accuracy_score": 1, "is_included_in_golden_memories": "True"},
    {"memory_accuracy_score": 0, "is_included_in_golden_memories": "false"},
    {"memory_accuracy_score": 2, "is_included_in_golden_memories": False},
    {"memory_accuracy_score": None, "is_included_in_golden_memories": "false"},
    {"memory_accuracy_score": "oops", "is_included_in_golden_memories": "true"},
]


def test_halumem_integrity():
    out = halumem_integrity(INTEGRITY)
    assert (out["n"], out["n_valid"]) == (5, 4)
    assert out["recall"] == approx(2 / 5)  # two points scored 2 among five non-interference points
    assert out["recall_valid"] == approx(2 / 4)
    # 0.5·(2·1.0 + 1·0.5 + 0·0.75 + 2·0.75) = 0.5·4 = 2.0 over importance 1 + 0.5 + 0.75 + 0.75 + 1 = 4.0
    assert out["weighted_recall"] == approx(2.0 / 4.0)
    assert out["weighted_recall_valid"] == approx(2.0 / 3.0)
    assert out["importance_sum"] == approx(4.0) and out["importance_valid_sum"] == approx(3.0)
    # two of the three planted false facts were not absorbed (scored 0)
    assert (out["n_interference"], out["false_memory_resistance"]) == (3, approx(2 / 3))
    assert out["by_memory_type"] == {
        "Event Memory": {"n": 2, "recall": approx(0.5)},
        "Persona Memory": {"n": 2, "recall": approx(0.0)},
        "Relationship Memory": {"n": 1, "recall": approx(1.0)},
    }


def test_halumem_accuracy():
    out = halumem_accuracy(ACCURACY)
    assert (out["n"], out["n_valid"], out["n_target"], out["n_target_valid"]) == (6, 4, 3, 2)
    # target entries: 0.5·2 + 0.5·1 = 1.5 over 3 target entries (one of them unparsed)
    assert out["target_precision"] == approx(1.5 / 3)
    assert out["target_precision_valid"] == approx(1.5 / 2)
    # all entries: 0.5·(2 + 1 + 0 + 2) = 2.5 over 6 (or 4 valid)
    assert out["weighted_accuracy"] == approx(2.5 / 6)
    assert out["weighted_accuracy_valid"] == approx(2.5 / 4)


def test_halumem_f1_and_headline():
    out = halumem_extraction(INTEGRITY, ACCURACY)
    assert out["memory_integrity"] == approx(0.4) and out["memory_accuracy"] == approx(0.5)
    assert out["memory_f1"] == approx(2 * 0.4 * 0.5 / 0.9)  # = 0.4/0.9
    assert out["integrity"]["n"] == 5 and out["accuracy"]["n"] == 6
    # HaluMem's leaderboard rows (Medium): MemOS R 74.07, Target P 86.25 -> F1 79.70; Mem0 42.91, 86.26 -> 57.31
    assert halumem_memory_f1(0.7407, 0.8625) == approx(0.7970, abs=5e-5)
    assert halumem_memory_f1(0.4291, 0.8626) == approx(0.5731, abs=5e-5)
    assert halumem_memory_f1(0.0, 0.0) == 0.0
    assert halumem_memory_f1(None, 0.5) is None


def test_halumem_empty_and_malformed():
    empty = halumem_integrity([])
    assert empty["recall"] is None and empty["false_memory_resistance"] is None
    assert halumem_accuracy([])["target_precision"] is None
    with pytest.raises(ValueError, match="label 0"):
        halumem_integrity([{"memory_integrity_score": 2, "memory_source": "secondary", "memory_type": "Event Memory"}])


def test_halumem_update():
    labels = [{"memory_update_type": t} for t in ("Correct", "Hallucination", "Omission", "Omission", "Other", None)]
    out = halumem_update(labels)
    assert (out["n"], out["n_valid"]) == (6, 5)
    assert out["correct"] == approx(1 / 6) and out["omission"] == approx(2 / 6)
    assert out["omission_valid"] == approx(2 / 5) and out["other"] == approx(1 / 6)


def test_halumem_qa():
    labels = [
        {"result_type": "Correct", "question_type": "Basic Fact Recall"},
        {"result_type": "Correct", "question_type": "Basic Fact Recall"},
        {"result_type": "Hallucination", "question_type": "Multi-hop Inference"},
        {"result_type": "Omission", "question_type": "Basic Fact Recall"},
        {"result_type": "no idea", "question_type": "Multi-hop Inference"},
    ]
    out = halumem_qa(labels)
    assert (out["n"], out["n_valid"]) == (5, 4)
    assert (out["correct"], out["hallucination"], out["omission"]) == (approx(0.4), approx(0.2), approx(0.2))
    assert (out["correct_valid"], out["hallucination_valid"]) == (approx(0.5), approx(0.25))
    assert out["by_question_type"]["Basic Fact Recall"] == {
        "n": 3, "correct": approx(2 / 3), "hallucination": approx(0.0), "omission": approx(1 / 3)}
    assert out["by_question_type"]["Multi-hop Inference"] == {
        "n": 2, "correct": approx(0.0), "hallucination": approx(0.5), "omission": approx(0.0)}


def test_halumem_memory_type_accuracy_counts_as_halumem_does():
    updates = [{"memory_update_type": "Correct", "memory_type": "Event Memory"},
               {"memory_update_type": "Omission", "memory_type": "Persona Memory"},
               {"memory_update_type": None, "memory_type": "Persona Memory"}]
    out = halumem_memory_type_accuracy(INTEGRITY, updates)
    # HaluMem's loop takes every integrity record, interference ones too: Event = scores 2, None and the
    # interference 0 and 2 (an absorbed false fact counts as a hit) + one Correct update -> n 5, 2/5 + 1/5
    assert out["Event Memory"] == {"n": 5, "integrity": approx(2 / 5), "update": approx(1 / 5),
                                   "accuracy": approx(3 / 5)}
    # Persona = scores 1, 0, interference 0 + two updates (one without a usable label, counted all the same)
    assert out["Persona Memory"] == {"n": 5, "integrity": 0.0, "update": 0.0, "accuracy": 0.0}
    assert out["Relationship Memory"] == {"n": 1, "integrity": 1.0, "update": 0.0, "accuracy": 1.0}
    assert halumem_memory_type_accuracy(INTEGRITY)["Event Memory"]["n"] == 4


def test_unscored_grades_are_counted_described_and_warned_past_five_percent():
    labels = [{"memory_integrity_score": s} for s in [2] * 18 + ["judge_failed", None]]
    table = halumem_unscored(integrity=labels, qa=[{"result_type": "Correct"}] * 99 + [{"result_type": "?"}])
    assert table["integrity"] == {"n": 20, "unscored": 2, "share": approx(0.1),
                                  "values": {'"judge_failed"': 1, "null": 1}}
    assert table["qa"]["unscored"] == 1 and table["qa"]["share"] == approx(0.01)
    (warning,) = unscored_warnings(table)  # 10% warns, 1% does not
    assert warning.startswith("integrity judge: 2 of 20 records (10.0%)") and "rest on 18" in warning
    assert unscored_warnings({"qa": {**table["integrity"], "unscored": 1, "share": 0.05}}) == []  # 5% is not past 5%
    assert halumem_unscored(update=[])["update"]["share"] is None


# ============================================================================================= LongMemEval
def test_longmemeval_scores():
    labels = [
        {"question_id": "q1", "question_type": "single-session-user", "label": True},
        {"question_id": "q2", "question_type": "single-session-user", "label": "No."},
        {"question_id": "q3", "question_type": "single-session-user", "label": "Yes, it is correct."},
        {"question_id": "q4_abs", "question_type": "temporal-reasoning", "label": "yes"},
        {"question_id": "q5", "question_type": "temporal-reasoning", "autoeval_label": {"model": "m", "label": False}},
    ]
    out = longmemeval_scores(labels)
    assert out["n"] == 5 and out["overall"] == approx(3 / 5)
    assert out["by_type"] == {"single-session-user": {"n": 3, "accuracy": approx(2 / 3)},
                              "temporal-reasoning": {"n": 2, "accuracy": approx(1 / 2)}}
    assert out["task_average"] == approx((2 / 3 + 1 / 2) / 2)  # = 7/12
    assert out["abstention"] == {"n": 1, "accuracy": approx(1.0)}


def test_judge_says_yes():
    assert judge_says_yes("YES") and judge_says_yes(True) and judge_says_yes(1)
    assert not judge_says_yes("no") and not judge_says_yes(False) and not judge_says_yes(0)
    assert longmemeval_scores([])["overall"] is None
