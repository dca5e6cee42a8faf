"""A program written for mem0's Python ``Memory`` (its documented quickstart usage: ``Memory()``, ``add`` with
metadata, ``get_all``, ``get``, ``search`` by ``user_id`` and by ``filters``, ``update``, ``history``,
``delete``, ``delete_all``, ``reset``) runs against :class:`promem_fast.Memory` with only its import changed.

The program is written here in our own words from mem0's documented API. Only the environment differs: the
scripted profile (no model) and a data folder inside the test's temporary folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from promem_fast.errors import InputError


def mem0_program() -> dict[str, object]:
    """What a mem0 user writes; the one line that differs from mem0 is the import."""
    from promem_fast import Memory  # was: from mem0 import Memory

    m = Memory()
    messages = [
        {"role": "user", "content": "I love sci-fi movies."},
        {"role": "assistant", "content": "Great, I will suggest sci-fi films."},
    ]
    added = m.add(messages, user_id="alice", metadata={"category": "movies"})
    m.add("I dislike horror films.", user_id="alice", metadata={"category": "movies"})
    m.add("I play tennis every Sunday.", user_id="alice", metadata={"category": "sport"})
    everything = m.get_all(user_id="alice")
    first = everything["results"][0]
    one = m.get(first["id"])
    related = m.search("What movies does alice like?", user_id="alice")
    sport = m.search("What does alice do on weekends?", filters={"user_id": "alice", "category": "sport"},
                     limit=5)
    top = m.search("films", user_id="alice", top_k=1)
    updated = m.update(memory_id=first["id"], data="Alice loves science fiction cinema.")
    after_update = m.search("science fiction cinema", user_id="alice", top_k=1)
    history = m.history(memory_id=first["id"])
    removed = m.delete(memory_id=first["id"])
    left = m.get_all(user_id="alice")
    m.add("I live in Lisbon.", user_id="bob")
    cleared = m.delete_all(user_id="alice")
    reset = m.reset()
    after_reset = m.get_all(user_id="bob")
    return locals()


def test_mem0_quickstart_program_runs_with_only_the_import_changed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PROMEM_PROFILE", "scripted")
    out = mem0_program()
    # the default store lives under the user's data folder, private
    store = tmp_path / "data" / "promem" / "memory.db"
    assert store.is_file() and stat.S_IMODE(os.stat(store.parent).st_mode) == 0o700
    check_mem0_program(out)


def test_mem0_quickstart_program_runs_on_postgresql_named_by_the_environment(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PROMEM_PROFILE", "scripted")
    monkeypatch.setenv("PROMEM_DB_URL", pg_url)
    out = mem0_program()
    assert not (tmp_path / "data" / "promem" / "memory.db").exists()  # the database holds it all
    check_mem0_program(out)


def check_mem0_program(out: dict[str, object]) -> None:
    """What the quickstart program must have seen, on either backend."""
    assert [e["event"] for e in out["added"]["results"]] == ["add"]  # type: ignore[index]
    texts = [r["memory"] for r in out["everything"]["results"]]  # type: ignore[index]
    assert texts == ["Alice love sci-fi movies.", "Alice dislike horror films.", "Alice play tennis every Sunday."]
    assert out["one"]["memory"] == texts[0] and out["one"]["metadata"] == {"category": "movies"}  # type: ignore[index]
    related = out["related"]["results"]  # type: ignore[index]
    assert related[0]["memory"] == "Alice love sci-fi movies." and related[0]["score"] > related[-1]["score"]
    # the metadata filter keeps the sport memory only
    assert [r["memory"] for r in out["sport"]["results"]] == ["Alice play tennis every Sunday."]  # type: ignore[index]
    assert len(out["top"]["results"]) == 1  # type: ignore[index]
    assert out["updated"]["memory"] == "Alice loves science fiction cinema."  # type: ignore[index]
    # re-embedded at once: a search by the new words finds it first
    assert out["after_update"]["results"][0]["id"] == out["first"]["id"]  # type: ignore[index]
    assert out["history"]["id"] == out["first"]["id"]  # type: ignore[index]
    assert out["removed"] == {"deleted": 1}
    assert len(out["left"]["results"]) == 2  # type: ignore[index]
    assert out["cleared"] == {"deleted": 2} and out["reset"] == {"deleted": 1}
    assert out["after_reset"] == {"results": []}


def test_memory_switch_keeps_the_list_form_and_filters_check_their_input(store_at: str) -> None:
    from promem_fast import Memory

    with Memory(store_at, profile="scripted", output_format="list") as memory:
        memory.add("I keep bees in Porto.", user_id="ana", metadata={"topic": "hobby", "year": 2024})
        memory.add("I work as a nurse.", user_id="ana", metadata={"topic": "work"})
        assert [m["memory"] for m in memory.search("bees", user_id="ana", filters={"year": 2024})] == [
            "Ana keep bees in Porto."]
        assert [m["memory"] for m in memory.get_all(user_id="ana", filters={"topic": {"in": ["work"]}})] == [
            "Ana work as a nurse."]
        assert [m["memory"] for m in memory.search("job", user_id="ana", filters={"topic": {"ne": "hobby"}})] == [
            "Ana work as a nurse."]
        with pytest.raises(InputError, match="plain name"):
            memory.search("x", user_id="ana", filters={"a') OR 1=1 --": 1})
        with pytest.raises(InputError, match="give user_id"):
            memory.search("x")
        with pytest.raises(InputError, match="one of top_k, limit and k"):
            memory.search("x", user_id="ana", top_k=1, limit=2)
        with pytest.raises(InputError, match="no memory 999"):
            memory.update(999, "x")
        assert memory.get(999) is None


def test_metadata_travels_through_export_and_import_and_older_stores_gain_it(tmp_path: Path) -> None:
    import sqlite3

    from promem_fast import Memory
    from promem_fast.store import MemoryStore

    with Memory(tmp_path / "a.db", profile="scripted") as memory:
        memory.add("I keep bees in Porto.", user_id="ana", metadata={"topic": "hobby"})
        memory.store.export(tmp_path / "a.jsonl")
    with Memory(tmp_path / "b.db", profile="scripted") as copy:
        copy.store.import_(tmp_path / "a.jsonl")
        assert [m["metadata"] for m in copy.get_all(user_id="ana")["results"]] == [{"topic": "hobby"}]
        assert copy.search("bees", user_id="ana", filters={"topic": "hobby"})["results"]
    # a store written before metadata existed (schema 2) is brought up to date on open
    with MemoryStore(tmp_path / "old.db"):
        pass
    raw = sqlite3.connect(tmp_path / "old.db")
    raw.execute("ALTER TABLE sessions DROP COLUMN metadata")
    for trigger in ("insert", "update", "delete"):  # nor the full-text table of version 4
        raw.execute(f"DROP TRIGGER memory_fts_{trigger}")
    raw.execute("DROP TABLE IF EXISTS memory_fts_vocab")  # (up to version 5)
    raw.execute("DROP TABLE memory_fts")
    raw.execute("DROP INDEX nodes_merged")  # nor the index of version 5
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()
    with Memory(tmp_path / "old.db", profile="scripted") as old:
        old.add("I work as a nurse.", user_id="ana", metadata={"topic": "work"})
        assert [m["metadata"] for m in old.get_all(user_id="ana")["results"]] == [{"topic": "work"}]
