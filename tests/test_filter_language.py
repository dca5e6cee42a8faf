"""mem0's metadata filter language (its documented operators, ``AND`` / ``OR`` / ``NOT`` and the ``*`` wildcard)
on both stores, and the same rule in Python for metadata already read (a queued session's).

Each expected set is read off the four sessions below by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from promem_fast.errors import InputError
from promem_fast.store.filters import matcher

SAID = [  # (what the user said, the session's metadata)
    ("I keep bees in Porto.", {"topic": "hobby", "priority": 5, "day": "2024-03-02", "tags": "Garden, Outdoors"}),
    ("I work as a nurse.", {"topic": "work", "priority": 2, "day": "2024-01-10"}),
    ("I play chess on Sundays.", {"topic": "hobby", "priority": "high"}),
    ("I cook pasta on Fridays.", {}),
]
BEES, NURSE, CHESS, PASTA = "Ana keep bees in Porto.", "Ana work as a nurse.", "Ana play chess on Sundays.", \
    "Ana cook pasta on Fridays."

CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"priority": {"gte": 3}}, {BEES}),
    ({"priority": {"gt": 1, "lt": 5}}, {NURSE}),
    ({"priority": {"lte": 5}}, {BEES, NURSE}),  # "high" is a string: no number range holds it
    ({"day": {"gte": "2024-02-01"}}, {BEES}),  # ISO days order as text
    ({"topic": {"nin": ["work"]}}, {BEES, CHESS, PASTA}),  # an absent key is none of them
    ({"topic": {"ne": "hobby"}}, {NURSE, PASTA}),
    ({"topic": ["work", "travel"]}, {NURSE}),  # a list is "one of"
    ({"topic": {"eq": "work"}}, {NURSE}),
    ({"tags": {"contains": "Garden"}}, {BEES}),
    ({"tags": {"contains": "garden"}}, set()),
    ({"tags": {"icontains": "GARDEN"}}, {BEES}),
    ({"topic": "*"}, {BEES, NURSE, CHESS}),
    ({"OR": [{"topic": "work"}, {"priority": {"gte": 5}}]}, {BEES, NURSE}),
    ({"NOT": [{"topic": "hobby"}]}, {NURSE, PASTA}),
    ({"NOT": [{"topic": "hobby"}, {"topic": "work"}]}, {PASTA}),
    ({"AND": [{"topic": "hobby"}, {"NOT": [{"priority": "high"}]}]}, {BEES}),
    ({"topic": "hobby", "OR": [{"day": "*"}, {"priority": {"in": ["high", "low"]}}]}, {BEES, CHESS}),
]


@pytest.fixture
def memory(store_at: str) -> Any:
    from promem_fast import Memory

    with Memory(store_at, profile="scripted") as memory:
        for text, metadata in SAID:
            memory.add(text, user_id="ana", metadata=metadata)
        memory.add("I keep bees in Faro.", user_id="bob", metadata={"topic": "hobby", "priority": 5})
        yield memory


def test_every_operator_selects_the_memories_its_documentation_says(memory: Any) -> None:
    for filters, expected in CASES:
        listed = {m["memory"] for m in memory.get_all(user_id="ana", filters=filters)["results"]}
        found = {m["memory"] for m in memory.search("what does ana do", user_id="ana", filters=filters)["results"]}
        assert listed == found == expected, filters


def test_the_python_rule_for_metadata_already_read_agrees() -> None:
    texts = [BEES, NURSE, CHESS, PASTA]
    for filters, expected in CASES:
        meets = matcher(filters)
        assert {texts[i] for i, (_, metadata) in enumerate(SAID) if meets(metadata)} == expected, filters


def test_the_user_may_be_named_in_a_top_level_and_and_nowhere_else(memory: Any) -> None:
    found = memory.search("job", filters={"AND": [{"user_id": "ana"}, {"topic": "work"}]})["results"]
    assert [m["memory"] for m in found] == [NURSE]
    with pytest.raises(InputError, match="user_id names the user"):
        memory.get_all(user_id="ana", filters={"OR": [{"user_id": "bob"}, {"topic": "work"}]})


@pytest.mark.parametrize("filters,message", [
    ({"priority": {"between": [1, 2]}}, "unknown operator 'between'"),
    ({"OR": []}, "OR takes a non-empty list of filters"),
    ({"NOT": {"topic": "work"}}, "NOT takes a non-empty list of filters"),
    ({"priority": {"gt": True}}, "'gt' compares with a number or a string"),
    ({"tags": {"contains": 3}}, "'contains' looks for a string"),
    ({"topic": {"nin": []}}, "'nin' takes a non-empty list of values"),
    ({"AND": [{}]}, "a filter is a JSON object of conditions"),
])
def test_a_filter_outside_the_language_is_refused_naming_what_is_wrong(memory: Any, filters: dict[str, Any],
                                                                      message: str) -> None:
    with pytest.raises(InputError, match=message) as refused:
        memory.search("x", user_id="ana", filters=filters)
    assert refused.value.field == "filters"

