"""Private by design, on real files: delete leaves no trace in the store, its WAL or its index files even where
SQLite's build default keeps deleted bytes; every file is its owner's alone whatever the umask; an encrypted
store holds no plaintext and a wrong key is one line; names that the service could not address are refused
wherever they enter; import names the field that is bad."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from conftest import make_session, scripted_config, write_jsonl
from promem_fast.cli import main
from promem_fast.errors import InputError
from promem_fast.store import MemoryStore, StoreError
from store_helpers import graph

SCRIPTED = ["--profile", "scripted", "--no-progress"]

# Words that occur nowhere else: finding any of them in a file means deleted memory is still on disk.
MARKERS = ["Quillfeather", "Zanzibarite", "Okonkwo-Vasquez", "sess-ultraviolet-17", "sess-ultraviolet-18"]


def marker_graphs() -> list:
    return [graph("sess-ultraviolet-17", "Okonkwo-Vasquez", ["Okonkwo-Vasquez keeps a Quillfeather journal.",
                                                            "Okonkwo-Vasquez collects Zanzibarite stones."]),
            graph("sess-ultraviolet-18", "Okonkwo-Vasquez", ["Okonkwo-Vasquez reads Quillfeather poetry."])]


KEPT = graph("kept-1", "Maya", ["Maya adopted a beagle named Biscuit."])


@pytest.fixture
def insecure_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new SQLite connection starts with secure_delete OFF, as SQLite's own build default has it (this
    machine's library happens to be built with it on, which the project must not rely on)."""
    real = sqlite3.connect

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        db = real(*args, **kwargs)  # type: ignore[arg-type]
        db.execute("PRAGMA secure_delete = OFF")
        return db
    monkeypatch.setattr(sqlite3, "connect", connect)


def files_of(db: Path) -> list[Path]:
    """The store file, its SQLite side files and its saved vector indexes."""
    found = [p for p in db.parent.iterdir() if p.name.startswith(db.name) and p.is_file()]
    index_dir = db.with_name(db.name + ".vectors")
    return found + (sorted(index_dir.iterdir()) if index_dir.is_dir() else [])


def traces(db: Path) -> dict[str, list[str]]:
    """Which markers (and the kept user's words) each file holds, as bytes on disk."""
    out = {}
    for path in files_of(db):
        data = path.read_bytes()
        out[path.name] = [m for m in [*MARKERS, "Biscuit"] if m.encode() in data]
    return out


def test_sqlite_default_really_is_off_under_the_fixture(insecure_default: None, tmp_path: Path) -> None:
    """The fixture stands for an SQLite whose build default is off (checked, so the tests below mean it)."""
    from promem_fast.persistence.connection import open_db

    raw = sqlite3.connect(tmp_path / "x.db")
    assert raw.execute("PRAGMA secure_delete").fetchone()[0] == 0
    raw.close()
    db = open_db(tmp_path / "y.db")
    assert db.execute("PRAGMA secure_delete").fetchone()[0] == 1
    db.close()


def test_a_deleted_user_leaves_no_trace_in_the_file_the_wal_or_the_index(insecure_default: None,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.db.cache_min_vectors = 1  # save every user's index on close, so index files exist to check
        store.add([*marker_graphs(), KEPT])
        store.search("Okonkwo-Vasquez", "journal", k=2)
        store.search("Maya", "dog", k=1)
    assert (path.with_name("memory.db.vectors")).is_dir()
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.search("Okonkwo-Vasquez", "journal", k=2)  # reads its saved index
        assert store.delete(user="Okonkwo-Vasquez") == 3
        while_open = traces(path)  # the store is still open: its WAL is there
        assert (path.with_name("memory.db-wal")).exists()
        assert store.users() == ["Maya"]
    after_close = traces(path)
    for seen in (while_open, after_close):
        assert {name: found for name, found in seen.items() if set(found) - {"Biscuit"}} == {}, seen
    assert "Biscuit" in after_close["memory.db"]  # the search above is real: kept memory is found


def test_a_deleted_session_leaves_no_trace_either(insecure_default: None, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.add([graph("keep-2", "Ann", ["Ann plays the oboe."]),
                   graph("sess-ultraviolet-17", "Ann", ["Ann owns a Zanzibarite ring."])])
        assert store.delete(user="Ann", session="sess-ultraviolet-17") == 1
        assert os.path.getsize(f"{path}-wal") == 0  # checkpointed and truncated
        data = path.read_bytes()
        assert b"Zanzibarite" not in data and b"sess-ultraviolet-17" not in data and b"oboe" in data


def test_a_deleted_memory_takes_its_details_with_it(insecure_default: None, tmp_path: Path) -> None:
    """Deleting one memory of a session removes the details anchored to it alone from the files; a detail
    it shares with a memory that stays, stays, and the kept memory keeps its details through export and
    import."""
    path = tmp_path / "memory.db"
    session = graph("keep-3", "Ann", ["Ann owns a ring.", "Ann plays the oboe."],
                    details=[["Zanzibarite stone", "bought in Porto"], ["cane reeds"]])
    session.nodes[1].details = [1, 2]  # "bought in Porto" is anchored to both memories
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.add([session])
        ring = next(h.node_id for h in store.hits("Ann") if h.text == "Ann owns a ring.")
        assert store.delete(user="Ann", node=ring) == 1
        assert {name: found for name, found in traces(path).items() if found} == {}
        assert [(h.text, h.details) for h in store.hits("Ann")] == [("Ann plays the oboe.",
                                                                     ["bought in Porto", "cane reeds"])]
        store.export(tmp_path / "ann.jsonl")
    assert "Zanzibarite" not in (tmp_path / "ann.jsonl").read_text()
    with MemoryStore(tmp_path / "copy.db", scripted_config(), update_judge="off") as copy:
        copy.import_(tmp_path / "ann.jsonl")
        assert [(h.text, h.details) for h in copy.hits("Ann")] == [("Ann plays the oboe.",
                                                                    ["bought in Porto", "cane reeds"])]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_store_wal_index_and_export_are_private_whatever_the_umask(open_umask: None, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.db.cache_min_vectors = 1
        store.add([KEPT])
        store.search("Maya", "dog", k=1)
        assert {p.name: mode(p) for p in files_of(path)} == {
            "memory.db": 0o600, "memory.db-wal": 0o600, "memory.db-shm": 0o600}
    index_dir = tmp_path / "memory.db.vectors"
    assert mode(index_dir) == 0o700 and [mode(p) for p in index_dir.iterdir()] == [0o600]
    assert main(["export", str(tmp_path / "dump.jsonl"), "--db", str(path)]) == 0
    assert mode(tmp_path / "dump.jsonl") == 0o600


def test_an_existing_world_readable_store_is_narrowed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.add([KEPT])
    path.chmod(0o644)
    with MemoryStore(path, scripted_config(), read_only=True) as store:
        assert store.users() == ["Maya"]
    assert mode(path) == 0o600


def key_file(path: Path, text: str = "6f" * 32) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def test_an_encrypted_store_holds_no_plaintext_and_writes_no_index_file(tmp_path: Path) -> None:
    pytest.importorskip("sqlcipher3", reason="the 'encrypt' extra (sqlcipher3) is not installed")
    key, path = key_file(tmp_path / "store.key"), tmp_path / "secret.db"
    with MemoryStore(path, scripted_config(), update_judge="off", key_file=key) as store:
        store.db.cache_min_vectors = 1
        store.add(marker_graphs())
        assert store.search("Okonkwo-Vasquez", "Zanzibarite stones", k=1)[0].session_id == "sess-ultraviolet-17"
    assert {name: found for name, found in traces(path).items() if found} == {}
    assert not (tmp_path / "secret.db.vectors").exists()
    with MemoryStore(path, scripted_config(), read_only=True, key_file=key) as store:
        assert store.sessions("Okonkwo-Vasquez") == ["sess-ultraviolet-17", "sess-ultraviolet-18"]


def test_a_wrong_or_missing_key_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sqlcipher3", reason="the 'encrypt' extra (sqlcipher3) is not installed")
    key, path = key_file(tmp_path / "store.key"), tmp_path / "secret.db"
    with MemoryStore(path, scripted_config(), update_judge="off", key_file=key) as store:
        store.add([KEPT])
    wrong = key_file(tmp_path / "wrong.key", "70" * 32)
    capsys.readouterr()
    base = ["search", "dog", "--db", str(path), "--user", "Maya", *SCRIPTED]
    assert main([*base, "--key-file", str(wrong)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"promem: {path}: cannot be opened with the key in {wrong} (wrong key, or the store is not encrypted)"]
    assert main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--key-file" in err[0] and str(path) in err[0]
    assert main([*base, "--key-file", str(tmp_path / "nope.key")]) == 2
    assert capsys.readouterr().err.strip() == f"promem: {tmp_path / 'nope.key'}: no such key file"
    wrong.chmod(0o644)
    with pytest.raises(StoreError, match="readable by others"):
        MemoryStore(path, scripted_config(), key_file=wrong)


@pytest.mark.parametrize("user", ["..", "Ann/Lee", "Ann\\Lee", "tab\there", "x" * 300])
def test_extract_refuses_a_user_name_the_service_could_not_address(user: str, tmp_path: Path) -> None:
    session = make_session("s1", user, [("I like tea.", "Noted.")])
    source = write_jsonl(tmp_path / "in.jsonl", [session])
    out, db = tmp_path / "g.jsonl", tmp_path / "m.db"
    assert main(["extract", str(source), "-o", str(out), "--db", str(db), *SCRIPTED]) == 1  # its only session failed
    rejects = [json.loads(line) for line in out.with_name("g.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(1, "user")]
    with MemoryStore(db, read_only=True) as store:
        assert store.users() == []


@pytest.mark.parametrize(("field", "value"), [("user", ".."), ("user", "Ann/Lee"), ("session_id", "a/../b"),
                                              ("session_id", "..")])
def test_ingest_skips_a_graph_whose_names_are_path_like(field: str, value: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    record = KEPT.to_dict() | {field: value}
    graphs = tmp_path / "g.jsonl"
    graphs.write_text(json.dumps(KEPT.to_dict() | {"session_id": "ok-1"}) + "\n" + json.dumps(record) + "\n")
    assert main(["ingest", str(graphs), "--db", str(tmp_path / "m.db"), "--update-judge", "off", *SCRIPTED]) == 0
    said = capsys.readouterr().out
    assert "added 1 sessions" in said and "skipped 1 bad lines" in said
    assert "g.jsonl:2" in caplog.text and f"field '{field}'" in caplog.text
    with MemoryStore(tmp_path / "m.db", read_only=True) as store:
        assert store.users() == ["Maya"] and store.sessions("Maya") == ["ok-1"]


def export_lines(tmp_path: Path) -> list[dict]:
    with MemoryStore(tmp_path / "src.db", scripted_config(), update_judge="off") as store:
        store.add([KEPT])
        store.export(tmp_path / "dump.jsonl")
    return [json.loads(line) for line in (tmp_path / "dump.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("vectors", "problem"), [(base64.b64encode(b"\0" * 12).decode(), "ValueError"),
                                                  ("@@not base64@@", "Error"), (42, "TypeError")])
def test_import_names_the_vectors_field_when_vectors_are_bad(vectors: object, problem: str,
                                                              tmp_path: Path) -> None:
    header, session = export_lines(tmp_path)
    session["vectors"] = vectors
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(header) + "\n" + json.dumps(session) + "\n")
    with MemoryStore(tmp_path / "dst.db", scripted_config()) as store, pytest.raises(InputError) as info:
        store.import_(bad)
    assert (info.value.line, info.value.field, info.value.session_id) == (2, "vectors", "kept-1")
    assert problem in info.value.message


@pytest.mark.parametrize(("key", "value"), [("user", "Ann/Lee"), ("tenant", ".."), ("user", "a\u2028b")])
def test_import_refuses_path_like_names(key: str, value: str, tmp_path: Path) -> None:
    header, session = export_lines(tmp_path)
    session[key] = value
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(header) + "\n" + json.dumps(session) + "\n")
    with MemoryStore(tmp_path / "dst.db", scripted_config()) as store:
        with pytest.raises(InputError) as info:
            store.import_(bad)
        assert (info.value.line, info.value.field) == (2, key)
        assert store.users(tenant=session["tenant"]) == []


def test_keys_list_on_a_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "list", "--db", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"promem: {tmp_path}: is a folder, not a store file"


def test_the_service_tables_are_encrypted_with_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sqlcipher3", reason="the 'encrypt' extra (sqlcipher3) is not installed")
    key, path = key_file(tmp_path / "store.key"), tmp_path / "secret.db"
    assert main(["keys", "create", "--db", str(path), "--tenant", "acme", "--key-file", str(key)]) == 0
    created = capsys.readouterr().out.strip()
    assert main(["keys", "list", "--db", str(path), "--key-file", str(key)]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] == "acme"
    data = b"".join(p.read_bytes() for p in files_of(path))
    assert b"serve_keys" not in data and b"acme" not in data and created.split("_")[1].encode() not in data
    assert main(["keys", "list", "--db", str(path)]) == 2  # without the key: one line, no traceback
    assert "--key-file" in capsys.readouterr().err
