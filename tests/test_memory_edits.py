"""Editing one memory by hand, as a mem0 2.x program does (``update(memory_id, text, metadata, expiration_date)``):
metadata of its own, which filters, expiry, lists, exports and the command line then read in place of its
session's, while the session's other memories keep the session's, on SQLite and PostgreSQL.

The expected values are read off the sessions by hand: one conversation that says two things (two memories of
one session), the metadata it was added with, and what each edit sets.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from promem_fast.errors import InputError

TWO_THINGS = [{"role": "user", "content": "I keep bees in Porto."},
              {"role": "assistant", "content": "Lovely."},
              {"role": "user", "content": "I work as a nurse."}]


def about(found: Any) -> list[str]:
    """Which of the things Ana said the memories are about, in the order given."""
    memories = found["results"] if isinstance(found, dict) else found
    return [next(w for w in ("bees", "nurse") if w in m["memory"]) for m in memories]


def two_memories(memory: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    memory.add(TWO_THINGS, user_id="ana", agent_id="life-bot", metadata={"topic": "life"}, timestamp="2024-05-01")
    bees, nurse = memory.get_all(user_id="ana")["results"]
    assert about([bees, nurse]) == ["bees", "nurse"]
    assert bees["session_ids"] == nurse["session_ids"]  # one session, two memories
    return bees, nurse


def test_metadata_given_to_one_memory_is_what_filters_and_lists_read_for_it_alone(store_at: str) -> None:
    from promem_fast import Memory

    with Memory(store_at, profile="scripted") as memory:
        bees, nurse = two_memories(memory)
        changed = memory.update(bees["id"], metadata={"topic": "hobby", "stars": 5})
        assert changed["metadata"] == {"agent_id": "life-bot", "topic": "hobby", "stars": 5}
        assert changed["memory"] == bees["memory"]  # the text stays
        assert memory.get(nurse["id"])["metadata"] == {"agent_id": "life-bot", "topic": "life"}
        assert about(memory.get_all(user_id="ana", filters={"topic": "hobby"})) == ["bees"]
        assert about(memory.get_all(user_id="ana", filters={"topic": "life"})) == ["nurse"]
        assert about(memory.search("what does ana do", user_id="ana", filters={"stars": {"gte": 4}})) == ["bees"]
        assert about(memory.search("what does ana do", user_id="ana", filters={"NOT": [{"stars": "*"}]})) == [
            "nurse"]
        # the scope it was added with still finds both, and removes both
        assert about(memory.get_all(user_id="ana", agent_id="life-bot")) == ["bees", "nurse"]
        # what the edit replaced is kept: its metadata (the text did not change)
        (edit,) = memory.get(bees["id"])["edits"]
        assert (edit["text"], edit["metadata"]) == (bees["memory"], {"agent_id": "life-bot", "topic": "life"})
        # text and metadata in one call, the later metadata merged over the earlier
        both = memory.update(bees["id"], "Ana keeps three hives in Porto.", {"stars": 4})
        assert (both["memory"], both["metadata"]) == (
            "Ana keeps three hives in Porto.", {"agent_id": "life-bot", "topic": "hobby", "stars": 4})
        assert [e["text"] for e in both["edits"]] == [bees["memory"], bees["memory"]]
        assert memory.search("hives", user_id="ana", top_k=1)["results"][0]["id"] == bees["id"]
        assert memory.delete_all(user_id="ana", agent_id="life-bot") == {"deleted": 2}


def test_an_expiration_date_given_to_one_memory_hides_it_alone_and_none_removes_it(store_at: str) -> None:
    from promem_fast import Memory

    with Memory(store_at, profile="scripted") as memory:
        bees, _ = two_memories(memory)
        assert memory.update(bees["id"], expiration_date="2024-06-30")["metadata"]["expiration_date"] == "2024-06-30"
        assert about(memory.get_all(user_id="ana")) == ["nurse"]
        assert about(memory.search("what does ana do", user_id="ana")) == ["nurse"]
        assert about(memory.get_all(user_id="ana", show_expired=True)) == ["bees", "nurse"]
        assert "bees" in about(memory.search("what does ana do", user_id="ana", as_of="2024-06-30"))  # it held
        assert memory.update(bees["id"], expiration_date=None)["metadata"] == {"agent_id": "life-bot",
                                                                                "topic": "life"}
        assert about(memory.get_all(user_id="ana")) == ["bees", "nurse"]


def test_an_edit_that_would_change_a_scope_or_says_nothing_is_refused_by_field(tmp_path: Path) -> None:
    from promem_fast import Memory

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        bees, _ = two_memories(memory)
        # a mem0 program passes the memory's metadata back whole: the scopes as they are are taken
        same = memory.update(bees["id"], metadata={**bees["metadata"], "user_id": "ana", "seen": True})
        assert same["metadata"] == {"agent_id": "life-bot", "topic": "life", "seen": True}
        for key, value in (("agent_id", "other-bot"), ("user_id", "rui"), ("run_id", "monday")):
            with pytest.raises(InputError) as refused:
                memory.update(bees["id"], metadata={key: value})
            assert refused.value.field == f"metadata.{key}"
        with pytest.raises(InputError, match="new text, metadata or an expiration_date"):
            memory.update(bees["id"])
        with pytest.raises(InputError) as not_json:
            memory.update(bees["id"], metadata={"tags": {"a", "b"}})
        assert not_json.value.field == "metadata"
        with pytest.raises(InputError) as bad_day:
            memory.update(bees["id"], expiration_date="some day")
        assert bad_day.value.field == "metadata.expiration_date"
        with pytest.raises(InputError, match="once"):
            memory.update(bees["id"], metadata={"expiration_date": "2030-01-01"}, expiration_date="2031-01-01")
        assert memory.get(bees["id"])["metadata"] == same["metadata"]  # the refused edits changed nothing


def test_a_memorys_own_metadata_travels_through_export_and_import(store_at: str, tmp_path: Path) -> None:
    from promem_fast import Memory

    with Memory(store_at, profile="scripted") as memory:
        bees, _ = two_memories(memory)
        memory.update(bees["id"], metadata={"topic": "hobby"}, expiration_date="2024-06-30")
        memory.store.export(tmp_path / "backup.jsonl")
    with Memory(tmp_path / "copy.db", profile="scripted") as copy:
        copy.store.import_(tmp_path / "backup.jsonl")
        assert about(copy.get_all(user_id="ana")) == ["nurse"]  # expired, as in the source
        listed = copy.get_all(user_id="ana", show_expired=True)["results"]
        assert [m["metadata"] for m in listed] == [
            {"agent_id": "life-bot", "topic": "hobby", "expiration_date": "2024-06-30"},
            {"agent_id": "life-bot", "topic": "life"}]
        assert about(copy.get_all(user_id="ana", filters={"topic": "hobby"}, show_expired=True)) == ["bees"]


def test_a_store_of_version_8_gains_memories_of_their_own_metadata(tmp_path: Path) -> None:
    from promem_fast import Memory
    from promem_fast.persistence.schema import SCHEMA_VERSION

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        two_memories(memory)
    raw = sqlite3.connect(tmp_path / "m.db")
    raw.execute("ALTER TABLE nodes DROP COLUMN metadata")
    raw.execute("PRAGMA user_version = 8")
    raw.commit()
    raw.close()
    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        bees, nurse = memory.get_all(user_id="ana")["results"]
        assert bees["metadata"] == nurse["metadata"] == {"agent_id": "life-bot", "topic": "life"}
        memory.update(nurse["id"], metadata={"topic": "work"})
        assert about(memory.get_all(user_id="ana", filters={"topic": "work"})) == ["nurse"]
    raw = sqlite3.connect(tmp_path / "m.db")
    assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    raw.close()


def test_promem_update_sets_metadata_and_an_expiration_date_from_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from promem_fast import Memory
    from promem_fast.cli import main

    db = tmp_path / "m.db"
    with Memory(db, profile="scripted") as memory:
        bees, nurse = two_memories(memory)
    where = ["--db", str(db), "--profile", "scripted"]

    def listed(*args: str) -> list[int]:
        assert main(["list", "--db", str(db), "--user-id", "ana", "--json", *args]) == 0
        return [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]

    assert main(["update", str(nurse["id"]), "--metadata", "topic=work", "--metadata", "hours=36", *where]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["memory"], shown["metadata"]) == (nurse["memory"], {"agent_id": "life-bot", "topic": "work",
                                                                      "hours": 36})
    assert listed("--filter", 'hours={"gt": 30}') == [nurse["id"]]
    assert main(["update", str(bees["id"]), "--expiration-date", "2024-06-30", *where]) == 0
    capsys.readouterr()
    assert listed() == [nurse["id"]]
    assert main(["update", str(bees["id"]), "--no-expiration-date", *where]) == 0
    capsys.readouterr()
    assert listed() == [bees["id"], nurse["id"]]
    assert main(["update", str(bees["id"]), "--metadata", "agent_id=other-bot", *where]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("promem: ") and "metadata.agent_id" in err and "\n" not in err
