"""One prompt template per role, each with the JSON schema of its answer.

The wording is ours. Every template puts the text that a session's calls share first (the system text,
then the dialogue or the entry list) and the per-call item last, so prefix caching (vLLM, llama.cpp)
reuses the shared part. Schemas bound every list with ``maxItems`` so a reply can never run away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promem_fast.backends.base import Message

PREAMBLE = (
    "You help build a long-term memory of what a person shared in conversations. "
    "Work only from the text you are given, never add outside knowledge, and answer with JSON only."
)


@dataclass(frozen=True)
class Template:
    system: str
    user: str

    def render(self, **fields: Any) -> tuple[Message, ...]:
        return (
            {"role": "system", "content": f"{PREAMBLE}\n\n{self.system.format(**fields)}"},
            {"role": "user", "content": self.user.format(**fields)},
        )


TEMPLATES: dict[str, Template] = {
    "detail": Template(
        system=(
            "Task: list the small concrete details stated in one dialogue turn: names of people and "
            "organisations, dates and times, places, quantities and prices, named objects, preferences. "
            "Each detail is a short fragment, not a sentence about the whole conversation. "
            "Skip greetings and anything that carries no concrete fact."
        ),
        user='Dialogue turn:\n{turn}\n\nReply with a JSON object whose "details" list holds one short fragment per detail.',
    ),
    "event": Template(
        system=(
            "Task: read a group of dialogue turns that share one topic and state the main events, "
            "situations or plans of {user} that they reveal. Each event is one standalone sentence in the "
            "third person that names {user}; keep dates or places only when they define the event."
        ),
        user=('Turns on one topic:\n{segment}\n\nReply with a JSON object whose "events" list holds one sentence per '
              'event, each starting with "{user}".'),
    ),
    "relation": Template(
        system=(
            "Task: given numbered events from one person's conversation, find pairs that are linked: one "
            "caused or enabled the other, one happened before the other, one is the motive for the other, "
            "one depends on the other, or they contrast. Only propose links the events clearly support; "
            "leave unrelated events unlinked."
        ),
        user=(
            "Events:\n{events}\n\nAllowed relation types: {relation_types}.\n"
            'Reply as {{"relations": [{{"source": event number, "relation": type, "target": event number}}, ...]}}.'
        ),
    ),
    "draft": Template(
        system=(
            "Task: write down every fact the dialogue reveals about {user}: actions, states, plans, "
            "opinions, preferences, relationships and personal data. Resolve pronouns and references so "
            "each fact stands on its own, and use the name {user} as the subject of every fact. "
            "Ignore small talk. Be exhaustive."
        ),
        user=('Dialogue:\n{dialogue}\n\nReply with a JSON object whose "facts" list holds one short sentence per '
              'fact, each starting with "{user}".'),
    ),
    "decompose": Template(
        system=(
            "Task: split one memory statement about {user} into atomic facts. An atomic fact carries exactly "
            "one piece of information (one action, one time, one place, one attribute) and is a full "
            "sentence with its subject. Only split; do not add, infer or reword meaning."
        ),
        user='Statement: {entry}\n\nReply with a JSON object whose "facts" list holds one sentence per atomic fact.',
    ),
    "adjudicate": Template(
        system=(
            "Task: an automatic checker could not confirm a fact against the dialogue turn it was taken "
            "from. Decide: REVISE when the turn supports the core of the fact but a detail is off (a date, "
            "a name, an amount), and give the corrected fact in the turn's terms; DISCARD when the turn "
            "does not support it at all."
        ),
        user=(
            "Dialogue turn:\n{turn}\n\nFact: {fact}\n\n"
            'Reply as {{"action": "REVISE" or "DISCARD", "revised_fact": corrected sentence or null}}.'
        ),
    ),
    "nli": Template(
        system=(
            "Task: textual entailment. Say whether the hypothesis follows from the premise alone "
            "(entailment), is contradicted by it (contradiction), or neither (neutral)."
        ),
        user='Premise:\n{premise}\n\nHypothesis: {hypothesis}\n\nReply as {{"label": "entailment" | "neutral" | "contradiction"}}.',
    ),
    "probe": Template(
        system=(
            "Task: two memory entries of {user} may be linked by a relation. Write one specific question "
            "whose answer is exactly that link, so someone can check whether the link is known."
        ),
        user=(
            "Entry A: {source}\nEntry B: {target}\nProposed relation: A is {relation} for/with B.\n\n"
            'Reply with a JSON object whose "question" holds the question.'
        ),
    ),
    "answer_flat": Template(
        system=(
            "Task: decide whether a question can be answered from a list of memory entries alone, without "
            "guessing. It is answerable only when the entries state the answer, not when they merely "
            "mention the same things."
        ),
        user=(
            "Memory entries:\n{entries}\n\nQuestion: {question}\n\n"
            'Reply as {{"answerable": true or false, "answer": short answer or null}}.'
        ),
    ),
    "verify_relation": Template(
        system=(
            "Task: check against the dialogue whether a proposed link between two facts about {user} is "
            "actually supported by what was said."
        ),
        user=(
            "Dialogue:\n{dialogue}\n\nFact A: {source}\nFact B: {target}\nProposed link: A is {relation} "
            'for/with B.\nQuestion about the link: {question}\n\nReply as {{"supported": true or false}}.'
        ),
    ),
}


def render(role: str, **fields: Any) -> tuple[Message, ...]:
    """The chat messages of ``role`` with ``fields`` filled in."""
    return TEMPLATES[role].render(**fields)


def _string_list(key: str, max_items: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": max_items}},
        "required": [key],
    }


def schema_for(role: str, *, max_items: int = 24, n_events: int = 0,
               relation_types: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON schema of ``role``'s answer; relation schemas bound event numbers to ``n_events``."""
    if role == "detail":
        return _string_list("details", max_items)
    if role == "event":
        return _string_list("events", max_items)
    if role in ("draft", "decompose"):
        return _string_list("facts", max_items)
    if role == "relation":
        index = {"type": "integer", "minimum": 0, "maximum": max(n_events - 1, 0)}
        return {
            "type": "object",
            "properties": {"relations": {
                "type": "array", "maxItems": max_items,
                "items": {
                    "type": "object",
                    "properties": {"source": index, "relation": {"type": "string", "enum": list(relation_types)},
                                   "target": index},
                    "required": ["source", "relation", "target"],
                },
            }},
            "required": ["relations"],
        }
    if role == "adjudicate":
        return {
            "type": "object",
            "properties": {"action": {"type": "string", "enum": ["REVISE", "DISCARD"]},
                           "revised_fact": {"type": ["string", "null"]}},
            "required": ["action"],
        }
    if role == "nli":
        return {"type": "object", "properties": {"label": {"type": "string",
                "enum": ["entailment", "neutral", "contradiction"]}}, "required": ["label"]}
    if role == "probe":
        return {"type": "object", "properties": {"question": {"type": "string", "minLength": 3}},
                "required": ["question"]}
    if role == "answer_flat":
        return {"type": "object", "properties": {"answerable": {"type": "boolean"},
                "answer": {"type": ["string", "null"]}}, "required": ["answerable"]}
    if role == "verify_relation":
        return {"type": "object", "properties": {"supported": {"type": "boolean"}}, "required": ["supported"]}
    raise KeyError(f"no schema for role {role!r}")


# ------------------------------------------------------------------------------------------ text views
def format_turn(messages: Sequence[Any], turn_id: Any | None = None) -> str:
    """A turn as ``[turn 3] user: ...`` lines (``messages`` are :class:`~promem_fast.types.Turn`)."""
    prefix = f"[turn {turn_id}] " if turn_id is not None else ""
    return "\n".join(f"{prefix}{m.role}: {m.text}" for m in messages)


def numbered(items: Sequence[str]) -> str:
    return "\n".join(f"{i}. {text}" for i, text in enumerate(items))
