"""``Memory.add_many``: a user's history added in one call extracts side by side (a model call holds requests of
several conversations, where one ``add`` after another sends one conversation's at a time), gives the memory one
``add`` after another gives, and loses no conversation to a bad one.

The chat model is the scripted one, recorded (which conversations each model call served, told apart by a word
only that conversation says) or failing on demand (for prompts holding a chosen word) by a backend the test
registers; the expected memories are read off the conversations by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from promem_fast import AsyncMemory, EngineConfig, Memory
from promem_fast.backends import BackendSpec, register
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.errors import InputError
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered

HISTORY = [  # (what Ana said, when): four conversations, the third replacing the first
    ("I live in a small flat in Lisbon near the river.", "2024-01-05"),
    ("I keep bees on the roof of the old mill.", "2024-02-10"),
    ("I live in a small flat in Porto near the river.", "2024-03-02"),
    ("I play chess at the club on Sundays.", "2024-04-20"),
]
MARKS = ("Lisbon", "bees", "Porto", "chess")
"""A word each conversation alone says."""


class RecordingLLM(ScriptedLLM):
    """The scripted model, recording which conversations (by :data:`MARKS`) each call's extraction prompts come
    from (an update judge's prompt also quotes older memories), and failing the calls whose prompts hold a word
    of :attr:`failing` (``*``: every call)."""

    served: list[set[str]] = []
    failing: set[str] = set()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        said = [" ".join(m["content"] for m in r.messages) for r in requests]
        if "*" in self.failing or any(word in text for word in self.failing for text in said):
            raise RuntimeError("the model crashed on this prompt")
        roles = [(parse_rendered(r.messages) or ("",))[0] for r in requests]
        extracting = [text for role, text in zip(roles, said) if role != "store_update"]
        RecordingLLM.served.append({mark for text in extracting for mark in MARKS if mark in text})
        return super().generate(requests)


@pytest.fixture
def recording() -> Iterator[type[RecordingLLM]]:
    register([BackendSpec("llm", "recording", f"{__name__}:RecordingLLM", None, "the scripted model, recorded")])
    RecordingLLM.served, RecordingLLM.failing = [], set()
    yield RecordingLLM


def config() -> EngineConfig:
    return EngineConfig.profile("scripted").with_overrides(["llm.backend=recording"])


def conversations() -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": said}], "timestamp": day} for said, day in HISTORY]


def state(memory: Memory) -> list[tuple[str, str | None, str | None]]:
    """Every memory of ana, replaced ones too: (text, when it was said, what replaced it)."""
    found = memory.get_all(user_id="ana", history=True)["results"]
    text = {m["id"]: m["memory"] for m in found}
    return sorted((m["memory"], m["valid_from"], text.get(m["superseded_by"])) for m in found)


def test_many_conversations_extract_side_by_side_into_the_memory_one_add_after_another_gives(
        tmp_path: Path, recording: type[RecordingLLM]) -> None:
    with Memory(tmp_path / "one.db", config=config()) as memory:
        for said, day in HISTORY:
            memory.add(said, user_id="ana", timestamp=day)
        one_by_one = state(memory)
    assert max(len(served) for served in recording.served) == 1  # each call serves one conversation
    recording.served = []
    with Memory(tmp_path / "many.db", config=config()) as memory:
        results = memory.add_many(conversations(), user_id="ana")
        together = state(memory)
        current = sorted(m["memory"] for m in memory.get_all(user_id="ana")["results"])
    assert max(len(served) for served in recording.served) >= 2  # a call holds several conversations' requests
    assert together == one_by_one
    assert current == ["Ana keep bees on the roof of the old mill.",  # Lisbon replaced by Porto
                       "Ana live in a small flat in Porto near the river.", "Ana play chess at the club on Sundays."]
    assert [(r["added"], r["error"], [e["event"] for e in r["results"]]) for r in results] == [
        (True, None, ["add"]), (True, None, ["add"]), (True, None, ["update"]), (True, None, ["add"])]


def test_a_bad_item_or_a_failed_model_request_loses_no_other_conversation(
        tmp_path: Path, recording: type[RecordingLLM]) -> None:
    recording.failing = {"volcano"}
    items: list[Any] = [
        HISTORY[0][0],
        42,  # not a conversation
        {"messages": [{"role": "user", "content": "I climbed a volcano in Iceland."}]},  # its model requests fail
        {"messages": [{"role": "user"}]},  # a message without content
        {"messages": [{"role": "user", "content": "I keep bees."}], "user": "rui"},  # a record naming its user
        HISTORY[1][0],
    ]
    with Memory(tmp_path / "m.db", config=config()) as memory:
        results = memory.add_many(items, user_id="ana")
        assert [r["added"] for r in results] == [True, False, True, False, True, True]
        assert [r["user_id"] for r in results] == ["ana", None, "ana", None, "rui", "ana"]
        assert results[1]["error"].startswith("item 1: ") and "messages" in results[1]["error"]
        assert results[3]["error"].startswith("item 3: ") and "content" in results[3]["error"]
        # the volcano conversation is stored without memories, and says why, as add does
        assert results[2]["results"] == [] and results[2]["error"] is None
        assert results[2]["failed_steps"] and all("the model crashed" in f["error"] for f in results[2]["failed_steps"])
        assert sorted(m["memory"] for m in memory.get_all(user_id="ana")["results"]) == [
            "Ana keep bees on the roof of the old mill.", "Ana live in a small flat in Lisbon near the river."]
        assert [m["memory"] for m in memory.get_all(user_id="rui")["results"]] == ["Rui keep bees."]


def test_a_model_that_stops_answering_leaves_each_conversation_with_the_reason(
        tmp_path: Path, recording: type[RecordingLLM]) -> None:
    recording.failing = {"*"}  # every prompt: the backend is gone
    with Memory(tmp_path / "m.db", config=config().with_overrides(["max_failed_batches=2"])) as memory:
        results = memory.add_many([said for said, _ in HISTORY], user_id="ana")
        assert [r["added"] for r in results] == [False] * 4
        assert all("BackendUnavailable: the generate backend failed" in r["error"] for r in results)
        assert memory.store.sessions("ana") == []  # nothing half stored
        assert memory.add_many(["I keep bees."], user_id="ana", infer=False)[0]["added"]  # the memory still works


def test_a_conversation_given_twice_or_already_stored_is_stored_once(tmp_path: Path,
                                                                      recording: type[RecordingLLM]) -> None:
    first, second = conversations()[:2]
    first["session_id"], second["session_id"] = "s1", "s2"
    with Memory(tmp_path / "m.db", config=config()) as memory:
        memory.add(first, user_id="ana")
        results = memory.add_many([first, second, second], user_id="ana")
        assert [(r["session_id"], r["added"], r["error"]) for r in results] == [
            ("s1", False, None), ("s2", True, None), ("s2", False, None)]
        assert memory.store.sessions("ana") == ["s1", "s2"]
        assert memory.add_many([], user_id="ana") == []
        for one in ("I keep bees.", first, 42):  # one conversation is add's: not read letter by letter or key by key
            with pytest.raises(InputError, match="give a list of conversations") as refused:
                memory.add_many(one, user_id="ana")
            assert refused.value.field == "conversations"
        assert memory.store.sessions("ana") == ["s1", "s2"]


def test_async_memory_adds_many_and_kept_as_written_needs_no_model(tmp_path: Path,
                                                                   recording: type[RecordingLLM]) -> None:
    async def program() -> tuple[list[dict[str, Any]], list[str]]:
        async with AsyncMemory(tmp_path / "m.db", config=config()) as memory:
            added = await memory.add_many(["My locker code is 4411.", "My bike lock is 0707."], user_id="ana",
                                          infer=False)
            found = await memory.get_all(user_id="ana")
        return added, [m["memory"] for m in found["results"]]

    added, listed = asyncio.run(program())
    assert [r["added"] for r in added] == [True, True]
    assert listed == ["My locker code is 4411.", "My bike lock is 0707."]  # as written, in the order given
    assert recording.served == []  # no model asked


def test_add_many_counts_its_sessions_on_stderr_and_one_add_stays_quiet(
        tmp_path: Path, recording: type[RecordingLLM], capsys: pytest.CaptureFixture[str]) -> None:
    with Memory(tmp_path / "m.db", config=config().with_overrides(["progress=true"])) as memory:
        memory.add(HISTORY[0][0], user_id="ana")
        assert "extract" not in capsys.readouterr().err  # a chat program's every add: no progress line
        memory.add_many([said for said, _ in HISTORY[1:]], user_id="ana")
        assert "extract: 3/3 sessions (100%)" in capsys.readouterr().err
        memory.add_many([HISTORY[3][0] + " Really."], user_id="ana", progress=False)
        assert capsys.readouterr().err == ""
