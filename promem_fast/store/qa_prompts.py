"""The answerer's prompts: a question about a user answered from retrieved memories or dialogue excerpts.

They belong to the store, which answers questions (:meth:`~promem_fast.store.MemoryStore.answer`);
evaluation asks through the same prompts and adds its graders (:mod:`promem_fast.eval.prompts`). Both are
sent with role ``qa``. The wording is ours.
"""

from __future__ import annotations

from typing import Any

from promem_fast.backends.base import Message
from promem_fast.prompts import Template

QA_NOT_FOUND = "Not mentioned"
"""What the answerer is told to say when its context lacks the answer. It contains LoCoMo's abstention phrase
("not mentioned"), so adversarial LoCoMo questions score by LoCoMo's own rule, and the QA judges read it as
a refusal (HaluMem omission, LongMemEval abstention). The answer program turns it into an abstention
(``answer`` null, ``abstained`` saying why), as it does when no memory reaches the relevance floor."""

_ANSWER_RULES = (
    "Dates in brackets tell when each conversation took place: use them to place events in time relative to "
    "when the question is asked, and when facts changed over time, the most recent one holds. A question in "
    "the first person is asked by {user}. Answer in a few words, not a sentence. If the text does not contain "
    f"the answer, do not guess from what people usually do: answer exactly: {QA_NOT_FOUND}."
)

_QA_REPLY = 'Reply with a JSON object whose "answer" holds your answer in a few words.'

QA_TEMPLATES: dict[str, Template] = {
    "qa_memory": Template(
        system=(
            "Memory question task: answer a question about {user} from memories kept from earlier "
            "conversations. Each memory is one fact; some list the details anchored to it and its links to "
            "other memories. " + _ANSWER_RULES
        ),
        user="Memories:\n{memories}\n\nThe question is asked on {question_time}.\nQuestion: {question}\n\n"
             + _QA_REPLY,
    ),
    "qa_dialogue": Template(
        system=(
            "Excerpt question task: answer a question about {user} from excerpts of earlier conversations. "
            "Each excerpt is one exchange, in the words of the speakers. " + _ANSWER_RULES
        ),
        user="Excerpts:\n{excerpts}\n\nThe question is asked on {question_time}.\nQuestion: {question}\n\n"
             + _QA_REPLY,
    ),
}
"""``qa_memory`` answers from memory entries, ``qa_dialogue`` from raw turns (the NativeRAG baseline)."""


def render_qa(name: str, **fields: Any) -> tuple[Message, ...]:
    """The chat messages of answering template ``name`` with ``fields`` filled in."""
    return QA_TEMPLATES[name].render(**fields)


def qa_schema(name: str) -> dict[str, Any]:
    """The JSON schema of an answer: free text of at least one character."""
    if name not in QA_TEMPLATES:
        raise KeyError(f"no answering template {name!r}")
    return {"type": "object", "properties": {"answer": {"type": "string", "minLength": 1}}, "required": ["answer"]}
