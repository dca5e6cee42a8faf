"""Which listed details carry information of the dialogue, and which are words copied from the prompt.

A small model asked for the details of a turn often lists words of the prompt itself: on the first demo
session SmolLM2-135M listed "I", "me", "my", the owner's name, "Dialogue" and "turn 0" for 9 of its 11
details (``benchmarks/results/smollm2_demo.json``). Such an item says nothing the memory does not already
know, and anchored to an entry it reads as a fact. A detail is dropped when it is

* only pronouns, determiners and other function words ("I", "my", "the");
* only a speaker's name or role (the owner's, the other speaker's: "Maya Chen", "assistant");
* only a turn label ("turn 3", "[turn 3]", "turns 2-4"), or a turn label with one of the above;
* only words of the role's instructions (the session block's fixed text, the task, the reply format) of
  which the turn's words lack at least one ("Dialogue", "names of people", "short fragment").

Anything else stays, however short ("Civic", "Lisbon", "3 kids"): the check only removes, never rewrites.
A label or instruction word that the speaker really said (``I turn 40 in May``, ``our dialogue coach``) is
the speaker's and is kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from promem_fast.pipeline.words import content_set, content_words
from promem_fast.prompts import (
    DETAILS_MANY, DETAILS_ONE, DIALOGUE, TEMPLATES, more_text, session_block, shown_part,
)

_TURN_LABEL = re.compile(r"\[?\bturns?\s*\d+(?:\s*(?:[-\u2013,]|and)\s*\d+)*\s*\]?", re.IGNORECASE)
"""How the prompts label turns (``[turn 3]``, ``Turns: 2, 3``), as a model copies them back."""


def instruction_text(role: str, owner: str, source: str) -> str:
    """The fixed words of ``role``'s prompts for ``owner``: the session block without its date and dialogue,
    the task, the item's labels and both reply shapes (what a model can copy without reading the turn)."""
    template = TEMPLATES[role]
    task = template.user.format(user=owner, source=source, turns="", text=shown_part("The turns", ""),
                                reply=f"{DETAILS_ONE} {DETAILS_MANY}", more=more_text(["-"]))
    return "\n".join((session_block(owner, "", None), DIALOGUE.format(dialogue=""), task))


class DetailCheck:
    """Drops the details of one session that carry no information of its dialogue (see the module notes)."""

    def __init__(self, instructions: str, speakers: Iterable[str]) -> None:
        self._prompt = content_set(instructions)
        self._names = frozenset(w for name in speakers for w in content_words(name))

    def informative(self, item: str, said: str) -> bool:
        """Whether ``item``, listed for a turn whose counted words are ``said``, tells something of it."""
        lowered = said.lower()
        rest = _TURN_LABEL.sub(" ", item)
        if any(m.group(0).strip("[] ").lower() in lowered for m in _TURN_LABEL.finditer(item)):
            rest = item  # the speaker said it ("I turn 40 in May"): not a label
        words = content_words(rest)
        if not words or all(w in self._names for w in words):
            return False
        have = content_set(said)
        return not (all(w in self._prompt for w in words) and not all(w in have for w in words))

    def keep(self, items: Sequence[str], said: str) -> list[str]:
        """``items`` without those :meth:`informative` refuses, in their order."""
        return [item for item in items if self.informative(item, said)]
