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
from typing import Any

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
    # the text it replaced is shown with it, in the memory and in its history (mem0's history shows it too)
    assert [e["text"] for e in out["updated"]["edits"]] == ["Alice love sci-fi movies."]  # type: ignore[index]
    assert out["history"]["nodes"][0]["edits"] == out["updated"]["edits"]  # type: ignore[index]
    assert out["updated"]["edits"][0]["at"].endswith("Z")  # type: ignore[index]
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
    raw.execute("DROP INDEX sessions_hidden")  # nor what readers are shown (version 8)
    raw.execute("ALTER TABLE sessions DROP COLUMN shown")
    raw.execute("DROP INDEX nodes_held")
    raw.execute("ALTER TABLE nodes DROP COLUMN held")
    raw.execute("ALTER TABLE nodes DROP COLUMN metadata")  # nor a memory's own metadata (version 9)
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()
    with Memory(tmp_path / "old.db", profile="scripted") as old:
        old.add("I work as a nurse.", user_id="ana", metadata={"topic": "work"})
        assert [m["metadata"] for m in old.get_all(user_id="ana")["results"]] == [{"topic": "work"}]


def mem0_scoped_program(location: str) -> dict[str, object]:
    """What a mem0 2.x program writes: scopes by agent and run, reads through ``filters``, keeps some messages
    as written (``infer=False``), asks for a least score, the first few memories and new text by ``text``;
    ``timestamp`` in Unix seconds is the form mem0's hosted platform takes (its open-source ``add`` refuses it)."""
    from promem_fast import Memory

    m = Memory(location, profile="scripted")
    m.add([{"role": "system", "content": "You recommend films."},
           {"role": "user", "content": "I love sci-fi movies."},
           {"role": "assistant", "content": "Noted, sci-fi it is."}],
          user_id="alice", agent_id="film-bot", run_id="evening")
    m.add("I play tennis every Sunday.", user_id="alice", agent_id="coach")
    kept = m.add([{"role": "user", "content": "My locker code is 4411."}], user_id="alice", infer=False,
                 timestamp=1_700_000_000)
    again = m.add([{"role": "user", "content": "My locker code is 4411."}], user_id="alice", infer=False)
    films = m.search("What does alice like to watch?", filters={"user_id": "alice", "agent_id": "film-bot"})
    evening = m.get_all(filters={"user_id": "alice", "run_id": "evening"})
    close = m.search("locker code", filters={"user_id": "alice"}, threshold=0.5)
    first_two = m.get_all(filters={"user_id": "alice"}, top_k=2)
    renamed = m.update(first_two["results"][0]["id"], text="Alice loves science fiction.")
    coach_gone = m.delete_all(user_id="alice", agent_id="coach")
    left = m.get_all(user_id="alice")
    m.close()
    return locals()


def test_mem0_scoped_program_runs_and_keeps_verbatim_messages_as_written(store_at: str) -> None:
    out = mem0_scoped_program(store_at)
    # agent_id and run_id scope what filters find
    assert [r["memory"] for r in out["films"]["results"]] == ["Alice love sci-fi movies."]  # type: ignore[index]
    assert [r["metadata"] for r in out["evening"]["results"]] == [  # type: ignore[index]
        {"agent_id": "film-bot", "run_id": "evening"}]
    # infer=False: the message itself, dated by the Unix time given (1,700,000,000 s is 2023-11-14 22:13:20
    # UTC), and the same message twice is two memories, not a duplicate merged away
    (event,) = out["kept"]["results"]  # type: ignore[index]
    assert event["memory"] == "My locker code is 4411." and event["event"] == "add"
    assert [e["event"] for e in out["again"]["results"]] == ["add"]  # type: ignore[index]
    verbatim = [r for r in out["left"]["results"] if r["memory"] == "My locker code is 4411."]  # type: ignore[index]
    assert len(verbatim) == 2 and verbatim[0]["valid_from"] == "2023-11-14T22:13:20"
    # threshold: only memories that close to the query; the film and tennis memories are not
    assert {r["memory"] for r in out["close"]["results"]} == {"My locker code is 4411."}  # type: ignore[index]
    assert all(r["score"] >= 0.5 for r in out["close"]["results"])  # type: ignore[index]
    assert len(out["first_two"]["results"]) == 2  # type: ignore[index]
    assert out["renamed"]["memory"] == "Alice loves science fiction."  # type: ignore[index]
    # delete_all by agent removes that agent's session only
    assert out["coach_gone"] == {"deleted": 1}
    assert [r["memory"] for r in out["left"]["results"]] == [  # type: ignore[index]
        "Alice loves science fiction.", "My locker code is 4411.", "My locker code is 4411."]


def test_verbatim_messages_need_no_language_model(tmp_path: Path) -> None:
    """infer=False stores with the embedder alone: an unreachable chat model is never asked."""
    from promem_fast import EngineConfig, Memory

    config = EngineConfig.profile("scripted").with_overrides(
        ["llm.backend=openai", "llm.base_url=http://127.0.0.1:9/v1", "llm.model=nowhere", "llm.max_retries=0"])
    with Memory(tmp_path / "m.db", config=config) as memory:
        memory.add("I keep bees in Porto.", user_id="ana", infer=False)
        memory.add("I keep bees in Porto.", user_id="ana", infer=False)
        assert [r["memory"] for r in memory.get_all(user_id="ana")["results"]] == [
            "I keep bees in Porto.", "I keep bees in Porto."]
        assert memory.search("bees", user_id="ana")["results"][0]["memory"] == "I keep bees in Porto."


def test_mem0_arguments_promem_cannot_take_are_refused_with_the_reason(tmp_path: Path) -> None:
    from promem_fast import Memory
    from promem_fast.errors import ConfigError

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        with pytest.raises(InputError, match="keeps memory per user"):
            memory.add("I like tea.", agent_id="helper")
        with pytest.raises(InputError, match="there is no memory 41"):
            memory.delete(41)
        assert memory.search("tea", user_id="ana", rerank=False) == {"results": []}  # mem0's default, taken
        with pytest.raises(InputError, match="no reranker stage") as rerank:
            memory.search("tea", user_id="ana", rerank=True)
        assert rerank.value.field == "rerank"
        with pytest.raises(InputError, match="date or timestamp"):
            memory.add("I like tea.", user_id="ana", date="2024-01-01", timestamp=1)
        with pytest.raises(InputError, match="whole number of memories, not -1"):
            memory.get_all(user_id="ana", top_k=-1)
        with pytest.raises(InputError, match="agent_id 'a' and the agent_id 'b'"):
            memory.add("I like tea.", user_id="ana", agent_id="a", metadata={"agent_id": "b"})
    with pytest.raises(ConfigError, match="'vector_store' is mem0's configuration"):
        Memory.from_config({"vector_store": {"provider": "faiss", "config": {"path": "x"}}})


def test_from_config_takes_promem_sections(tmp_path: Path) -> None:
    from promem_fast import Memory

    with Memory.from_config({"profile": "scripted", "ranking": {"when": False}}, path=tmp_path / "m.db") as memory:
        assert memory.config.ranking.when is False and memory.config.llm.backend == "scripted"
        memory.add("I keep bees.", user_id="ana")
        assert memory.search("bees", user_id="ana")["results"][0]["memory"] == "Ana keep bees."


def test_async_memory_runs_the_writes_in_the_order_made(tmp_path: Path) -> None:
    """Writes awaited together run one at a time in the order they were made: the delete_all removes the first
    add's memory and not the second's; a read awaited after them sees all they stored."""
    import asyncio

    from promem_fast import AsyncMemory

    async def program() -> tuple[list[Any], dict[str, Any]]:
        async with AsyncMemory(tmp_path / "m.db", profile="scripted") as memory:
            done = await asyncio.gather(memory.add("I moved to Denver.", user_id="tom", date="2024-03-02"),
                                        memory.delete_all(user_id="tom"),
                                        memory.add("I keep bees.", user_id="tom", date="2024-03-03"))
            listed = await memory.get_all(user_id="tom")
        return done, listed

    (added, gone, bees), listed = asyncio.run(program())
    assert [e["memory"] for e in added["results"]] == ["Tom moved to Denver."]
    assert gone == {"deleted": 1} and [e["memory"] for e in bees["results"]] == ["Tom keep bees."]
    assert [(r["memory"], r["valid_from"]) for r in listed["results"]] == [("Tom keep bees.", "2024-03-03T00:00:00")]


def test_an_add_whose_model_does_not_answer_raises_and_stores_nothing(tmp_path: Path) -> None:
    """A chat model server that is down: add says the session was not stored (mem0 raises too), rather than
    reporting it added with no memories; the store keeps nothing of it, and the same add works later."""
    from promem_fast import EngineConfig, Memory
    from promem_fast.errors import SessionFailed

    config = EngineConfig.profile("scripted").with_overrides(
        ["llm.backend=openai", "llm.base_url=http://127.0.0.1:9/v1", "llm.model=nowhere", "llm.max_retries=0"])
    with Memory(tmp_path / "m.db", config=config) as memory:
        with pytest.raises(SessionFailed, match="session 's1' of 'ana' was not stored: BackendUnavailable"):
            memory.add("I keep bees in Porto.", user_id="ana", session_id="s1")
        assert memory.store.sessions("ana") == [] and memory.get_all(user_id="ana") == {"results": []}
    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        again = memory.add("I keep bees in Porto.", user_id="ana", session_id="s1")
        assert again["added"] and [e["memory"] for e in again["results"]] == ["Ana keep bees in Porto."]
        assert again["failed_steps"] == []


def test_an_add_says_which_steps_failed(tmp_path: Path) -> None:
    """A draft reply that is no JSON at all, every try: the session is stored with what the other steps gave,
    and the failed step is named in what the store reports for it (``add``'s ``failed_steps``)."""
    from promem_fast import EngineConfig
    from promem_fast.engine import Engine
    from promem_fast.io import session_from_dict
    from promem_fast.store import MemoryStore
    from promem_fast.testing.llm_scripted import ScriptedLLM

    config = EngineConfig.profile("scripted")
    session = session_from_dict({"session_id": "s1", "user": "ana", "messages": [
        {"role": "user", "content": "I keep bees in Porto."}, {"role": "assistant", "content": "Lovely."}]})
    with Engine(config, llm=ScriptedLLM(rules={"draft": lambda fields: "facts: bees, bees, bees"})) as engine:
        (graph,) = engine.extract([session])
    with MemoryStore(tmp_path / "m.db", config) as store:
        store.add([graph])
        assert store.sessions("ana") == ["s1"]  # stored all the same
        failed = store.session_failures("ana", "s1")
        assert store.session_failures("bob", "s1") == [] and store.session_failures("ana", "s2") == []
    assert [f["stage"] for f in failed] == ["draft"] and failed[0]["item"] == "draft chunk 1/1"


@pytest.mark.slow
def test_the_cpu_default_says_once_that_its_model_is_small_and_how_to_give_it_a_real_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``Memory()`` with no profile extracts with the shipped 135M model: a program's author who left the profile
    out is told once, with the two ways to a real model, and each add still says what it got."""
    import logging

    from promem_fast import Memory

    with caplog.at_level(logging.WARNING, logger="promem_fast.memory"):
        with Memory(tmp_path / "m.db", profile="cpu") as memory:
            first = memory.add("I moved to Denver last week and started a new job as a nurse.", user_id="alice")
            memory.add("I love playing tennis on weekends with my sister Anna.", user_id="alice")
        with Memory(tmp_path / "s.db", profile="scripted") as other:
            other.add("I keep bees.", user_id="ana")
    notes = [r.getMessage() for r in caplog.records if "SmolLM2-135M" in r.getMessage()]
    assert len(notes) == 1 and 'profile="gpu"' in notes[0] and '"backend": "openai"' in notes[0]
    assert first["added"] and set(first) == {"user_id", "session_id", "added", "results", "failed_steps"}
    assert first["results"] or first["failed_steps"]  # memories, or the steps that gave none


def test_from_config_points_the_cpu_profile_at_an_openai_compatible_server(tmp_path: Path) -> None:
    """The configuration the small-model note suggests is one ``from_config`` takes as written."""
    from promem_fast import Memory

    with Memory.from_config({"profile": "cpu", "llm": {"backend": "openai", "base_url": "http://127.0.0.1:8080/v1",
                                                      "model": "MODEL"}}, path=tmp_path / "m.db") as memory:
        assert (memory.config.llm.backend, memory.config.llm.base_url, memory.config.llm.model) == (
            "openai", "http://127.0.0.1:8080/v1", "MODEL")


def test_an_expiration_date_hides_a_sessions_memories_after_that_day(tmp_path: Path) -> None:
    """mem0 2.x's ``add(..., expiration_date=)`` and ``show_expired``: after its last day a memory leaves searches,
    lists and answers as a replaced one does, still holds for a question about a time before, and shows when
    asked for."""
    import datetime

    from promem_fast import Memory

    def said(found: dict[str, Any]) -> set[str]:
        return {w for m in found["results"] for w in ("Paris", "bees", "Rome") if w in m["memory"]}

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        trip = memory.add("I am in Paris for a conference this week.", user_id="ana", timestamp="2020-01-27",
                          expiration_date=datetime.date(2020, 1, 31))
        memory.add("I keep bees in Porto.", user_id="ana", timestamp="2020-01-20")
        memory.add("I am in Rome until the end of the century.", user_id="ana", expiration_date="2099-12-31")
        assert trip["results"] and said(trip) == {"Paris"}
        assert said(memory.get_all(user_id="ana")) == {"bees", "Rome"}
        assert said(memory.search("Where is ana?", user_id="ana")) == {"bees", "Rome"}
        assert said(memory.search("Where is ana?", user_id="ana", show_expired=True)) == {"Paris", "bees", "Rome"}
        assert said(memory.get_all(user_id="ana", show_expired=True)) == {"Paris", "bees", "Rome"}
        # a question about the time it held still finds it, through its last day and not the day after
        assert "Paris" in said(memory.search("Where is ana?", user_id="ana", as_of="2020-01-31"))
        assert "Paris" not in said(memory.search("Where is ana?", user_id="ana", as_of="2020-02-01"))
        (paris,) = [m for m in memory.get_all(user_id="ana", history=True)["results"] if "Paris" in m["memory"]]
        assert paris["metadata"] == {"expiration_date": "2020-01-31"}  # mem0's key, one form of day
        # the answer abstains today, and answers from it about a day it held
        now = memory.answer("Where is ana for a conference?", user_id="ana")
        assert now["answer"] is None and not any("Paris" in m["memory"] for m in now["memories"])
        then = memory.answer("Where is ana for a conference?", user_id="ana", as_of="2020-01-30")
        assert "Paris" in then["answer"]
        with pytest.raises(InputError, match="metadata.expiration_date"):
            memory.add("I am in Oslo.", user_id="ana", expiration_date="some day soon")


def test_a_later_add_is_newer_whatever_its_generated_id(tmp_path: Path) -> None:
    """Messages added without a date are dated when they arrive, and adds within one second keep their order:
    living in Porto, added after living in Lisbon, replaces it, for every user (the session ids ``add`` makes up
    must not decide which one is newer)."""
    from promem_fast import Memory

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        users = [f"user{i}" for i in range(8)]
        for user in users:
            memory.add("I live in a small flat in Lisbon near the river.", user_id=user)
            memory.add("I live in a small flat in Porto near the river.", user_id=user)
        for user in users:
            (now,) = memory.get_all(user_id=user)["results"]
            assert "Porto" in now["memory"] and now["valid_from"] is not None
            (lisbon,) = [m for m in memory.get_all(user_id=user, history=True)["results"] if "Lisbon" in m["memory"]]
            assert lisbon["superseded_by"] == now["id"]


def test_messages_that_carry_their_own_times_are_dated_by_them_not_by_their_arrival(tmp_path: Path) -> None:
    from promem_fast import Memory

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        memory.add([{"role": "user", "content": "I adopted a beagle named Biscuit.",
                     "timestamp": "2023-05-20T10:00:00"},
                    {"role": "assistant", "content": "Biscuit is a lovely name!"}], user_id="ana")
        memory.add([{"role": "user", "content": "I keep bees in Porto."}], user_id="ana", date="2022-01-02")
        days = {m["memory"]: m["valid_from"][:10] for m in memory.get_all(user_id="ana")["results"]}
    assert sorted(days.values()) == ["2022-01-02", "2023-05-20"]


def test_an_expiry_given_on_a_session_built_by_hand_is_kept_as_a_day_or_refused(tmp_path: Path) -> None:
    """A ``Session`` object does not pass through the input reader: the store reads its expiry day itself, so
    Unix seconds (1,580,428,800 s is 2020-01-31 00:00 UTC) still mean that day and an unreadable one is refused."""
    from promem_fast import Memory
    from promem_fast.types import Session, Turn

    def trip(sid: str, expires: Any) -> Session:
        said = Turn(turn_id=0, role="user", text="I am in Paris for a conference this week.")
        return Session(session_id=sid, user="ana", turns=(said,), timestamp="2020-01-27T09:00:00",
                       metadata={"expiration_date": expires})

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        memory.add(trip("t1", 1_580_428_800), user_id="ana")
        (paris,) = memory.get_all(user_id="ana", show_expired=True)["results"]
        assert paris["metadata"] == {"expiration_date": "2020-01-31"}
        assert memory.search("Where is ana?", user_id="ana", as_of="2020-01-30")["results"]  # it held then
        assert not memory.search("Where is ana?", user_id="ana")["results"]  # and not now
        with pytest.raises(InputError, match="metadata.expiration_date"):
            memory.add(trip("t2", "some day"), user_id="ana")


def test_explain_says_where_each_ranking_put_a_memory(tmp_path: Path) -> None:
    """mem0's ``search(explain=True)``: each hit says its place in the dense and lexical rankings (1 = best, none
    where that side did not propose it), the days the question names and its place among the memories said
    then, and the reciprocal rank fusion score, ``sum(1 / (60 + rank))``, that ordered the results."""
    from promem_fast import Memory

    with Memory(tmp_path / "m.db", profile="scripted") as memory:
        memory.add("I keep bees in Porto.", user_id="ana", date="2024-05-12")
        memory.add("I work as a nurse.", user_id="ana", date="2024-01-03")
        plain = memory.search("bees", user_id="ana")["results"]
        bees, nurse = memory.search("bees", user_id="ana", explain=True)["results"]
        (timed, *_) = memory.search("What did she do in May 2024?", user_id="ana", explain=True)["results"]
    assert "score_details" not in plain[0] and [m["id"] for m in plain] == [bees["id"], nurse["id"]]
    assert bees["score_details"] == {"semantic_score": bees["score"], "dense_rank": 1, "lexical_rank": 1,
                                     "time_rank": None, "window": None, "fused_score": round(2 / 61, 6)}
    assert nurse["score_details"] == {"semantic_score": nurse["score"], "dense_rank": 2, "lexical_rank": None,
                                      "time_rank": None, "window": None, "fused_score": round(1 / 62, 6)}
    assert timed["memory"] == "Ana keep bees in Porto."
    assert timed["score_details"]["window"] == ["2024-05-01", "2024-05-31"] and timed["score_details"]["time_rank"] == 1
