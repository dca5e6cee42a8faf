"""The pipeline's prompts: one leading block per session, then one template per role.

The wording is ours. Every prompt of a session starts with the same system message, :func:`session_block`:
the preamble, who the memory owner is, the session date with the calendar-date rule, and the session's
dialogue. Each role's instructions and its item (the turns, entry or fact it is about) come after it, in the
user message. A prefix cache (vLLM's, llama.cpp's) therefore holds a session's dialogue once and serves it to
every role; the roles name the turns they are about (``[turn 3]``) instead of repeating them, and the
relation-checking roles show their shared material (the numbered entries, the links between them by entry
number) before their instructions, so it is cached once for the requests that read it. A session too long for
one prompt gets the block without its dialogue, and each role then carries the part it needs.

The roles that carry all they need get the block without the dialogue: the atomic split (the entry), the NLI
judge (the premise), the probe and the flat answer (the entries). Every token they write would otherwise read
the session's whole cached dialogue on a GPU. The adjudicator keeps the dialogue: it is shown the fact and its
turn, whose "she" or "the job" the turns before it explain. Relation verification, the session's last request
that needs the dialogue, runs beside the probe (see :mod:`promem_fast.pipeline.relations`). While the split's
wave runs the dialogue is left unreferenced, and a prefix cache that evicts least recently freed blocks first
(vLLM's) may drop it if the engine keeps more sessions in flight than the cache holds; the engine's window,
sized from the sessions' measured working set, does not (``benchmarks/README.md``).

The event, draft, relation, decomposition and adjudication tasks carry one short example of their answer;
the detail task does not: with SmolLM2-135M its example made 4 of 12 first replies fail (the model listed
the example's details) against 0 of 12 without. Schemas bound every list with ``maxItems`` so a reply can
never run away. Replies about several numbered items (turns, links, questions) are objects keyed by the
item's number, and a proposed relation is a ``[source, type, target]`` triple, not an object that repeats
field names for every item: the same content in fewer decoded tokens (every one of which reads the whole
cached dialogue on a GPU), with the number still written beside each answer. (Relations keyed by their type
instead, ``{"causal": [[0, 1]]}``, were shorter still, but SmolLM2-135M then proposed no link at all.)
"""

from __future__ import annotations

import re

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from promem_fast.types import Message

PREAMBLE = (
    "You help build a long-term memory of what a person shared in conversations. "
    "Work only from the text you are given, never add outside knowledge, and answer with JSON only."
)


@dataclass(frozen=True)
class Template:
    """A prompt with its own system text (the evaluation and store prompts, which see no session block)."""

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
"""Said in every prompt, so "I" resolves to the owner rather than to whoever the model guesses."""

WHEN = (
    "The session took place on {when}. Write every date as a calendar date: turn relative times such as "
    "\"yesterday\", \"tomorrow\", \"last week\" or \"in two days\" into dates counted from the session date "
    "(or from the date shown on a turn)."
)
"""Said in every prompt, so "tomorrow" is stored as the day it meant."""

BLOCK = PREAMBLE + "\n\n" + WHO + " " + WHEN + "\n\n{shown}"
"""The leading block shared by every role's prompt of one session (the system message)."""

DIALOGUE = "The dialogue:\n{dialogue}"
NO_DIALOGUE = "The dialogue is not shown here: each task below shows the part of it that it needs."


def session_block(user: str, when: str, dialogue: str | None) -> str:
    """The system message of every pipeline prompt of one session.

    ``dialogue`` None: each prompt shows its own part instead, because the dialogue does not fit the context,
    or compression or ``pipeline.dialogue_in_block: false`` asks for it."""
    shown = DIALOGUE.format(dialogue=dialogue) if dialogue is not None else NO_DIALOGUE
    return BLOCK.format(user=user, when=when, shown=shown)


MORE = "\n\nAlready listed (do not repeat these; list only what is still missing, or nothing):\n{listed}"
"""The tail of a continuation: the same prompt again, with the items a cut reply already gave."""

DETAILS_ONE = '"details" list holds one short fragment per detail'
DETAILS_MANY = ('keys are the turns named that hold details, each holding the list of that turn\'s details, one '
                'short fragment each; leave out a turn with none')
"""The detail reply's shape: a flat list for one turn (small models fill it where they leave a nested one
empty: SmolLM2-135M gave no detail at all in a list of per-turn objects), an object of lists keyed by turn
for several. A turn with nothing to keep is left out rather than given an empty list: most turns of a session
hold no detail, and on a GPU each of the five or so tokens of ``"7": [],`` reads the session's whole cached
dialogue. A complete reply's missing turn is read as empty, a cut reply's as not reached (asked again)."""

OWNER_WORDS = "that {user} states; the other speaker's lines are only context, not facts about {user}"
ANY_WORDS = "stated by either speaker"
"""The detail task's source rule: the owner's own words (default) or the whole turn (the ablation)."""

RELATION_MEANINGS: dict[str, str] = {
    "causal": "source leads to target",
    "temporal": "source happens before target",
    "motivational": "source is the reason for target",
    "conditional": "target depends on source",
    "contrastive": "source and target contrast",
}
"""The direction of each relation type, stated in the relation, probe and verification prompts."""


@dataclass(frozen=True)
class RoleTemplate:
    """A role's instructions and item, sent after the session block (the user message).

    ``lead`` is material shown before the instructions: the relation-checking roles start with the same
    numbered entries (and links), so a prefix cache holds them once for the three requests that read them."""

    task: str
    item: str
    lead: str = ""

    @property
    def user(self) -> str:
        return f"{self.lead}{self.task}\n\n{self.item}"

    def render(self, block: str, **fields: Any) -> tuple[Message, ...]:
        return ({"role": "system", "content": block}, {"role": "user", "content": self.user.format(**fields)})


ENTRIES = "Memory entries of {user}:\n{entries}\n\n"
LINKS = "Proposed links between entries:\n{links}\n\n"
QUESTIONS = "Questions, by link number:\n{questions}\n\n"
"""The leads of the relation-checking roles, so requests share cached prefixes: the probe shows the entries,
then the links; the flat answer the entries, then the probe's questions (no links: it must answer from the
entries alone), both after the block without the dialogue; verification the entries, then the links, after
the block with the dialogue, and names the links it asks about after them."""


TEMPLATES: dict[str, RoleTemplate] = {
    "detail": RoleTemplate(
        task=(
            "Task: list the small concrete details {source}, in each turn named below: names of people and "
            "organisations, dates and times, places, quantities and prices, named objects, preferences. "
            "Each detail is a short fragment, not a sentence about the whole conversation. Skip greetings "
            "and anything that carries no concrete fact."
        ),
        item='Turns: {turns}{text}\n\nReply with a JSON object whose {reply}.{more}',
    ),
    "event": RoleTemplate(
        task=(
            "Task: read the turns below, which share one topic, and state the main events, situations or "
            "plans of {user} that they reveal. Each event is one standalone sentence in the third person "
            "that names {user}; keep dates or places when they define the event.\n"
            'Example: on 2024-05-06, "Tom: I start my new job at the bakery next Monday" gives the event '
            '"Tom starts a new job at the bakery on 2024-05-13."'
        ),
        item=('Turns on one topic: {turns}{text}\n\nReply with a JSON object whose "events" list holds one '
              'sentence per event, each starting with "{user}".{more}'),
    ),
    "relation": RoleTemplate(
        task=(
            "Task: given numbered events from {user}'s conversation, find ordered pairs (source, target) "
            "that are linked by one of the allowed relation types. Only propose links the events clearly "
            "support; leave unrelated events unlinked.\n"
            'Example: with events "0. Tom hurt his knee." and "1. Tom stopped running.", the link is '
            '[0, "causal", 1].'
        ),
        item=(
            "Events:\n{events}\n\nAllowed relation types:\n{relation_types}\n"
            'Reply as {{"links": [[source event number, "relation type", target event number], ...]}}.'
        ),
    ),
    "draft": RoleTemplate(
        task=(
            "Task: write down every fact the dialogue reveals about {user}: actions, states, plans, "
            "opinions, preferences, relationships and personal data. Resolve pronouns and references so "
            "each fact stands on its own, and name {user} in every fact: as its subject when the fact is "
            "about {user}, and through their link to {user} when it is about someone else (\"{user}'s "
            "sister\"). Ignore small talk. Be exhaustive.\n"
            'Example: on 2024-05-06, "Tom: My sister Lea visited me yesterday, she loves sushi" gives the '
            'facts ["Tom has a sister called Lea.", "Tom\'s sister Lea visited Tom on 2024-05-05.", '
            '"Tom\'s sister Lea loves sushi."].'
        ),
        item=('{text}Reply with a JSON object whose "facts" list holds one short sentence per fact, each naming '
              '{user}.{more}'),
    ),
    "decompose": RoleTemplate(
        task=(
            "Task: split one memory statement about {user} into atomic facts. An atomic fact carries exactly "
            "one piece of information (one action, one time, one place, one attribute) and is a full "
            "sentence with its subject. Only split; do not add, infer or reword meaning.\n"
            'Example: "Tom moved to Porto in 2023 for a nursing job." splits into ["Tom moved to Porto.", '
            '"Tom moved in 2023.", "Tom moved for a nursing job."].'
        ),
        item='Statement: {entry}\n\nReply with a JSON object whose "facts" list holds one sentence per atomic fact.',
    ),
    "adjudicate": RoleTemplate(
        task=(
            "Task: an automatic checker could not confirm a fact about {user} against the dialogue turn it "
            "was taken from. Decide: REVISE when the turn supports the core of the fact but a detail is off "
            "(a date, a name, an amount), and give the corrected fact with {user} as its subject, every date "
            "written as a calendar date counted from the turn's date (a fact that already gives the right "
            "calendar date for the turn's \"yesterday\" or \"next Monday\" is supported as it stands); "
            "DISCARD when the turn does not support it at all.\n"
            'Example: turn "Tom: I adopted two cats" and fact "Tom adopted three cats." give '
            '{{"action": "REVISE", "revised_fact": "Tom adopted two cats."}}.'
        ),
        item=(
            "The turn:\n{turn}\n\nFact: {fact}\n\n"
            'Reply as {{"action": "REVISE" or "DISCARD", "revised_fact": corrected sentence or null}}.'
        ),
    ),
    "nli": RoleTemplate(
        task=(
            "Task: textual entailment. Say whether the hypothesis follows from the premise alone "
            "(entailment), is contradicted by it (contradiction), or neither (neutral). In the premise, "
            "\"I\" means the person said to be speaking."
        ),
        item='Premise:\n{premise}\n\nHypothesis: {hypothesis}\n\nReply as {{"label": "entailment" | "neutral" | "contradiction"}}.',
    ),
    "probe": RoleTemplate(
        lead=ENTRIES + LINKS,
        task=(
            "Task: the links above propose a relation between two memory entries of {user}. For each link, "
            "write one specific question whose answer is exactly that link, so someone can check whether the "
            "link is known. Ask in the entries' own words, never by their numbers."
        ),
        item='Reply with a JSON object whose keys are the links\' numbers, each holding that link\'s question.',
    ),
    "answer_flat": RoleTemplate(
        lead=ENTRIES + QUESTIONS,
        task=(
            "Task: decide for each question whether the memory entries above answer it on their own (not the "
            "dialogue), without guessing. A question is answerable only when the entries state the answer, not "
            "when they merely mention the same things."
        ),
        item=('Reply with a JSON object whose keys are the questions\' numbers, each holding true when the '
              'entries answer that question and false otherwise.'),
    ),
    "verify_relation": RoleTemplate(
        lead=ENTRIES + LINKS + "{text}",
        task=(
            "Task: check against the dialogue whether each link named below is actually supported by what was "
            "said about {user}: the source entry and the target entry must be related as the link's relation "
            "says, not merely both true."
        ),
        item=('Links to check: {check}\n\nReply with a JSON object whose keys are these links\' numbers, each '
              'holding true when what was said supports that link and false otherwise.'),
    ),
}


def render(role: str, block: str, **fields: Any) -> tuple[Message, ...]:
    """The chat messages of ``role`` after the session ``block``, ``fields`` filled in (``more`` and ``text``
    are empty unless given: a continuation, a part of a dialogue too long for the block)."""
    return TEMPLATES[role].render(block, **{"more": "", "text": "", **fields})


def example_of(role: str) -> str:
    """The example in ``role``'s task ("" when it has none)."""
    return TEMPLATES[role].task.partition("\nExample:")[2]


_WEEKDAYS_MONTHS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july august "
    "september october november december".split())


@lru_cache(maxsize=1)
def example_names() -> frozenset[str]:
    """The names the prompts' examples use ("tom", "lea", "porto"), lower-cased (read once): in a model's reply they come
    from an example (a small model rewords it as a memory), unless the dialogue or the owner has them."""
    found = {word.lower() for role in TEMPLATES for word in re.findall(r"\b[A-Z][a-z]{2,}\b", example_of(role))}
    return frozenset(found - _WEEKDAYS_MONTHS)


def shown_part(label: str, text: str) -> str:
    """The ``text`` field of a role whose session block has no dialogue: the part it needs, labelled
    (written after the item's first line)."""
    return f"\n\n{label}:\n{text}"


def part_before(label: str, text: str) -> str:
    """The same, for a role whose item starts with it (the draft, relation verification)."""
    return f"{label}:\n{text}\n\n"


def more_text(listed: Sequence[str]) -> str:
    """The ``more`` field of a continuation prompt: what the earlier replies already listed."""
    return MORE.format(listed="\n".join(f"- {item}" for item in listed)) if listed else ""


def relation_meaning(relation: str) -> str:
    """The direction of ``relation`` as the prompts state it (a configured type we have no wording for
    gets the same neutral wording in the relation, probe and verification prompts)."""
    return RELATION_MEANINGS.get(relation, "source and target are linked this way")


def link_line(number: int, source: int, target: int, relation: str) -> str:
    """One numbered link of the probe and verification prompts, between two numbered entries."""
    return (f"{number}. source: entry {source}, target: entry {target}, relation: {relation} "
            f"({relation_meaning(relation)})")


def relation_menu(types: Sequence[str]) -> str:
    """The allowed relation types, one a line with their direction."""
    return "\n".join(f"- {t}: {relation_meaning(t)}" for t in types)


def _string_list(key: str, max_items: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": max_items}},
        "required": [key],
    }


PER_ITEM: dict[str, tuple[str, dict[str, Any]]] = {
    "probe": ("question", {"type": "string", "minLength": 3}),
    "answer_flat": ("answerable", {"type": "boolean"}),
    "verify_relation": ("supported", {"type": "boolean"}),
}
"""The relation-checking roles, which answer several numbered items in one reply, an object keyed by the
items' numbers: what each answer is (the question, whether the entries answer it, whether the dialogue
supports the link) and its schema. Only what the pipeline reads is asked for (the flat answer says whether
the entries answer a question, not the answer), since every reply token is decoded."""


def schema_for(role: str, *, max_items: int = 24, n_events: int = 0,
               relation_types: Sequence[str] = (), turns: Sequence[str] = (), numbers: Sequence[int] = (0,)
               ) -> dict[str, Any]:
    """The JSON schema of ``role``'s answer; relation schemas bound event numbers to ``n_events``, detail
    schemas the turn labels to ``turns``, the relation-checking ones their answers to the items ``numbers``."""
    if role == "detail" and len(turns) <= 1:
        return _string_list("details", max_items)
    if role == "detail":  # keys not required: a reply cut short keeps the turns it finished
        details = {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": max_items}
        return {"type": "object", "properties": {str(t): details for t in turns}, "additionalProperties": False}
    if role == "event":
        return _string_list("events", max_items)
    if role in ("draft", "decompose"):
        return _string_list("facts", max_items)
    if role == "relation":
        index = {"type": "integer", "minimum": 0, "maximum": max(n_events - 1, 0)}
        link = {"type": "array", "prefixItems": [index, {"type": "string", "enum": list(relation_types)}, index],
                "minItems": 3, "maxItems": 3}
        return {"type": "object", "properties": {"links": {"type": "array", "maxItems": max_items, "items": link}},
                "required": ["links"]}
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
    if role in PER_ITEM:
        keys = [str(n) for n in numbers]
        return {"type": "object", "properties": {k: PER_ITEM[role][1] for k in keys}, "required": keys,
                "additionalProperties": False}
    raise KeyError(f"no schema for role {role!r}")


# ------------------------------------------------------------------------------------------ text views
def format_turn(messages: Sequence[Any], turn_id: Any | None = None) -> str:
    """A turn as ``[turn 3] user: ...`` lines (``messages`` are :class:`~promem_fast.types.Turn`)."""
    prefix = f"[turn {turn_id}] " if turn_id is not None else ""
    return "\n".join(f"{prefix}{m.role}: {m.text}" for m in messages)


def numbered(items: Sequence[str] | Mapping[int, str]) -> str:
    """``items`` one a line, each after its number (its position, or its key in a mapping)."""
    pairs = items.items() if isinstance(items, Mapping) else enumerate(items)
    return "\n".join(f"{i}. {text}" for i, text in pairs)
