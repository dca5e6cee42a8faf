"""Benchmark metrics, as pure functions of predictions or of the judges' raw labels.

Aggregation takes the labels exactly as a judge produced them (lists of dicts), so a report can always be
recomputed from stored labels without asking a judge again. Ratios over an empty set are ``None`` (not 0,
which would read as a measured failure).

- LoCoMo: the token-F1 of LoCoMo's own evaluation code (snap-research/locomo, ``task_eval/evaluation.py``).
- HaluMem: the aggregation of HaluMem's evaluation code (MemTensor/HaluMem, ``eval/evaluation.py``,
  ``aggregate_eval_results``) and leaderboard definitions (README).
- LongMemEval: the accuracy of LongMemEval's ``src/evaluation/print_qa_metrics.py``.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any

from .datasets import LOCOMO_CATEGORIES

# ============================================================================================= LoCoMo
_DROPPED_WORDS = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
LOCOMO_ABSTAIN_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")
"""A category-5 (adversarial) prediction scores 1 when it contains one of these (case-insensitive)."""


@lru_cache(maxsize=1)
def _stemmer() -> Callable[[str], str]:
    """NLTK's Porter stemmer (needs no downloaded data), imported on first use: ``nltk`` is an extra."""
    from ..deps import require

    stem = require("nltk.stem", "eval", "nltk").PorterStemmer().stem
    return lru_cache(maxsize=1 << 16)(stem)


def normalize_answer(text: str) -> str:
    """LoCoMo's answer normalisation, in its order: drop commas, lowercase, strip ASCII punctuation, drop the
    words ``a``/``an``/``the`` **and ``and``** (LoCoMo's code adds ``and`` to SQuAD's article list, so
    "cats and dogs" matches "dogs, cats"), collapse whitespace."""
    text = str(text).replace(",", "").lower().translate(_PUNCTUATION)
    return " ".join(_DROPPED_WORDS.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    """Porter-stemmed tokens of the normalised answer."""
    stem = _stemmer()
    return [stem(word) for word in normalize_answer(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of stemmed tokens.

    With P = prediction tokens, G = gold tokens (multisets) and c = |P ∩ G| (counts clipped):
    precision = c/|P|, recall = c/|G|, F1 = 2·precision·recall / (precision + recall); 0 when c = 0
    (so also when either side is empty after normalisation).
    """
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, gold: str) -> float:
    """LoCoMo's score for list answers: split both on ``,``; for each gold item take its best F1 against
    the predicted items; average over gold items: (1/|G|) Σ_{g∈G} max_{p∈P} F1(p, g)."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)


def locomo_score(prediction: str, gold: str | int | None, category: int) -> float:
    """Score one LoCoMo answer the way LoCoMo's ``eval_question_answering`` does.

    Categories (see :data:`~promem_fast.eval.datasets.LOCOMO_CATEGORIES` for where the mapping comes from):

    - 1 multi-hop: :func:`multi_answer_f1`;
    - 2 temporal, 4 single-hop: :func:`token_f1`;
    - 3 open-domain: :func:`token_f1` against the gold answer cut before its first ``;``;
    - 5 adversarial: 1 if the prediction contains one of :data:`LOCOMO_ABSTAIN_PHRASES`, else 0
      (the gold answer is not used).
    """
    if category == 5:
        said = str(prediction).lower()
        return 1.0 if any(phrase in said for phrase in LOCOMO_ABSTAIN_PHRASES) else 0.0
    if category not in LOCOMO_CATEGORIES:
        raise ValueError(f"unknown LoCoMo category {category!r} (expected 1..5)")
    if gold is None:
        raise ValueError(f"category {category} needs a gold answer")
    gold = str(gold)
    if category == 1:
        return multi_answer_f1(prediction, gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    return token_f1(prediction, gold)


def locomo_scores(
    rows: Iterable[Mapping[str, Any]], *, overall_categories: Collection[int] = (1, 2, 3, 4, 5)
) -> dict[str, Any]:
    """Per-category and overall mean of :func:`locomo_score`.

    Each row: ``{"category": int, "prediction": str, "answer": str | int | None}``. ``overall`` is the mean
    over rows whose category is in ``overall_categories`` — all five by default, as LoCoMo's own report
    does; many later papers leave out category 5, which ``overall_categories=(1, 2, 3, 4)`` reproduces.
    ``by_category`` always covers every category present, keyed by name, in category-id order.
    """
    per: dict[int, list[float]] = {}
    for i, row in enumerate(rows):
        category = _need(row, "category", i)
        per.setdefault(category, []).append(locomo_score(_need(row, "prediction", i), row.get("answer"), category))
    included = [s for c, scores in per.items() if c in overall_categories for s in scores]
    return {
        "overall": _mean(included),
        "n": len(included),
        "by_category": {
            LOCOMO_CATEGORIES[c]: {"category": c, "n": len(per[c]), "mean": _mean(per[c])} for c in sorted(per)
        },
    }


# ============================================================================================= HaluMem
def halumem_integrity(labels: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Memory integrity (recall of gold points) and false-memory resistance, from the integrity judge.

    Each label is one gold point of a session scored against that session's extracted memories:
    ``{"memory_integrity_score": 2 | 1 | 0 | None, "memory_source": str, "importance": float,
    "memory_type": str}`` (2 = fully captured, 1 = partly, 0 = missing; None or anything else = the judge's
    reply did not parse: *invalid*). With N = non-interference points, V ⊆ N the valid ones, s_i the score
    and w_i the importance:

    - ``recall`` = |{i ∈ N : s_i = 2}| / |N|  (``recall_valid``: the same over V);
    - ``weighted_recall`` = Σ_{i∈V} 0.5·s_i·w_i / Σ_{i∈N} w_i  (``weighted_recall_valid``: Σ_{i∈V} w_i below);
    - interference points I (``memory_source == "interference"``, false facts planted in the dialogue) are
      scored the other way: ``false_memory_resistance`` (FMR) = |{i ∈ I : s_i = 0}| / |I|, the share NOT
      absorbed into memory (``..._valid``: over valid ones);
    - ``by_memory_type``: recall per ``memory_type`` over N.

    The paper's "Mem. Integrity" column is ``recall`` (HaluMem's "R").
    """
    n = n_valid = hits = 0
    weighted = importance_all = importance_valid = 0.0
    n_int = n_int_valid = resisted = 0
    by_type: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        score = _judge_score(label.get("memory_integrity_score"))
        if _need(label, "memory_source", i) == "interference":
            n_int += 1
            if score is not None:
                n_int_valid += 1
                resisted += score == 0
            continue
        importance = float(_need(label, "importance", i))
        n += 1
        importance_all += importance
        counts = by_type.setdefault(_need(label, "memory_type", i), [0, 0])
        counts[0] += 1
        if score is None:
            continue
        n_valid += 1
        importance_valid += importance
        hits += score == 2
        counts[1] += score == 2
        weighted += 0.5 * score * importance
    return {
        "n": n,
        "n_valid": n_valid,
        "recall": _ratio(hits, n),
        "recall_valid": _ratio(hits, n_valid),
        "weighted_recall": _ratio(weighted, importance_all),
        "weighted_recall_valid": _ratio(weighted, importance_valid),
        "importance_sum": importance_all,
        "importance_valid_sum": importance_valid,
        "n_interference": n_int,
        "n_interference_valid": n_int_valid,
        "false_memory_resistance": _ratio(resisted, n_int),
        "false_memory_resistance_valid": _ratio(resisted, n_int_valid),
        "by_memory_type": {t: {"n": c[0], "recall": _ratio(c[1], c[0])} for t, c in sorted(by_type.items())},
    }


def halumem_accuracy(labels: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Memory accuracy of the extracted entries, from the accuracy judge.

    Each label is one extracted entry judged against the session's dialogue and gold points:
    ``{"memory_accuracy_score": 2 | 1 | 0 | None, "is_included_in_golden_memories": "true" | "false"}`` (a
    target when the flag is one of :data:`GOLD_FLAG_TRUE`, as HaluMem reads it).
    With E = all entries, T ⊆ E those judged to be in the gold set ("target" entries), a ``_valid`` suffix
    restricting numerator and denominator to entries whose score parsed, and s_i the score:

    - ``target_precision`` = Σ_{i∈T, valid} 0.5·s_i / |T|   (HaluMem's "Target P"; the paper's "Mem. Accuracy");
    - ``weighted_accuracy`` = Σ_{i∈E, valid} 0.5·s_i / |E|   (HaluMem's "Acc.", which also charges entries
      outside the gold set).
    """
    n = n_valid = n_target = n_target_valid = 0
    total = target = 0.0
    for label in labels:
        score = _judge_score(label.get("memory_accuracy_score"))
        included = _is_true(label.get("is_included_in_golden_memories"))
        n += 1
        n_target += included
        if score is None:
            continue
        n_valid += 1
        total += 0.5 * score
        if included:
            n_target_valid += 1
            target += 0.5 * score
    return {
        "n": n,
        "n_valid": n_valid,
        "n_target": n_target,
        "n_target_valid": n_target_valid,
        "target_precision": _ratio(target, n_target),
        "target_precision_valid": _ratio(target, n_target_valid),
        "weighted_accuracy": _ratio(total, n),
        "weighted_accuracy_valid": _ratio(total, n_valid),
    }


def halumem_memory_f1(recall: float | None, target_precision: float | None) -> float | None:
    """HaluMem's extraction F1 = 2·R·P / (R + P) with R = ``recall`` and P = ``target_precision``
    (e.g. its leaderboard's MemOS row: R 74.07, Target P 86.25 → F1 79.70); 0 when both are 0."""
    if recall is None or target_precision is None:
        return None
    if recall + target_precision == 0:
        return 0.0
    return 2 * recall * target_precision / (recall + target_precision)


def halumem_extraction(
    integrity_labels: Iterable[Mapping[str, Any]], accuracy_labels: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """Integrity, accuracy and F1 together, with the paper's three headline numbers on top
    (``memory_integrity`` = recall, ``memory_accuracy`` = target precision, ``memory_f1``)."""
    integrity = halumem_integrity(integrity_labels)
    accuracy = halumem_accuracy(accuracy_labels)
    f1 = halumem_memory_f1(integrity["recall"], accuracy["target_precision"])
    return {
        "memory_integrity": integrity["recall"],
        "memory_accuracy": accuracy["target_precision"],
        "memory_f1": f1,
        "integrity": integrity,
        "accuracy": accuracy,
    }


_UPDATE_LABELS = ("Correct", "Hallucination", "Omission", "Other")
_QA_LABELS = ("Correct", "Hallucination", "Omission")


def halumem_update(labels: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Memory-update ratios, from the update judge: ``{"memory_update_type": "Correct" | "Hallucination" |
    "Omission" | "Other"}`` per update point (HaluMem judges an ``is_update`` point this way when the system
    returned memories for it). ``<label>`` = count(label) / all labels; ``<label>_valid`` = count(label) /
    labels that are one of the four."""
    return _label_ratios([label.get("memory_update_type") for label in labels], _UPDATE_LABELS)


def halumem_qa(labels: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """QA ratios, from the QA judge: ``{"result_type": "Correct" | "Hallucination" | "Omission",
    "question_type": str}`` per question.

    ``correct`` / ``hallucination`` / ``omission`` = count(label) / all questions (the paper's "QA Acc.",
    "QA Halu.", "QA Om."); ``..._valid`` divide by questions whose label is one of the three instead;
    ``by_question_type`` gives the three ratios per ``question_type``.
    """
    rows = list(labels)
    out = _label_ratios([row.get("result_type") for row in rows], _QA_LABELS)
    groups: dict[str, list[Any]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(_need(row, "question_type", i), []).append(row.get("result_type"))
    out["by_question_type"] = {
        qtype: {k: v for k, v in _label_ratios(results, _QA_LABELS).items() if not k.endswith("_valid")}
        for qtype, results in sorted(groups.items())
    }
    return out


def halumem_memory_type_accuracy(
    integrity_labels: Iterable[Mapping[str, Any]], update_labels: Iterable[Mapping[str, Any]] = ()
) -> dict[str, dict[str, Any]]:
    """HaluMem's type-wise accuracy (``memory_type_accuracy`` of its ``aggregate_eval_results``) per
    ``memory_type``, counted exactly as that code counts it.

    Every integrity label (interference points included: an absorbed false fact scored 2 counts as a hit
    there, as in HaluMem) and every update label of a type (whatever its label, valid or not) count once in
    n; ``integrity`` = |{integrity score = 2}| / n, ``update`` = |{update label = Correct}| / n,
    ``accuracy`` = integrity + update. Types are those present (HaluMem's code knows only its three).
    """
    table: dict[str, list[int]] = {}
    for i, label in enumerate(integrity_labels):
        row = table.setdefault(_need(label, "memory_type", i), [0, 0, 0])
        row[0] += 1
        row[1] += _judge_score(label.get("memory_integrity_score")) == 2
    for i, label in enumerate(update_labels):
        row = table.setdefault(_need(label, "memory_type", i), [0, 0, 0])
        row[0] += 1
        row[2] += label.get("memory_update_type") == "Correct"
    out = {}
    for mtype, (n, integrity_hits, update_hits) in sorted(table.items()):
        out[mtype] = {"n": n, "integrity": integrity_hits / n, "update": update_hits / n,
                      "accuracy": (integrity_hits + update_hits) / n}
    return out


UNSCORED_WARN_SHARE = 0.05
"""Share of a judge's records without a usable grade past which a report warns: the figures then rest on
fewer records than they seem to (HaluMem's ``(all)`` ratios count them as misses, its ``(valid)`` ratios
leave them out, and an accuracy record without a grade also leaves the target set)."""

_HALUMEM_GRADES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "integrity": ("memory_integrity_score", lambda v: _judge_score(v) is not None),
    "accuracy": ("memory_accuracy_score", lambda v: _judge_score(v) is not None),
    "update": ("memory_update_type", lambda v: v in _UPDATE_LABELS),
    "qa": ("result_type", lambda v: v in _QA_LABELS),
}
"""Per HaluMem judge: the field holding its grade and what a usable grade is."""


def unscored(values: Iterable[Any], usable: Callable[[Any], bool]) -> dict[str, Any]:
    """How many of a judge's grades are unusable (a failed reply, ``"judge_failed"``, an out-of-range
    score): ``n``, ``unscored``, ``share`` = unscored / n, and ``values``, the unusable values as JSON text
    with their counts (most frequent first, at most five), so a report can say what went wrong."""
    grades = list(values)
    bad = Counter(json.dumps(v, ensure_ascii=False, default=str)[:40] for v in grades if not usable(v))
    n_bad = sum(bad.values())
    return {"n": len(grades), "unscored": n_bad, "share": _ratio(n_bad, len(grades)),
            "values": dict(bad.most_common(5))}


def halumem_unscored(**labels: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`unscored` for each HaluMem judge given by keyword (``integrity``, ``accuracy``, ``update``,
    ``qa``), reading each judge's grade field."""
    out = {}
    for judge, rows in labels.items():
        key, usable = _HALUMEM_GRADES[judge]
        out[judge] = unscored((row.get(key) for row in rows), usable)
    return out


def unscored_warnings(table: Mapping[str, Mapping[str, Any]],
                      threshold: float = UNSCORED_WARN_SHARE) -> list[str]:
    """One sentence per judge whose unscored share is past ``threshold``."""
    return [f"{judge} judge: {row['unscored']} of {row['n']} records ({100 * row['share']:.1f}%) have no usable "
            f"grade (e.g. {next(iter(row['values']))}), so its figures rest on {row['n'] - row['unscored']}"
            for judge, row in table.items() if row["share"] is not None and row["share"] > threshold]


# ============================================================================================= LongMemEval
def judge_says_yes(label: bool | int | str) -> bool:
    """A yes/no judge label as LongMemEval reads it: a bool (or 0/1) as is; a raw reply is "yes" when it
    contains ``yes`` (case-insensitive), as ``evaluate_qa.py`` tests it."""
    if isinstance(label, (bool, int)):
        return bool(label)
    return "yes" in str(label).lower()


def longmemeval_scores(labels: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """LongMemEval QA accuracy from yes/no judge labels.

    Each label: ``{"question_id": str, "question_type": str, "label": bool | "yes"/"no" reply}`` (or
    LongMemEval's own log shape, ``"autoeval_label": {"label": bool}``). With a_q ∈ {0, 1}:

    - ``by_type[t]`` = mean a_q over questions of type t (abstention questions included in their type);
    - ``overall`` = mean a_q over all questions;
    - ``task_average`` = mean over the types present of ``by_type[t]``;
    - ``abstention`` = mean a_q over questions whose id contains ``_abs``, reported on its own as well.
    """
    by_type: dict[str, list[int]] = {}
    everything: list[int] = []
    abstention: list[int] = []
    for i, row in enumerate(labels):
        if "label" not in row and "autoeval_label" in row:
            raw = row["autoeval_label"]["label"]
        else:
            raw = _need(row, "label", i)
        correct = int(judge_says_yes(raw))
        by_type.setdefault(_need(row, "question_type", i), []).append(correct)
        everything.append(correct)
        if "_abs" in str(_need(row, "question_id", i)):
            abstention.append(correct)
    per_type = {t: {"n": len(v), "accuracy": sum(v) / len(v)} for t, v in sorted(by_type.items())}
    return {
        "n": len(everything),
        "overall": _mean(everything),
        "task_average": _mean([v["accuracy"] for v in per_type.values()]),
        "by_type": per_type,
        "abstention": {"n": len(abstention), "accuracy": _mean(abstention)},
    }


# ============================================================================================= helpers
def _need(row: Mapping[str, Any], key: str, index: int) -> Any:
    """A required key of one label, failing with the label's position (stored labels get hand-edited)."""
    if key not in row or row[key] is None:
        raise ValueError(f"label {index}: missing {key!r}")
    return row[key]


def _judge_score(value: Any) -> int | None:
    """A 0/1/2 judge score as HaluMem parses it (``int(...)``, so ``"2"`` counts); anything else is invalid."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    try:
        score = int(value)
    except (TypeError, ValueError):
        return None
    return score if score in (0, 1, 2) else None


GOLD_FLAG_TRUE: tuple[str, ...] = ("true", "True")
"""The values of ``is_included_in_golden_memories`` that HaluMem's ``aggregate_eval_results`` counts as a target
entry (``in ["true", "True"]``): a JSON ``true``, another case or padding does not count there, nor here."""


def _is_true(value: Any) -> bool:
    """HaluMem's reading of the ``is_included_in_golden_memories`` flag (:data:`GOLD_FLAG_TRUE`)."""
    return isinstance(value, str) and value in GOLD_FLAG_TRUE


def _label_ratios(results: list[Any], names: tuple[str, ...]) -> dict[str, Any]:
    valid = [r for r in results if r in names]
    out: dict[str, Any] = {"n": len(results), "n_valid": len(valid)}
    for name in names:
        count = valid.count(name)
        out[name.lower()] = _ratio(count, len(results))
        out[f"{name.lower()}_valid"] = _ratio(count, len(valid))
    return out


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _mean(values: list[float] | list[int]) -> float | None:
    return sum(values) / len(values) if values else None
