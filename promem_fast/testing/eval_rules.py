"""Deterministic replies to the evaluation prompts, for the ``scripted`` profile (tests and dry runs).

:data:`EVAL_RULES` maps each evaluation template name (:data:`promem_fast.eval.prompts.EVAL_TEMPLATES`) to
a function of the prompt's fields, the same contract as the scripted backend's extraction rules, so an
end-to-end evaluation runs with no model and gives the same numbers every time. The rules are crude word
overlap, meant to exercise every branch (correct, hallucinated, omitted, abstained), not to grade well.

Nothing here imports a backend or the engine (only the text helpers and the answerer's refusal phrase).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from promem_fast.pipeline.words import content_set

from promem_fast.store.qa_prompts import QA_NOT_FOUND
from promem_fast.testing.overlap import coverage

Rule = Callable[[dict[str, str]], Any]

_DATE_PREFIX = re.compile(r"^\[[^\]]*\]\s*")
_LIST_PREFIX = re.compile(r"^\d+\.\s*")
_REFUSALS = ("not mentioned", "don't know", "do not know", "no information", "not available")


def _best_coverage(text: str, lines: str) -> float:
    """The best :func:`~.overlap.coverage` of ``text`` by any single line of ``lines``."""
    return max((coverage(text, line) for line in lines.splitlines() if line.strip()), default=0.0)


def _refuses(text: str) -> bool:
    low = text.lower()
    return any(phrase in low for phrase in _REFUSALS)


def _answer(context: str, question: str) -> dict[str, str]:
    """The context line sharing most content words (at least two) with the question, as its main text
    (no date, details or links); the refusal when no line shares two, so abstention is exercised too."""
    asked = content_set(question)
    best, best_overlap = "", 1
    for line in context.splitlines():
        text = _DATE_PREFIX.sub("", line).split(" | ", 1)[0].strip()
        overlap = len(asked & content_set(text))
        if overlap > best_overlap:
            best, best_overlap = text, overlap
    return {"answer": best or QA_NOT_FOUND}


def _qa_memory(fields: dict[str, str]) -> dict[str, str]:
    return _answer(fields["memories"], fields["question"])


def _qa_dialogue(fields: dict[str, str]) -> dict[str, str]:
    return _answer(fields["excerpts"], fields["question"])


def _grade(share: float) -> int:
    return 2 if share >= 0.75 else 1 if share >= 0.4 else 0


def _unnumbered(lines: str) -> list[str]:
    """The lines of a numbered list without their numbers (which would count as content words)."""
    return [_LIST_PREFIX.sub("", line) for line in lines.splitlines()]


def _integrity(fields: dict[str, str]) -> dict[str, int]:
    return {"score": _grade(_best_coverage(fields["point"], "\n".join(_unnumbered(fields["memories"]))))}


def _accuracy(fields: dict[str, str]) -> dict[str, Any]:
    memory = fields["memory"]
    return {"score": _grade(coverage(memory, fields["dialogue"])),
            "in_reference": _best_coverage(memory, fields["reference"]) >= 0.5}


def _update(fields: dict[str, str]) -> dict[str, str]:
    """Correct when one memory holds at least two of the words the update adds to the earlier information
    (all of them when it adds fewer), else Omission: the new value was recorded or it was not."""
    added = content_set(fields["point"]) - content_set("\n".join(_unnumbered(fields["previous"])))
    memories = [content_set(line) for line in _unnumbered(fields["memories"])]
    held = max((len(added & memory) for memory in memories), default=0)
    return {"verdict": "Correct" if added and held >= min(2, len(added)) else "Omission"}


def _matches(answer: str, reference: str) -> bool:
    return coverage(reference, answer) >= 0.5


def _halumem_qa(fields: dict[str, str]) -> dict[str, str]:
    answer, reference = fields["answer"], fields["reference"]
    if _refuses(reference):
        return {"verdict": "Correct" if _refuses(answer) else "Hallucination"}
    if _matches(answer, reference):
        return {"verdict": "Correct"}
    return {"verdict": "Omission" if _refuses(answer) else "Hallucination"}


def _locomo(fields: dict[str, str]) -> dict[str, str]:
    answer, reference = fields["answer"], fields["reference"]
    if _refuses(reference):
        return {"verdict": "CORRECT" if _refuses(answer) else "WRONG"}
    return {"verdict": "CORRECT" if _matches(answer, reference) and not _refuses(answer) else "WRONG"}


def _lme(fields: dict[str, str]) -> dict[str, str]:
    answer = fields["answer"]
    return {"verdict": "yes" if _matches(answer, fields["reference"]) and not _refuses(answer) else "no"}


def _lme_abstention(fields: dict[str, str]) -> dict[str, str]:
    return {"verdict": "yes" if _refuses(fields["answer"]) else "no"}


EVAL_RULES: dict[str, Rule] = {
    "qa_memory": _qa_memory,
    "qa_dialogue": _qa_dialogue,
    "judge_integrity": _integrity,
    "judge_accuracy": _accuracy,
    "judge_update": _update,
    "judge_halumem_qa": _halumem_qa,
    "judge_locomo": _locomo,
    "judge_lme": _lme,
    "judge_lme_temporal": _lme,
    "judge_lme_update": _lme,
    "judge_lme_preference": _lme,
    "judge_lme_abstention": _lme_abstention,
}
"""Template name → deterministic reply, one entry per evaluation template."""
