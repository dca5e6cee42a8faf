"""Details that only repeat words of the prompt are dropped; real details, however short, are kept.

Replies are written by hand, the way SmolLM2-135M answered on the demo ("I", "me", the owner's name,
"turn 0", "Dialogue"), and go through the whole engine with the scripted backend answering the detail role.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import make_session, scripted_config
from promem_fast.engine import Engine
from promem_fast.pipeline.detail_check import DetailCheck, instruction_text
from promem_fast.prompts import OWNER_WORDS
from promem_fast.testing.llm_scripted import ScriptedLLM

CIVIC = "I drive a 2014 Honda Civic to work, and I have 3 kids in school here in Lisbon."


def _check() -> DetailCheck:
    return DetailCheck(instruction_text("detail", "Tomás", OWNER_WORDS.format(user="Tomás")),
                       ["Tomás", "user", "assistant"])


def _details(reply: list[str], said: str = CIVIC, **pipeline: Any) -> Any:
    """The graph of a one-turn session of Tomás whose detail request is answered with ``reply``."""
    session = make_session("t", "Tomás", [(said, "That sounds like a full week.")])
    config = scripted_config(completeness_check=False, hallucination_verification=False, relations=False,
                             **pipeline)
    llm = ScriptedLLM(config.llm, rules={"detail": lambda fields: {"details": reply}})
    return Engine(config, llm=llm).extract([session])[0]


def test_copied_prompt_words_are_dropped_and_the_real_detail_kept() -> None:
    graph = _details(["I", "Tomás", "turn 0", "a 2014 Honda Civic"])
    assert [d.text for d in graph.details] == ["a 2014 Honda Civic"]
    assert graph.stats.counts["details_from_prompt"] == 3


@pytest.mark.parametrize("dialogue_in_block", [True, False])
def test_real_short_details_are_all_kept(dialogue_in_block: bool) -> None:
    graph = _details(["Civic", "Lisbon", "3 kids", "2014"], dialogue_in_block=dialogue_in_block)
    assert [d.text for d in graph.details] == ["Civic", "Lisbon", "3 kids", "2014"]
    assert "details_from_prompt" not in graph.stats.counts


@pytest.mark.parametrize("item", [
    "me", "my", "the", "It", "Tomás", "tomás's", "assistant", "the user", "[turn 0]", "Turn 0:", "turns 0-1",
    "turn 0: Tomás", "Dialogue", "names of people", "short fragment", "concrete details", "memory owner",
])
def test_each_kind_of_prompt_copy_is_refused(item: str) -> None:
    assert not _check().informative(item, CIVIC)


@pytest.mark.parametrize("item", [
    "Civic", "Lisbon", "3 kids", "a 2014 Honda Civic", "Honda", "kids in school", "work",
])
def test_words_of_the_turn_are_kept(item: str) -> None:
    assert _check().informative(item, CIVIC)


def test_a_label_or_instruction_word_the_speaker_said_is_the_speakers() -> None:
    said = "I turn 40 next week and my dialogue coach is throwing a party."
    assert _check().informative("turn 40", said)
    assert _check().informative("dialogue coach", said)
    assert not _check().informative("turn 3", said)


def test_the_summary_reports_what_was_dropped() -> None:
    session = make_session("t", "Tomás", [(CIVIC, "Nice.")])
    config = scripted_config(completeness_check=False, hallucination_verification=False, relations=False)
    engine = Engine(config, llm=ScriptedLLM(config.llm, rules={"detail": lambda f: {"details": ["me", "Civic"]}}))
    engine.extract([session])
    assert "details dropped as words of the prompt 1 " in engine.summary.table()
