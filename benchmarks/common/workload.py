"""The sessions the throughput harness and the NLI / embedder suites run on, and text derived from them.

Real HaluMem sessions (cycled with fresh ids to reach any count) or generated HaluMem-shaped ones; the
tokenizers of the random models are trained on the same text (:func:`corpus`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from benchmarks.common.paths import HALUMEM
from promem_fast.prompts import BLOCK, TEMPLATES
from promem_fast.types import Session, Turn


def load_halumem_sessions(path: Path) -> list[Session]:
    """Every session of a HaluMem file, converted by the evaluation loader."""
    from promem_fast.eval.datasets import load_halumem

    return list(load_halumem(path).iter_sessions())


def halumem_or_skip() -> list[Session]:
    """The real HaluMem user's sessions (:data:`~benchmarks.common.paths.HALUMEM`); skips the calling benchmark,
    saying where it looked, when the sample is absent."""
    if not HALUMEM.is_file():
        import pytest

        pytest.skip(f"the real HaluMem sample is absent ({HALUMEM}; set PROMEM_HALUMEM_SAMPLE to its path)")
    return load_halumem_sessions(HALUMEM)


def cycle(base: Sequence[Session], n: int) -> list[Session]:
    """``n`` sessions taken round-robin from ``base``, each with its own id (the engine keys on ids)."""
    return [dataclasses.replace(base[i % len(base)], session_id=f"{base[i % len(base)].session_id}#{i // len(base)}")
            for i in range(n)]


_PEOPLE = ("Ana", "Tomas", "Lena", "Ravi", "Ines", "Kenji", "Sofia", "Bruno", "Marta", "Omar")
_PLACES = ("Lisbon", "Porto", "Oslo", "Kyoto", "Lyon", "Quito", "Cork", "Graz", "Austin", "Columbus")
_ORGS = ("Nordvik Labs", "Huaxin Consulting", "Bluefern Health", "Corvid Analytics", "Tallow & Pine")
_MONTHS = ("January", "March", "May", "July", "September", "November")
_DAYS = ("Monday", "Wednesday", "Friday", "Saturday")
_USER_FACTS = (
    "I started a new job as a data analyst at {org} in {month}.",
    "My sister {person} is moving to {place} in {month} and I promised to help her.",
    "I have been running {n} km every morning since {month}.",
    "I booked a trip to {place} with my friend {person} for the first week of {month}.",
    "My doctor told me to cut down on coffee after my checkup in {month}.",
    "I adopted a beagle named Biscuit last {day}.",
    "I am saving {n}00 dollars a month for an apartment in {place}.",
    "My manager {person} asked me to lead the onboarding project at {org}.",
    "I signed up for a pottery class that meets every {day} evening.",
    "I finished a book about public health that {person} recommended to me.",
    "I got promoted to senior director at {org}, and my salary went up to {n}000 yuan a month.",
    "My father had knee surgery in {place} in {month}, so I visit him every {day}.",
)
_USER_TAILS = ("I'm excited but also a bit nervous about it.", "It has been on my mind all week.",
               "Do you think that is a good idea?", "I'm not sure how to balance it with everything else.")
_ASSISTANT = (
    "That sounds like a meaningful step, and it is natural to feel both excited and a little uncertain about it.",
    "It may help to break the change into smaller goals so that each week feels manageable and clear.",
    "Keeping a short journal of how you feel could show you which parts are going well and which are not.",
    "Talking it through with people you trust often makes the next decision easier to see.",
    "Remember to leave some time for rest, since steady habits usually last longer than bursts of effort.",
    "If you want, we can plan the first few steps together and look at how they went next time.",
    "Many people in a similar situation find that a clear routine reduces the stress considerably.",
    "It is worth writing down what matters most to you before committing to anything new.",
)
TURN_CHARS = 640
"""A HaluMem-Medium turn in the sample: about 120 characters from the user and 520 from the assistant."""
HALUMEM_SESSION_TOKENS = 3_700
"""Mean dialogue length of the HaluMem-Medium sample's sessions in approximate tokens (characters / 4):
the default size of synthetic sessions, so that both inputs cost about the same to process."""


def synthetic_sessions(n: int, tokens: int, seed: int = 0) -> list[Session]:
    """``n`` HaluMem-shaped sessions of about ``tokens`` approximate tokens (characters / 4) each: first-person
    user messages stating facts (names, places, dates, amounts), long generic assistant replies."""
    rng = random.Random(seed)
    turns_per_session = max(2, round(tokens * 4 / TURN_CHARS))
    sessions = []
    for s in range(n):
        turns: list[Turn] = []
        for t in range(turns_per_session):
            fact = rng.choice(_USER_FACTS).format(org=rng.choice(_ORGS), month=rng.choice(_MONTHS),
                                                  person=rng.choice(_PEOPLE), place=rng.choice(_PLACES),
                                                  n=rng.randint(2, 19), day=rng.choice(_DAYS))
            said = f"{fact} {rng.choice(_USER_TAILS)}"
            reply = rng.sample(_ASSISTANT, 5)
            turns.append(Turn(turn_id=t, role="user", text=said))
            turns.append(Turn(turn_id=t, role="assistant", text=" ".join(reply)))
        sessions.append(Session(session_id=f"synthetic-{s}", user="Martin Mark", turns=tuple(turns),
                                timestamp="2029-01-15T15:12:20"))
    return sessions


def dialogue_text(session: Session) -> str:
    return "\n".join(f"{turn.role}: {turn.text}" for turn in session.turns)


def corpus(sessions: Iterable[Session]) -> list[str]:
    """Tokenizer training text: every distinct message, plus the prompt templates (repeated so their words
    become single tokens, as in any production vocabulary)."""
    texts = list(dict.fromkeys(turn.text for session in sessions for turn in session.turns))
    templates = [BLOCK] + [t.user for t in TEMPLATES.values()]
    return texts + templates * 50


def nli_pairs(sessions: Sequence[Session], count: int, premise: str = "turn") -> list[tuple[str, str]]:
    """(premise, one of the turn's user sentences): the shapes of hallucination checks. The premise is the
    whole turn (``pipeline.premise = "turn"``) or only the user's message in it (``"speaker"``)."""
    pairs: list[tuple[str, str]] = []
    for session in sessions:
        for _, group in session.turn_groups():
            said = next((t.text for t in group if t.role == session.owner_role), "")
            text = "\n".join(f"{t.role}: {t.text}" for t in group if premise == "turn" or t.role == session.owner_role)
            hypothesis = said.split(". ")[0].rstrip(".") + "."
            pairs.append((text, hypothesis))
    return [pairs[i % len(pairs)] for i in range(count)]
