"""Reply parsing: strict repairs only, everything else an error the engine retries."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promem_fast.parsing import dominant_script, parse_reply
from promem_fast.prompts import schema_for
from promem_fast.requests import ReplyError

FACTS = schema_for("draft", max_items=4)
RELATIONS = schema_for("relation", n_events=5, relation_types=["causal", "temporal"])


@pytest.mark.parametrize("reply,value,repaired", [
    ('{"facts": ["a", "b"]}', ["a", "b"], False),
    ('Sure! Here you go:\n```json\n{"facts": ["a"]}\n```', ["a"], True),
    ('Here: {"facts": ["a", "b"]} hope it helps', ["a", "b"], True),
    ('{"facts": ["a", "b", "unfinished', ["a", "b"], True),
    ('["x", "y"]', ["x", "y"], True),
    ('{"facts": [1, "b"]}', ["1", "b"], True),
    ('{"facts": ["a", "b", "c", "d", "e"]}', ["a", "b", "c", "d"], True),
])
def test_strict_repairs(reply: str, value: list[str], repaired: bool) -> None:
    parsed, repairs = parse_reply(reply, FACTS)
    assert parsed == {"facts": value}
    assert bool(repairs) is repaired


@pytest.mark.parametrize("reply,error", [
    ("", "empty"), ("I cannot do that.", "no JSON"), ('{"fa', "no complete element"),
    ('{"other": []}', "missing required field"), ('{"facts": "a, b"}', "expected a list"),
    ('{"facts": [{"x": 1}]}', "no item of the list is valid"),
])
def test_unrepairable_replies_raise(reply: str, error: str) -> None:
    with pytest.raises(ReplyError, match=error):
        parse_reply(reply, FACTS)


def test_out_of_range_ids_are_dropped_not_invented() -> None:
    # five events (0-4): the link naming event 17 goes; the type written "Temporal" is read as the allowed
    # "temporal", and the number written as a string as a number
    reply = json.dumps({"links": [[0, "causal", 17], [1, "Temporal", "2"]]})
    value, repairs = parse_reply(reply, RELATIONS)
    assert value == {"links": [[1, "temporal", 2]]}
    assert any("17" in r for r in repairs)


def test_truncated_inside_an_object_keeps_only_complete_items() -> None:
    reply = '{"links": [[0, "causal", 1], [2, "tem'
    value, _ = parse_reply(reply, RELATIONS)
    assert value == {"links": [[0, "causal", 1]]}


def test_one_turns_unreadable_list_costs_only_that_turn() -> None:
    # details of three turns keyed by turn; turn 4's value is no list: it is dropped (and named), the others kept
    schema = schema_for("detail", turns=["3", "4", "5"])
    value, repairs = parse_reply('{"3": ["Lisbon", "2019"], "4": {"x": 1}, "5": [], "9": ["Oslo"]}', schema)
    assert value == {"3": ["Lisbon", "2019"], "5": []}  # turn 9 was not asked about
    assert any("$.4" in r for r in repairs) and any("'9'" in r for r in repairs)


def test_an_item_reply_must_answer_every_item_it_is_asked() -> None:
    schema = schema_for("answer_flat", numbers=[0, 2])
    assert parse_reply('{"0": true, "2": false}', schema)[0] == {"0": True, "2": False}
    with pytest.raises(ReplyError, match="missing required field '2'"):
        parse_reply('{"0": true, "1": false}', schema)


def test_dominant_script() -> None:
    assert dominant_script("Maya moved to Lisbon") == "LATIN"
    assert dominant_script("玛雅搬到了里斯本") == "CJK"
    assert dominant_script("Майя переехала") == "CYRILLIC"
    assert dominant_script("1234 !!") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    try:
        value, _ = parse_reply(text, FACTS)
    except ReplyError:
        return
    assert isinstance(value["facts"], list) and all(isinstance(f, str) for f in value["facts"])
    assert len(value["facts"]) <= 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=20).filter(lambda s: s.strip()), max_size=6), st.integers(0, 200))
def test_any_truncation_of_a_valid_reply_yields_a_prefix_or_an_error(facts: list[str], cut: int) -> None:
    full = json.dumps({"facts": facts})
    try:
        value, _ = parse_reply(full[:cut], schema_for("draft", max_items=10))
    except ReplyError:
        return
    got = value["facts"]
    assert got == facts[:len(got)]  # nothing invented, order kept


def _script_by_character(text: str) -> str | None:
    """The plain definition: every letter's Unicode name, first word (kana and hangul count as CJK)."""
    import unicodedata

    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            script = name.split(" ", 1)[0] if name else "UNKNOWN"
            script = "CJK" if script in ("HIRAGANA", "KATAKANA", "HANGUL") else script
            counts[script] = counts.get(script, 0) + 1
    return max(sorted(counts), key=counts.__getitem__) if counts else None


@given(st.text(alphabet=st.sampled_from("abcXYZ é—“”1 .玛雅Майяかな한글ΑΒ"), max_size=60) | st.text(max_size=60))
def test_dominant_script_agrees_with_the_per_character_definition(text: str) -> None:
    assert dominant_script(text) == _script_by_character(text)
