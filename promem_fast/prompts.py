"""One prompt template per role, each with the JSON schema of its answer.

The wording is ours. Every extraction prompt names the memory owner and the session date and asks for
calendar dates instead of relative ones. The event, draft, relation, decomposition and adjudication prompts
carry one short example of their answer; the detail prompt does not: with SmolLM2-135M its example made 4
of 12 first replies fail (the model listed the example's details) against 0 of 12 without. Every template
puts the text that a session's calls share first (the system text, then the dialogue or the entry list)
and the per-call item last, so prefix caching (vLLM, llama.cpp) reuses the shared part. Schemas bound every
list with ``maxItems`` so a reply can never run away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promem_fast.types import Message

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


WHO = (
    "The memory owner is {user}: in the dialogue, lines marked \"{user}:\" are {user}'s own words, so \"I\", "
    "\"me\" and \"my\" there mean {user}."
)
"""Said in every extraction prompt, so "I" resolves to the owner rather than to whoever the model guesses."""

WHEN = (
    "The session took place on {when}. Write every date as a calendar date: turn relative times such as "
    "\"yesterday\", \"tomorrow\", \"last week\" or \"in two days\" into dates counted from the session date "
    "(or from the date shown on a turn)."
)
"""Said in every extraction prompt that writes facts, so "tomorrow" is stored as the day it meant."""

MORE = "\n\nAlready listed (do not repeat these; list only what is still missing, or nothing):\n{listed}"
"""The tail of a continuation: the same prompt again, with the items a capped reply already gave."""

RELATION_MEANINGS: dict[str, str] = {
    "causal": "source leads to target",
    "temporal": "source happens before target",
    "motivational": "source is the reason for target",
    "conditional": "target depends on source",
    "contrastive": "source and target contrast",
}
"""The direction of each relation type, stated in the relation, probe and verification prompts."""

TEMPLATES: dict[str, Template] = {
    "detail": Template(
        system=(
            "Task: list the small concrete details stated in one dialogue turn: names of people and "
            "organisations, dates and times, places, quantities and prices, named objects, preferences. "
            "Each detail is a short fragment, not a sentence about the whole conversation. "
            f"Skip greetings and anything that carries no concrete fact. {WHO} {WHEN}"
        ),
        user=('Dialogue turn:\n{turn}\n\nReply with a JSON object whose "details" list holds one short fragment '
              'per detail.{more}'),
    ),
    "event": Template(
        system=(
            "Task: read a group of dialogue turns that share one topic and state the main events, "
            "situations or plans of {user} that they reveal. Each event is one standalone sentence in the "
            f"third person that names {{user}}; keep dates or places when they define the event. {WHO} {WHEN}\n"
            'Example: on 2024-05-06, "Tom: I start my new job at the bakery next Monday" gives the event '
            '"Tom starts a new job at the bakery on 2024-05-13."'
        ),
        user=('Turns on one topic:\n{segment}\n\nReply with a JSON object whose "events" list holds one sentence '
              'per event, each starting with "{user}".{more}'),
    ),
    "relation": Template(
        system=(
            "Task: given numbered events from one person's conversation, find ordered pairs (source, "
            "target) that are linked by one of the allowed relation types. Only propose links the events "
            "clearly support; leave unrelated events unlinked.\n"
            'Example: with events "0. Tom hurt his knee." and "1. Tom stopped running.", the link is '
            '{{"source": 0, "relation": "causal", "target": 1}}.'
        ),
        user=(
            "Events:\n{events}\n\nAllowed relation types:\n{relation_types}\n"
            'Reply as {{"relations": [{{"source": event number, "relation": type, "target": event number}}, ...]}}.'
        ),
    ),
    "draft": Template(
        system=(
            "Task: write down every fact the dialogue reveals about {user}: actions, states, plans, "
            "opinions, preferences, relationships and personal data. Resolve pronouns and references so "
            "each fact stands on its own, and use the name {user} as the subject of every fact. "
            f"Ignore small talk. Be exhaustive. {WHO} {WHEN}\n"
            'Example: on 2024-05-06, "Tom: My sister Lea visited me yesterday, she loves sushi" gives the '
            'facts ["Tom\'s sister is called Lea.", "Lea visited Tom on 2024-05-05.", "Lea loves sushi."].'
        ),
        user=('Dialogue:\n{dialogue}\n\nReply with a JSON object whose "facts" list holds one short sentence per '
              'fact, each starting with "{user}" or naming {user}.{more}'),
    ),
    "decompose": Template(
        system=(
            "Task: split one memory statement about {user} into atomic facts. An atomic fact carries exactly "
            "one piece of information (one action, one time, one place, one attribute) and is a full "
            "sentence with its subject. Only split; do not add, infer or reword meaning.\n"
            'Example: "Tom moved to Porto in 2023 for a nursing job." splits into ["Tom moved to Porto.", '
            '"Tom moved in 2023.", "Tom moved for a nursing job."].'
        ),
        user='Statement: {entry}\n\nReply with a JSON object whose "facts" list holds one sentence per atomic fact.',
    ),
    "adjudicate": Template(
        system=(
            "Task: an automatic checker could not confirm a fact about {user} against the dialogue turn it "
            "was taken from. Decide: REVISE when the turn supports the core of the fact but a detail is off "
            "(a date, a name, an amount), and give the corrected fact in the turn's terms with {user} as its "
            f"subject; DISCARD when the turn does not support it at all. {WHO} {WHEN}\n"
            'Example: turn "Tom: I adopted two cats" and fact "Tom adopted three cats." give '
            '{{"action": "REVISE", "revised_fact": "Tom adopted two cats."}}.'
        ),
        user=(
            "Dialogue turn:\n{turn}\n\nFact: {fact}\n\n"
            'Reply as {{"action": "REVISE" or "DISCARD", "revised_fact": corrected sentence or null}}.'
        ),
    ),
    "nli": Template(
        system=(
            "Task: textual entailment. Say whether the hypothesis follows from the premise alone "
            "(entailment), is contradicted by it (contradiction), or neither (neutral). In the premise, "
            "\"I\" means the person said to be speaking."
        ),
        user='Premise:\n{premise}\n\nHypothesis: {hypothesis}\n\nReply as {{"label": "entailment" | "neutral" | "contradiction"}}.',
    ),
    "probe": Template(
        system=(
            "Task: two memory entries of {user} may be linked by a relation. Write one specific question "
            "whose answer is exactly that link, so someone can check whether the link is known."
        ),
        user=(
            "Entry A: {source}\nEntry B: {target}\nProposed relation: {relation} (A is the source, B the target: "
            "{meaning}).\n\n"
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
            "Dialogue:\n{dialogue}\n\nFact A: {source}\nFact B: {target}\nProposed link: {relation} (A is the "
            "source, B the target: {meaning}).\nQuestion about the link: {question}\n\n"
            'Reply as {{"supported": true or false}}.'
        ),
    ),
}


def render(role: str, **fields: Any) -> tuple[Message, ...]:
    """The chat messages of ``role`` with ``fields`` filled in (``more`` is empty unless a continuation)."""
    return TEMPLATES[role].render(**{"more": "", **fields})


def example_of(role: str) -> str:
    """The example in ``role``'s system text ("" when it has none)."""
    return TEMPLATES[role].system.partition("\nExample:")[2]


def more_text(listed: Sequence[str]) -> str:
    """The ``more`` field of a continuation prompt: what the earlier replies already listed."""
    return MORE.format(listed="\n".join(f"- {item}" for item in listed)) if listed else ""


def relation_meaning(relation: str) -> str:
    """The direction of ``relation`` as the prompts state it (a configured type we have no wording for
    gets the same neutral wording in the relation, probe and verification prompts)."""
    return RELATION_MEANINGS.get(relation, "source and target are linked this way")


def relation_menu(types: Sequence[str]) -> str:
    """The allowed relation types, one a line with their direction."""
    return "\n".join(f"- {t}: {relation_meaning(t)}" for t in types)


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
