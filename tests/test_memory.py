"""``Memory``, the front door: messages in, plain dicts with one id and ISO times out, on a real store file
with the scripted profile (extraction and judging by the scripted model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from promem_fast import Memory
from promem_fast.errors import InputError

MEMORY_KEYS = {"id", "memory", "user_id", "session_ids", "valid_from", "valid_until", "recorded_at",
               "superseded_by", "reason", "score", "details", "metadata", "links", "edits"}


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}, {"role": "assistant", "content": "I see."}]


def test_memory_verbs_take_messages_and_give_dicts_with_one_id_and_iso_times(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        first = memory.add(chat("I live in Boston near the harbour."), user_id="Tom", date="2024-01-15",
                           session_id="s1")
        assert first["added"] and first["session_id"] == "s1"
        assert [(e["event"], e["memory"]) for e in first["results"]] == [("add", "Tom live in Boston near the harbour.")]
        assert memory.add(chat("I live in Boston near the harbour."), user_id="Tom", session_id="s1",
                          date="2024-01-15") == {"user_id": "Tom", "session_id": "s1", "added": False, "results": [],
                                                 "failed_steps": []}
        memory.add(chat("I adopted a beagle named Biscuit."), user_id="Tom", date="2024-03-02T18:00:00+01:00",
                   session_id="s2")
        hits = memory.search("Where does Tom live?", user_id="Tom", k=1)["results"]
        assert set(hits[0]) == MEMORY_KEYS
        assert (hits[0]["memory"], hits[0]["session_ids"], hits[0]["valid_from"]) == (
            "Tom live in Boston near the harbour.", ["s1"], "2024-01-15T00:00:00")
        assert hits[0]["recorded_at"].endswith("Z") and isinstance(hits[0]["id"], int)
        # an aware time is kept in UTC; before the dog was mentioned it is not part of the memory
        dog = [m for m in memory.get_all(user_id="Tom")["results"] if "Biscuit" in m["memory"]]
        assert dog[0]["valid_from"] == "2024-03-02T17:00:00"
        assert all("Biscuit" not in m["memory"]
                   for m in memory.search("beagle Biscuit", user_id="Tom", as_of="2024-02-01")["results"])
        reply = memory.answer("Where does Tom live?", user_id="Tom")
        assert reply["answer"] == "Tom live in Boston near the harbour."
        assert reply["memories"][0] == {"id": hits[0]["id"], "memory": "Tom live in Boston near the harbour.",
                                        "session_id": "s1", "day": "2024-01-15 (Monday)",
                                        "score": reply["memories"][0]["score"]}
        assert memory.history(hits[0]["id"])["edges"] == []
        with pytest.raises(InputError, match="not a date"):
            memory.search("x", user_id="Tom", as_of="last spring")
        assert memory.delete(user_id="Tom", session_id="s2") == {"deleted": 1}
        assert [m["session_ids"] for m in memory.get_all(user_id="Tom")["results"]] == [["s1"]]
        assert memory.delete(user_id="Tom") == {"deleted": 1}
        assert memory.get_all(user_id="Tom") == {"results": []}
