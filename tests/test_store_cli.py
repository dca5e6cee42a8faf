"""The store from the command line: ``extract --db`` then ``search``, ``ask``, ``export --db``, ``import`` and
``ingest`` of a HaluMem-schema user with the scripted backends; user errors are one line and status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import tomas_sessions, write_jsonl
from promem_fast.cli import main
from promem_fast.store import MemoryStore

SCRIPTED = ["--profile", "scripted", "--no-progress"]
MEMORY_FIELDS = {"id", "memory", "user_id", "session_ids", "valid_from", "valid_until", "recorded_at", "superseded_by",
                 "reason", "score", "details", "metadata", "links", "edits"}


def test_extract_into_a_store_then_search_ask_export_import_ingest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sessions = tomas_sessions(6)
    user = sessions[0].user
    source = write_jsonl(tmp_path / "in.jsonl", sessions)
    db, graphs = tmp_path / "memory.db", tmp_path / "graphs.jsonl"
    assert main(["extract", str(source), "-o", str(graphs), "--db", str(db), *SCRIPTED]) == 0
    with MemoryStore(db, read_only=True) as store:
        assert store.sessions(user) == [s.session_id for s in sessions]
        stored = store.hits(user, history=True)
    assert len(stored) == sum(len(json.loads(line)["nodes"]) for line in graphs.read_text().splitlines())
    capsys.readouterr()

    probe = stored[len(stored) // 2]
    assert main(["search", probe.text, "--db", str(db), "--user", user, "-k", "3", "--history", "--json",
                 *SCRIPTED]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(hits) == 3 and hits[0]["memory"] == probe.text and hits[0]["session_ids"] == [probe.session_id]
    least = hits[0]["score"]  # --threshold keeps the hits that close to the query, in the same order
    assert main(["search", probe.text, "--db", str(db), "--user", user, "-k", "3", "--history", "--json",
                 "--threshold", str(least), *SCRIPTED]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [
        h["id"] for h in hits if h["score"] >= least]

    assert main(["ask", f"What about {probe.text}", "--db", str(db), "--user", user, "--json", *SCRIPTED]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["answer"] and reply["memories"] and set(reply) == {"question", "answer", "abstained", "as_of",
                                                                    "error", "memories"}

    assert main(["search", "work", "--db", str(db), "--user-id", user, "--json", *SCRIPTED]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(hits) == 10 and all(set(h) == MEMORY_FIELDS for h in hits)  # the HTTP API's default k and shape
    assert main(["search", "work", "--db", str(db), "--user", "Nobody Atall", *SCRIPTED]) == 1
    said = capsys.readouterr()
    assert said.out == "" and said.err.strip() == f"promem: no memory for user 'Nobody Atall' in {db} (tenant default)"

    dump = tmp_path / "memory.jsonl"
    assert main(["export", str(dump), "--db", str(db)]) == 0
    assert main(["import", str(dump), "--db", str(tmp_path / "copy.db"), *SCRIPTED]) == 0
    assert main(["export", str(tmp_path / "copy.jsonl"), "--db", str(tmp_path / "copy.db")]) == 0
    assert dump.read_bytes() == (tmp_path / "copy.jsonl").read_bytes()

    lines = graphs.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([lines[0], "{torn", lines[1].replace('"nodes"', '"vertices"'), lines[2]]) + "\n")
    capsys.readouterr()
    assert main(["ingest", str(broken), "--db", str(tmp_path / "fresh.db"), "--update-judge", "off", *SCRIPTED]) == 0
    said = capsys.readouterr().out
    assert "added 2 sessions" in said and "skipped 2 bad lines" in said
    with MemoryStore(tmp_path / "fresh.db", read_only=True) as store:
        assert store.sessions(user) == [sessions[0].session_id, sessions[2].session_id]


def test_user_errors_are_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "x", "--db", str(tmp_path / "none.db"), "--user", "u", *SCRIPTED]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("promem: ") and "none.db" in err and "\n" not in err
    assert main(["ingest", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "m.db"), *SCRIPTED]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "graphs.jsonl")]) == 2
    capsys.readouterr()
    assert main(["search", "x", "--db", str(tmp_path), "--user", "u", *SCRIPTED]) == 2  # a folder, not a file
    err = capsys.readouterr().err.strip()
    assert err.startswith("promem: ") and "is a folder" in err and "\n" not in err


def test_resuming_with_a_store_adds_the_graphs_already_written(tmp_path: Path) -> None:
    sessions = tomas_sessions(4)
    source = write_jsonl(tmp_path / "in.jsonl", sessions)
    graphs, db = tmp_path / "graphs.jsonl", tmp_path / "memory.db"
    assert main(["extract", str(source), "-o", str(graphs), *SCRIPTED]) == 0  # a run without the store
    assert main(["extract", str(source), "-o", str(graphs), "--resume", "--db", str(db), *SCRIPTED]) == 0
    with MemoryStore(db, read_only=True) as store:
        assert store.sessions(sessions[0].user) == [s.session_id for s in sessions]


def test_list_history_and_delete_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import scripted_config
    from store_helpers import graph

    db = tmp_path / "memory.db"
    with MemoryStore(db, scripted_config(), update_judge="off") as store:
        store.add([graph("s1", "Ana", ["Ana keeps bees in Porto.", "Ana sings in a choir."]),
                   graph("s2", "Ana", ["Ana bought a red kayak."], timestamp="2025-02-01T09:00:00")])
    assert main(["list", "--db", str(db), "--user-id", "Ana", "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(m["memory"], m["session_ids"]) for m in listed] == [
        ("Ana keeps bees in Porto.", ["s1"]), ("Ana sings in a choir.", ["s1"]), ("Ana bought a red kayak.", ["s2"])]
    assert all(set(m) == MEMORY_FIELDS for m in listed)
    choir = listed[1]["id"]
    assert main(["history", str(choir), "--db", str(db)]) == 0
    chain = json.loads(capsys.readouterr().out)
    assert (chain["id"], [n["memory"] for n in chain["nodes"]], chain["edges"]) == (
        choir, ["Ana sings in a choir."], [])
    assert main(["delete", "--db", str(db), "--user-id", "Ana", "--memory-id", str(choir), *SCRIPTED[:2]]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 1}
    assert main(["list", "--db", str(db), "--user-id", "Ana"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["Ana keeps bees in Porto.", "Ana bought a red kayak."]
    assert main(["delete", "--db", str(db), "--user-id", "Ana", "--memory-id", str(choir), *SCRIPTED[:2]]) == 1
    assert capsys.readouterr().err.strip() == f"promem: 'Ana' has no memory #{choir} in {db}"
    assert main(["history", str(choir), "--db", str(db)]) == 1
    assert main(["delete", "--db", str(db), "--user-id", "Ana", "--session-id", "s2", *SCRIPTED[:2]]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 1}
    assert main(["list", "--db", str(db), "--user-id", "Bo"]) == 1
    assert "no memory for user 'Bo'" in capsys.readouterr().err


def test_the_mem0_verbs_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """get, update, list/search --filter, delete of a session without memories, reset, and the tenant hint."""
    from promem_fast import Memory

    db = tmp_path / "m.db"
    with Memory(db, profile="scripted", tenant="acme") as memory:
        memory.add("I keep bees in Porto.", user_id="Sharon Brown", metadata={"topic": "hobby"})
        memory.add("I work as a nurse.", user_id="Sharon Brown", metadata={"topic": "work"})
        memory.add("hello", user_id="Sharon Brown", session_id="s2")
        memory.add("I am at the Lisbon book fair today.", user_id="Sharon Brown", timestamp="2020-05-02",
                   expiration_date="2020-05-02", session_id="fair")
        assert memory.store.sessions("Sharon Brown", tenant="acme")[-2] == "s2"
        assert all("s2" not in m["session_ids"] for m in memory.get_all(user_id="Sharon Brown")["results"])
    where = ["--db", str(db), "--tenant", "acme"]
    user = ["--user-id", "Sharon Brown"]
    # the user exists under another tenant: the error says which
    assert main(["list", "--db", str(db), *user]) == 1
    assert capsys.readouterr().err.strip() == (f"promem: no memory for user 'Sharon Brown' in {db} (tenant default); "
                                               "'Sharon Brown' has memory under --tenant acme")
    # the book fair was over on 2020-05-03: listed and found only when asked for
    assert main(["list", *where, *user, "--json"]) == 0
    assert not any("fair" in json.loads(line)["memory"] for line in capsys.readouterr().out.splitlines())
    assert main(["list", *where, *user, "--json", "--show-expired"]) == 0
    assert any("fair" in json.loads(line)["memory"] for line in capsys.readouterr().out.splitlines())
    assert main(["search", "book fair", *where, *user, "--json", "--show-expired", *SCRIPTED]) == 0
    assert "fair" in json.loads(capsys.readouterr().out.splitlines()[0])["memory"]
    assert main(["search", "book fair", *where, *user, "--json", *SCRIPTED]) == 0
    assert not any("fair" in json.loads(line)["memory"] for line in capsys.readouterr().out.splitlines())
    assert main(["list", *where, *user, "--json", "--filter", "topic=work"]) == 0
    (work,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (work["memory"], work["metadata"]) == ("Sharon Brown work as a nurse.", {"topic": "work"})
    assert main(["search", "job", *where, *user, "--json", "--top-k", "5", "--filter", "topic=hobby", *SCRIPTED]) == 0
    assert [json.loads(line)["memory"] for line in capsys.readouterr().out.splitlines()] == [
        "Sharon Brown keep bees in Porto."]
    assert main(["update", str(work["id"]), "Sharon Brown works as a midwife.", *where, *SCRIPTED]) == 0
    assert json.loads(capsys.readouterr().out)["memory"] == "Sharon Brown works as a midwife."
    assert main(["get", str(work["id"]), *where]) == 0
    assert json.loads(capsys.readouterr().out)["memory"] == "Sharon Brown works as a midwife."
    assert main(["get", "999", *where]) == 1
    assert capsys.readouterr().err.strip() == f"promem: no memory #999 in {db} (tenant acme)"
    # a listed session without memories is deleted, not reported missing
    assert main(["delete", "--session-id", "s2", *where, *user, *SCRIPTED]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 0}
    with MemoryStore(db, read_only=True) as store:
        assert "s2" not in store.sessions("Sharon Brown", tenant="acme")
    # an answer from the hobby sessions only
    assert main(["ask", "Where does Sharon Brown keep bees?", *where, *user, "--json", "--filter", "topic=hobby",
                 *SCRIPTED]) == 0
    hobby = json.loads(capsys.readouterr().out)["memories"]
    assert hobby and all("bees" in m["memory"] for m in hobby)
    assert main(["ask", "Where does Sharon Brown keep bees?", *where, *user, "--json", "--filter", "topic=work",
                 *SCRIPTED]) == 0
    assert not any("bees" in m["memory"] for m in json.loads(capsys.readouterr().out)["memories"])
    # the memory of the sessions added with a topic (mem0's delete_all by agent_id, on the command line)
    assert main(["delete", "--filter", "topic=hobby", *where, *user, *SCRIPTED]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 1}
    assert main(["list", *where, *user, "--json"]) == 0
    assert [json.loads(line)["metadata"] for line in capsys.readouterr().out.splitlines()] == [{"topic": "work"}]
    with pytest.raises(SystemExit):  # one of a memory, a session and filters
        main(["delete", "--filter", "topic=work", "--session-id", "s1", *where, *user])
    capsys.readouterr()
    assert main(["reset", *where, "--yes"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 2}  # the work memory and the expired fair


def test_a_read_says_when_sessions_wait_for_judging(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run stopped after storing sessions and before judging them: the command line reads what is judged and
    says, on stderr, how many sessions are not shown and what judges them, instead of an unexplained gap."""
    from promem_fast.config import EngineConfig
    from promem_fast.engine import Engine
    from promem_fast.store.ordering import write_pending

    sessions = tomas_sessions(3)
    user = sessions[0].user
    db = tmp_path / "memory.db"
    with MemoryStore(db, EngineConfig.profile("scripted"), profile="scripted") as store, \
            Engine(EngineConfig.profile("scripted")) as engine:
        first, *rest = engine.extract(sessions)
        store.add([first], engine=engine)
        write_pending(store, "default", rest, store._embed_graphs(rest))  # stored, their verdicts to come
        judged = {h.text for h in store.hits(user)}
    capsys.readouterr()
    assert main(["list", "--db", str(db), "--user", user, "--json"]) == 0
    out = capsys.readouterr()
    assert {json.loads(line)["memory"] for line in out.out.splitlines()} == judged == {n.text for n in first.nodes}
    assert f"2 session(s) of {user!r} wait for update judging and are not shown yet" in out.err
    assert main(["extract", str(write_jsonl(tmp_path / "in.jsonl", sessions)), "-o", str(tmp_path / "g.jsonl"),
                 "--db", str(db), *SCRIPTED]) == 0  # run again: the stored sessions are judged
    capsys.readouterr()
    assert main(["list", "--db", str(db), "--user", user]) == 0
    assert "wait for update judging" not in capsys.readouterr().err
