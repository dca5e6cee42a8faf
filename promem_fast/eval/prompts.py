"""Prompt templates of evaluation: the store's answering prompts (role ``qa``) and the graders (role ``judge``).

They use the engine's :class:`~promem_fast.prompts.Template`, so every prompt starts with the shared
preamble and the text a batch of calls has in common (the task, then the memories or the dialogue) comes
before the per-call item: the integrity and update judges of one session repeat the same memory list for
each gold point, the accuracy judge the same dialogue for every entry, and prefix caching serves the repeats.

Template names (the keys of :data:`EVAL_TEMPLATES`) are finer than roles: all graders are sent with role
``judge`` and both answerers with role ``qa`` (so ``EngineConfig.roles`` and ``pipeline.max_tokens`` apply per
role), while the name tells a scripted backend which prompt it is looking at. The wording is ours.
"""

from __future__ import annotations

from typing import Any

from promem_fast.backends.base import Message
from promem_fast.prompts import Template
from promem_fast.store.qa_prompts import QA_NOT_FOUND, QA_TEMPLATES, qa_schema

__all__ = ["EVAL_TEMPLATES", "LME_TEMPLATE_OF_TYPE", "QA_NOT_FOUND", "eval_schema", "render_eval"]

_LME_USER = (
    "Question: {question}\nCorrect answer: {reference}\nAnswer to check: {answer}\n\n"
    'Reply as {{"verdict": "yes" or "no"}}.'
)

_LME_BASE = (
    "Grading task: decide whether a chat assistant's answer to a question about the user's past is right. "
    "Say yes when the answer gives the correct answer or something equivalent, even with extra context; say "
    "no when it is wrong, misses the point, or gives only part of what is asked."
)

EVAL_TEMPLATES: dict[str, Template] = {
    **QA_TEMPLATES,
    "judge_integrity": Template(
        system=(
            "Recall grading task: a memory system read a conversation and wrote down memories. Decide how "
            "well those memories capture one reference fact from the same conversation. Score 2 when the "
            "memories state the whole fact (wording may differ), 1 when they state only part of it or only "
            "vaguely, 0 when it is absent or contradicted."
        ),
        user='Extracted memories:\n{memories}\n\nReference fact: {point}\n\nReply as {{"score": 2, 1 or 0}}.',
    ),
    "judge_accuracy": Template(
        system=(
            "Faithfulness grading task: a memory system wrote one memory from a conversation. Check it against "
            "the dialogue. Score 2 when all it says is supported by the dialogue, 1 when its core is supported "
            "but a detail is wrong or invented, 0 when it is unsupported or contradicted. Also say whether it "
            "carries the same information as one of the reference facts annotated for the conversation."
        ),
        user=(
            "Dialogue:\n{dialogue}\n\nReference facts:\n{reference}\n\nMemory to grade: {memory}\n\n"
            'Reply as {{"score": 2, 1 or 0, "in_reference": true or false}}.'
        ),
    ),
    "judge_update": Template(
        system=(
            "Update grading task: during a conversation a fact about the user changed, and a memory system "
            "wrote down memories from it. Decide whether those memories record the change. Correct: they state "
            "the updated fact (wording may differ; the earlier value may appear too, as long as the new one is "
            "given as the current one). Hallucination: they give a value for it that is neither the updated "
            "nor the earlier one, or get the change wrong. Omission: the updated fact is absent, for instance "
            "only the earlier value is kept. Other: none of these fits."
        ),
        user=(
            "Extracted memories:\n{memories}\n\nEarlier information:\n{previous}\n\nUpdated fact: {point}\n\n"
            'Reply as {{"verdict": "Correct", "Hallucination", "Omission" or "Other"}}.'
        ),
    ),
    "judge_halumem_qa": Template(
        system=(
            "Answer grading task: grade a memory assistant's answer to a question about a user, given the "
            "reference answer and the facts it rests on. Correct: the answer gives the information of the "
            "reference answer (other wording or extra harmless context is fine) and nothing conflicting. "
            "Hallucination: it states something wrong, conflicting with the reference, or not backed by the "
            "facts. Omission: it says it does not know or leaves out the key information, without stating "
            "anything false. When the reference says the information was never given, saying so is Correct "
            "and an invented answer is a Hallucination."
        ),
        user=(
            "Question: {question}\nReference answer: {reference}\nSupporting facts:\n{evidence}\n\n"
            'Answer to grade: {answer}\n\nReply as {{"verdict": "Correct", "Hallucination" or "Omission"}}.'
        ),
    ),
    "judge_locomo": Template(
        system=(
            "Open answer grading task: compare an answer to a question about a long conversation with the gold "
            "answer. Be generous about form: the answer is CORRECT when it refers to the same thing as the "
            "gold answer, even if it is longer or worded differently, and a date is correct when it names the "
            "same day, month or year as the gold in any format. It is WRONG when it names something else, "
            "adds a conflicting claim, or does not answer."
        ),
        user=(
            "Question: {question}\nGold answer: {reference}\nAnswer to grade: {answer}\n\n"
            'Reply as {{"verdict": "CORRECT" or "WRONG"}}.'
        ),
    ),
    "judge_lme": Template(system=_LME_BASE, user=_LME_USER),
    "judge_lme_temporal": Template(
        system=_LME_BASE + " This is a question about time: for a number of days, weeks or months, an answer "
                           "that is off by one from the correct number still counts as right.",
        user=_LME_USER,
    ),
    "judge_lme_update": Template(
        system=_LME_BASE + " The user's information changed over time and the correct answer is the latest "
                           "value: an answer that also mentions earlier values is right as long as it gives "
                           "the updated one as the current answer.",
        user=_LME_USER,
    ),
    "judge_lme_preference": Template(
        system=(
            "Personalisation grading task: the correct answer below is a rubric of what a good reply to the "
            "user's request does. Say yes when the assistant's answer draws on the user's own stated "
            "preferences or circumstances as the rubric describes (it need not cover every point); say no "
            "when it is generic or ignores them."
        ),
        user=_LME_USER,
    ),
    "judge_lme_abstention": Template(
        system=(
            "Abstention grading task: the question cannot be answered from the user's conversation history "
            "(the correct answer explains why). Say yes when the assistant's answer says the information is "
            "not available or unknown, or points out the false premise; say no when it tries to answer."
        ),
        user=_LME_USER,
    ),
}
"""Every evaluation prompt by name. :func:`promem_fast.testing.llm_scripted.parse_rendered` looks them up next
to the extraction templates, so the scripted backend answers them with :data:`promem_fast.testing.eval_rules.EVAL_RULES`
(same keys). The two answering prompts are the store's (:mod:`promem_fast.store.qa_prompts`)."""

LME_TEMPLATE_OF_TYPE: dict[str, str] = {
    "temporal-reasoning": "judge_lme_temporal",
    "knowledge-update": "judge_lme_update",
    "single-session-preference": "judge_lme_preference",
}
"""LongMemEval question type → its grading prompt (other types use ``judge_lme``; abstention questions,
whatever their type, use ``judge_lme_abstention``), the type-specific rules LongMemEval's judge applies."""


def render_eval(name: str, **fields: Any) -> tuple[Message, ...]:
    """The chat messages of evaluation template ``name`` with ``fields`` filled in."""
    return EVAL_TEMPLATES[name].render(**fields)


def eval_schema(name: str) -> dict[str, Any]:
    """The JSON schema of the reply to template ``name`` (answers are free text; grades are closed sets)."""
    if name in QA_TEMPLATES:
        return qa_schema(name)
    score = {"type": "integer", "minimum": 0, "maximum": 2}
    if name == "judge_integrity":
        return {"type": "object", "properties": {"score": score}, "required": ["score"]}
    if name == "judge_accuracy":
        return {"type": "object", "properties": {"score": score, "in_reference": {"type": "boolean"}},
                "required": ["score", "in_reference"]}
    if name == "judge_update":
        return _verdict(["Correct", "Hallucination", "Omission", "Other"])
    if name == "judge_halumem_qa":
        return _verdict(["Correct", "Hallucination", "Omission"])
    if name == "judge_locomo":
        return _verdict(["CORRECT", "WRONG"])
    if name.startswith("judge_lme"):
        return _verdict(["yes", "no"])
    raise KeyError(f"no evaluation template {name!r}")


def _verdict(labels: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": {"verdict": {"type": "string", "enum": labels}},
            "required": ["verdict"]}
