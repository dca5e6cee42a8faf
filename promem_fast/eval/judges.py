"""LLM judges, as session programs, producing labels in exactly the shape :mod:`.metrics` aggregates.

Each judge asks the configured chat model (role ``judge``, stage ``judge``) with one of our grading prompts
and a closed JSON schema, and returns one label dict per graded item. A label keeps the metric's own fields
(``memory_integrity_score``, ``result_type``, ``label``, …), what was graded, the judge's parsed reply
(``judge_reply``) and, when the step failed, the error with the raw replies (``error``, ``raw``), so a
report can always be recomputed, audited or re-judged from the stored labels alone.

- HaluMem integrity: every gold point of a session, scored 2/1/0 against that session's extracted entries.
- HaluMem accuracy: every extracted entry, scored 2/1/0 against the session's dialogue, plus whether it is
  one of the session's gold points (``is_included_in_golden_memories``; planted interference points are not
  offered as gold).
- HaluMem update: every update gold point, Correct / Hallucination / Omission / Other against the memories
  the store's search returns for it, top 10 (``memory_update_type``; :mod:`.updates` retrieves and routes).
- HaluMem QA: Correct / Hallucination / Omission.
- LoCoMo: CORRECT / WRONG (the LLM-judge accuracy), next to LoCoMo's token F1.
- LongMemEval: yes / no, with the type-specific rules (temporal: off by one allowed; knowledge update: the
  latest value counts; preference: a rubric; abstention: saying it is unknown is right).

When a prompt would not fit the judge model's context (a long HaluMem session), the text it is graded
against is cut to the turns or memories most similar to the item (embedding cosine), never silently
truncated mid-text; how much was shown is recorded on the label.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from promem_fast.context import RunContext
from promem_fast.requests import Embed, Failure, Generate, Program, Request
from promem_fast.store.qa import Answer
from promem_fast.store.qa_prompts import QA_NOT_FOUND
from promem_fast.types import MemoryGraph, Session

from . import metrics
from .datasets import LOCOMO_CATEGORIES
from .judge_prompts import OWN, JudgePrompts
from .prompts import LME_TEMPLATE_OF_TYPE
from .benchmark import GoldMemory, Question
from .updates import UPDATE_ROUTINGS

log = logging.getLogger(__name__)

LOCOMO_MAIN_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)
"""LoCoMo categories of the headline numbers: adversarial (5) questions have no gold answer and are left
out of the overall figure by the papers the ProMem paper compares with; they are still judged and reported
per category."""

_ROLE = "judge"
_STAGE = "judge"


# ============================================================================================= plumbing
def _request(ctx: RunContext, name: str, fields: dict[str, str], item: str, prompts: JudgePrompts = OWN) -> Generate:
    return Generate(stage=_STAGE, role=_ROLE, messages=prompts.messages(name, fields), schema=prompts.schema(name),
                    max_tokens=ctx.config.pipeline.max_tokens[_ROLE], item=item)


def _outcome(ctx: RunContext, result: Any, name: str,
             prompts: JudgePrompts = OWN) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The parsed reply in our shape (None on failure) and the label fields recording it (the judge's reply
    as it gave it)."""
    if isinstance(result, Failure):
        ctx.fail(result)
        return None, {"judge_reply": None, "error": result.error, "raw": list(result.raw)}
    return prompts.reply(name, result), {"judge_reply": dict(result), "error": None}


def _budget(ctx: RunContext, name: str, fields: dict[str, str], slot: str, prompts: JudgePrompts = OWN) -> int:
    """Tokens free for ``fields[slot]`` in the prompt ``name`` with the other fields as given."""
    return ctx.prompt_budget(_ROLE, prompts.messages(name, {**fields, slot: ""}))


def _choose(sizes: Sequence[int], budget: int, priority: Sequence[int]) -> list[int]:
    """Indices of lines to show: taken in ``priority`` order while they fit, returned in text order."""
    keep: list[int] = []
    used = 0
    for i in priority:
        if used + sizes[i] <= budget:
            keep.append(i)
            used += sizes[i]
    return sorted(keep)


def _similarity_order(ctx: RunContext, lines: Sequence[str], items: Sequence[str]) -> Program[list[list[int]]]:
    """For each item, the line indices from most to least similar (one embedding request for all)."""
    (vectors,) = yield [Embed(stage=_STAGE, texts=tuple(lines) + tuple(items))]
    if isinstance(vectors, Failure):
        ctx.fail(vectors)
        return [list(range(len(lines))) for _ in items]
    keys, queries = vectors[:len(lines)], vectors[len(lines):]
    scores = queries @ keys.T
    return [np.argsort(-row, kind="stable").tolist() for row in scores]


# ============================================================================================= HaluMem extraction
def memory_lines(graph: MemoryGraph | None) -> list[str]:
    """A session's extracted entries as the integrity judge sees them: each with its anchored details,
    since a gold point's specifics (a date, a name) may live in a detail rather than in the entry text."""
    if graph is None:
        return []
    lines = []
    for node, details in graph.iter_anchored():
        facts = "; ".join(d.text for d in details)
        lines.append(f"{node.text} (details: {facts})" if facts else node.text)
    return lines


def point_labels(session: Session, points: Sequence[GoldMemory]) -> list[dict[str, Any]]:
    """The integrity labels' fields that come from the gold points themselves (a missing importance counts
    as 1, so an unweighted file still aggregates)."""
    return [{
        "session_id": session.session_id, "index": p.index, "memory_content": p.content,
        "memory_type": p.memory_type, "memory_source": p.source,
        "importance": 1.0 if p.importance is None else p.importance, "is_update": p.is_update,
    } for p in points]


def _line_sizes(ctx: RunContext, lines: Sequence[str]) -> list[int]:
    """Tokens each line takes in a listing (its text, a number and the line break)."""
    return [ctx.text_tokens(_ROLE, line) + 3 for line in lines]


def integrity_program(session: Session, points: Sequence[GoldMemory], graph: MemoryGraph | None,
                      ctx: RunContext, prompts: JudgePrompts = OWN) -> Program[list[dict[str, Any]]]:
    """One integrity label per gold point of ``session`` (interference points included: scoring one 0
    means the planted false fact was resisted), judged against the session's extracted entries: all of them
    when they fit, else for each point the most similar ones that fit. With nothing extracted no point can
    be captured: 0, without asking (as HaluMem does)."""
    if not points:
        return []
    base = point_labels(session, points)
    lines = memory_lines(graph)
    if not lines:
        return [{**b, "memory_integrity_score": 0, "judge_reply": None, "error": None, "rule": "no memories",
                 "memories_shown": 0} for b in base]
    sizes = _line_sizes(ctx, lines)
    budgets = [_budget(ctx, "judge_integrity", {"point": p.content, "memories": ""}, "memories", prompts)
               for p in points]
    order: list[list[int]] | None = None
    if sum(sizes) > min(budgets):
        order = yield from _similarity_order(ctx, lines, [p.content for p in points])
    requests: list[Request] = []
    shown = []
    for k, point in enumerate(points):
        keep = list(range(len(lines))) if order is None else _choose(sizes, budgets[k], order[k])
        shown.append(len(keep))
        requests.append(_request(ctx, "judge_integrity",
                                 {"point": point.content, "memories": prompts.listing([lines[i] for i in keep])},
                                 item=f"integrity {session.session_id} point {point.index}", prompts=prompts))
    results = yield requests
    labels = []
    for b, result, n in zip(base, results, shown, strict=True):
        reply, record = _outcome(ctx, result, "judge_integrity", prompts)
        labels.append({**b, "memory_integrity_score": None if reply is None else reply["score"], **record,
                       "memories_shown": n})
    return labels


def update_labels(session: Session, points: Sequence[GoldMemory]) -> list[dict[str, Any]]:
    """The update labels' fields that come from the gold points: one per ``is_update`` point of ``points``,
    those of :func:`point_labels` plus the earlier values it replaces."""
    updates = [p for p in points if p.is_update]
    return [{**b, "original_memories": list(p.original_memories)}
            for b, p in zip(point_labels(session, updates), updates, strict=True)]


def update_program(session: Session, points: Sequence[GoldMemory], retrieved: Sequence[Sequence[str]],
                   ctx: RunContext, prompts: JudgePrompts = OWN) -> Program[list[dict[str, Any]]]:
    """One update label per update point of ``points``: whether the memories the system retrieves for it
    (``retrieved``, one list per point, best first: HaluMem's ``memories_from_system``, see
    :mod:`.updates`) hold the new value (Correct), a wrong one (Hallucination), only the earlier one or
    nothing (Omission), or neither. A point with nothing retrieved is an Omission without asking (only the
    ``both`` routing sends one here; ``official`` sends it to the integrity judge, as HaluMem does)."""
    updates = [p for p in points if p.is_update]
    base = update_labels(session, updates)
    requests: list[Request] = []
    asked: list[int] = []
    shown: dict[int, int] = {}
    for k, (point, memories) in enumerate(zip(updates, retrieved, strict=True)):
        if not memories:
            continue
        fields = {"point": point.content, "previous": prompts.listing(point.original_memories)}
        budget = _budget(ctx, "judge_update", {**fields, "memories": ""}, "memories", prompts)
        keep = _choose(_line_sizes(ctx, memories), budget, range(len(memories)))  # best first while they fit
        shown[k] = len(keep)
        asked.append(k)
        requests.append(_request(ctx, "judge_update", {**fields, "memories": prompts.listing(
            [memories[i] for i in keep])}, item=f"update {session.session_id} point {point.index}", prompts=prompts))
    results = (yield requests) if requests else []
    outcome = dict(zip(asked, results, strict=True))
    labels = []
    for k, (b, memories) in enumerate(zip(base, retrieved, strict=True)):
        label = {**b, "memories_from_system": list(memories)}
        if k not in outcome:
            labels.append({**label, "memory_update_type": "Omission", "judge_reply": None, "error": None,
                           "rule": "no memories", "memories_shown": 0})
            continue
        reply, record = _outcome(ctx, outcome[k], "judge_update", prompts)
        labels.append({**label, "memory_update_type": None if reply is None else reply["verdict"], **record,
                       "memories_shown": shown[k]})
    return labels


def accuracy_program(session: Session, points: Sequence[GoldMemory], graph: MemoryGraph | None,
                     ctx: RunContext, prompts: JudgePrompts = OWN) -> Program[list[dict[str, Any]]]:
    """One accuracy label per extracted entry of ``session``, judged against its dialogue and gold points."""
    if graph is None or not graph.nodes:
        return []
    groups = session.turn_groups()
    turns = [prompts.turn(messages, tid) for tid, messages in groups]
    ordinal = {tid: i for i, (tid, _) in enumerate(groups)}
    # interference points are false facts planted in the dialogue: listing them as reference facts would
    # tell the judge that absorbing one is a match with the gold set
    reference = prompts.listing([p.content for p in points if not p.is_interference])
    sizes = [ctx.text_tokens(_ROLE, t) + 1 for t in turns]
    budgets = [_budget(ctx, "judge_accuracy", {"dialogue": "", "reference": reference, "memory": n.text},
                       "dialogue", prompts) for n in graph.nodes]
    order: list[list[int]] | None = None
    if sum(sizes) > min(budgets):
        order = yield from _similarity_order(ctx, turns, [n.text for n in graph.nodes])
    requests: list[Request] = []
    shown = []
    for k, node in enumerate(graph.nodes):
        if order is None:
            keep = list(range(len(turns)))
        else:  # the turns the entry is grounded in go first, then the most similar ones
            grounded = [ordinal[t] for t in node.turn_ids if t in ordinal]
            keep = _choose(sizes, budgets[k], grounded + [i for i in order[k] if i not in grounded])
        shown.append(len(keep))
        requests.append(_request(ctx, "judge_accuracy",
                                 {"dialogue": "\n".join(turns[i] for i in keep), "reference": reference,
                                  "memory": node.text},
                                 item=f"accuracy {session.session_id} entry {node.id}", prompts=prompts))
    results = yield requests
    labels = []
    for node, result, n in zip(graph.nodes, results, shown, strict=True):
        reply, record = _outcome(ctx, result, "judge_accuracy", prompts)
        labels.append({
            "session_id": session.session_id, "entry_id": node.id, "memory": node.text, "origin": node.origin,
            "verification": node.verification,
            "memory_accuracy_score": None if reply is None else reply["score"],
            "is_included_in_golden_memories": None if reply is None else reply["in_reference"],
            **record, "turns_shown": n, "turns_total": len(turns),
        })
    return labels


# ============================================================================================= QA judges
def _qa_base(question: Question, answer: Answer) -> dict[str, Any]:
    return {"question_id": question.question_id, "question_type": question.question_type,
            "question": question.question, "answer": question.answer, "prediction": answer.prediction}


def halumem_qa_judge(question: Question, answer: Answer, ctx: RunContext,
                     prompts: JudgePrompts = OWN) -> Program[dict[str, Any]]:
    """``result_type`` Correct / Hallucination / Omission (``None`` when no answer or no parsable grade)."""
    label = _qa_base(question, answer)
    if answer.abstained is not None:  # HaluMem's rule: a refusal omits an answerable question's answer and
        # is right about a question on what was never said (Memory Boundary)
        return {**label, "result_type": "Correct" if question.abstention else "Omission", "judge_reply": None,
                "error": None, "abstained": answer.abstained}
    if answer.prediction is None:
        return {**label, "result_type": None, "judge_reply": None, "error": answer.error}
    evidence = [e.get("memory_content", str(e)) if isinstance(e, dict) else str(e) for e in question.evidence]
    fields = {"question": question.question, "reference": question.answer or "",
              "evidence": prompts.listing(evidence), "answer": answer.prediction}
    (result,) = yield [_request(ctx, "judge_halumem_qa", fields, item=f"qa {question.question_id}", prompts=prompts)]
    reply, record = _outcome(ctx, result, "judge_halumem_qa", prompts)
    return {**label, "result_type": None if reply is None else reply["verdict"], **record}


def locomo_qa_judge(question: Question, answer: Answer, ctx: RunContext) -> Program[dict[str, Any]]:
    """``llm_correct`` (the LLM judge) and ``f1`` (LoCoMo's own token F1 by category) for one question."""
    prediction = QA_NOT_FOUND if answer.abstained is not None else answer.prediction or ""
    category = question.category if question.category is not None else 4
    label = {**_qa_base(question, answer), "category": category, "prediction": prediction,
             "f1": metrics.locomo_score(prediction, question.answer, category)}
    if answer.prediction is None and answer.abstained is None:
        return {**label, "llm_correct": None, "judge_reply": None, "error": answer.error}
    reference = question.answer if question.answer is not None else (
        "Not mentioned: the question assumes something the conversation never says.")
    fields = {"question": question.question, "reference": reference, "answer": prediction}
    (result,) = yield [_request(ctx, "judge_locomo", fields, item=f"qa {question.question_id}")]
    reply, record = _outcome(ctx, result, "judge_locomo")
    return {**label, "llm_correct": None if reply is None else reply["verdict"] == "CORRECT", **record}


def longmemeval_template(question: Question) -> str:
    """The grading prompt for a LongMemEval question: abstention first, then the type's own rule."""
    if question.abstention:
        return "judge_lme_abstention"
    return LME_TEMPLATE_OF_TYPE.get(question.question_type, "judge_lme")


def longmemeval_qa_judge(question: Question, answer: Answer, ctx: RunContext) -> Program[dict[str, Any]]:
    """``label`` True/False. A missing answer or an unparsable grade counts as False (recorded in ``error``),
    as LongMemEval's own scoring counts any reply without "yes"."""
    name = longmemeval_template(question)
    label = {**_qa_base(question, answer), "template": name}
    if answer.prediction is None and answer.abstained is None:
        return {**label, "label": False, "judge_reply": None, "error": answer.error}
    said = QA_NOT_FOUND if answer.abstained is not None else answer.prediction
    fields = {"question": question.question, "reference": question.answer or "", "answer": said}
    (result,) = yield [_request(ctx, name, fields, item=f"qa {question.question_id}")]
    reply, record = _outcome(ctx, result, name)
    return {**label, "label": False if reply is None else reply["verdict"] == "yes", **record}


def unjudged_qa_label(kind: str, question: Question, error: str) -> dict[str, Any]:
    """The label of a question whose answering or judging crashed: invalid for HaluMem and the LoCoMo judge
    (F1 of an empty answer), wrong for LongMemEval, with the error kept."""
    base = {"question_id": question.question_id, "question_type": question.question_type,
            "question": question.question, "answer": question.answer, "prediction": None,
            "judge_reply": None, "error": error}
    if kind == "halumem":
        return {**base, "result_type": None}
    if kind == "locomo":
        category = question.category if question.category is not None else 4
        return {**base, "prediction": "", "category": category, "llm_correct": None,
                "f1": metrics.locomo_score("", question.answer, category)}
    return {**base, "template": longmemeval_template(question), "label": False}


QA_JUDGES = {"halumem": halumem_qa_judge, "locomo": locomo_qa_judge, "longmemeval": longmemeval_qa_judge}
"""Benchmark kind → its QA judge program."""


# ============================================================================================= aggregation

def aggregate_halumem(integrity: Sequence[dict[str, Any]], accuracy: Sequence[dict[str, Any]],
                      qa: Sequence[dict[str, Any]], update: Sequence[dict[str, Any]] = (),
                      update_routing: str = "official") -> dict[str, Any]:
    """HaluMem's numbers from the labels: extraction (None when nothing was extracted, i.e. NativeRAG), with
    its update ratios and type-wise accuracy, and QA; plus, per judge, the records without a usable grade
    (``unscored``) and a warning for each judge past :data:`~.metrics.UNSCORED_WARN_SHARE` (also logged).

    The type-wise accuracy counts each point once, as HaluMem does: with ``update_routing="both"`` the
    update points' integrity labels are left out of it (their update label counts).
    """
    if update_routing not in UPDATE_ROUTINGS:
        raise ValueError(f"unknown update routing {update_routing!r}; choose one of: {', '.join(UPDATE_ROUTINGS)}")
    qa_scores = metrics.halumem_qa(qa)
    extraction = None
    memory: dict[str, Any] = dict.fromkeys(
        ("memory_integrity", "memory_accuracy", "memory_f1", "false_memory_resistance"))
    if integrity or accuracy:
        extraction = metrics.halumem_extraction(integrity, accuracy)
        extraction["update"] = metrics.halumem_update(update)
        typed = integrity if update_routing == "official" else [i for i in integrity if not i.get("is_update")]
        extraction["memory_type_accuracy"] = metrics.halumem_memory_type_accuracy(typed, update)
        memory = {key: extraction[key] for key in ("memory_integrity", "memory_accuracy", "memory_f1")}
        memory["false_memory_resistance"] = extraction["integrity"]["false_memory_resistance"]
    unscored = metrics.halumem_unscored(integrity=integrity, accuracy=accuracy, update=update, qa=qa)
    warnings = _logged_warnings(unscored)
    flags = sum(isinstance(a.get("is_included_in_golden_memories"), bool) for a in accuracy)
    if flags:
        warnings.append(f"accuracy judge: {flags} of {len(accuracy)} records give is_included_in_golden_memories "
                        'as a JSON boolean; HaluMem\'s evaluation counts only "true" or "True" as in the gold set, '
                        "and so does this one")
        log.warning("%s", warnings[-1])
    return {
        "headline": {
            **memory,
            "qa_accuracy": qa_scores["correct"],
            "qa_hallucination": qa_scores["hallucination"],
            "qa_omission": qa_scores["omission"],
        },
        "extraction": extraction,
        "qa": qa_scores,
        "update_routing": update_routing,
        "unscored": unscored,
        "warnings": warnings,
    }


def _judge_accuracy(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Share of rows the LLM judge marked correct; a missing or unparsable grade (anything but true/false)
    counts as wrong (``n_valid`` says how many parsed)."""
    valid = [r["llm_correct"] for r in rows if isinstance(r.get("llm_correct"), bool)]
    return {"n": len(rows), "n_valid": len(valid),
            "accuracy": sum(valid) / len(rows) if rows else None}


def aggregate_locomo(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """LLM-judge accuracy and token F1, overall (categories 1–4, and all five) and per category, with the
    questions the judge gave no grade (``unscored``; a warning past :data:`~.metrics.UNSCORED_WARN_SHARE`)."""
    main = [r for r in rows if r["category"] in LOCOMO_MAIN_CATEGORIES]
    by_category: dict[str, Any] = {}
    for category, name in LOCOMO_CATEGORIES.items():
        part = [r for r in rows if r["category"] == category]
        if part:
            by_category[name] = {"category": category, **_judge_accuracy(part)}
    f1_main = metrics.locomo_scores(rows, overall_categories=LOCOMO_MAIN_CATEGORIES)
    f1_all = metrics.locomo_scores(rows)
    for name, entry in f1_all["by_category"].items():
        by_category[name]["f1"] = entry["mean"]
    unscored, warnings = _unscored_qa([r.get("llm_correct") for r in rows], lambda v: isinstance(v, bool))
    return {
        "headline": {"llm_accuracy": _judge_accuracy(main)["accuracy"], "f1": f1_main["overall"],
                     "llm_accuracy_all": _judge_accuracy(rows)["accuracy"], "f1_all": f1_all["overall"]},
        "llm_judge": _judge_accuracy(main),
        "llm_judge_all": _judge_accuracy(rows),
        "f1": f1_main,
        "f1_all": f1_all,
        "by_category": by_category,
        "unscored": unscored,
        "warnings": warnings,
    }


def _unscored_qa(grades: list[Any], usable: Callable[[Any], bool]) -> tuple[dict[str, Any], list[str]]:
    """The QA judge's unscored records and the warning they call for (logged)."""
    unscored = {"qa": metrics.unscored(grades, usable)}
    return unscored, _logged_warnings(unscored)


def _logged_warnings(unscored: dict[str, Any]) -> list[str]:
    """The warnings an unscored table calls for, also logged: a run's log shows them without the report."""
    warnings = metrics.unscored_warnings(unscored)
    for warning in warnings:
        log.warning("%s", warning)
    return warnings


def aggregate_longmemeval(labels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """LongMemEval accuracy overall, averaged over types, per type and on abstention questions, with the
    questions the judge gave no grade (``unscored``: a failed judge call, which scores as "no")."""
    scores = metrics.longmemeval_scores(labels)
    grades = [None if row.get("error") else row.get("label", (row.get("autoeval_label") or {}).get("label"))
              for row in labels]
    unscored, warnings = _unscored_qa(grades, lambda v: isinstance(v, (bool, int, str)))
    return {"headline": {"accuracy": scores["overall"], "task_average": scores["task_average"],
                         "abstention": scores["abstention"]["accuracy"]},
            **scores, "unscored": unscored, "warnings": warnings}
