"""Privacy on every surface, on real files: an encrypted store's memory never reaches a disk in plain text
unless the operator asks for it by name, every command reads an encrypted store with ``--key-file`` or
``PROMEM_KEY_FILE``, and a deleted memory leaves none of its words in what its session keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, make_session, scripted_config
from promem_fast.cli import main
from promem_fast.engine import Engine
from promem_fast.store import MemoryStore
from test_privacy_store import files_of, key_file, marker_graphs

TURNS = [("I keep a Quillfeather journal every night.", "Nice!"),
         ("I adopted a beagle named Biscuit last Saturday.", "Congratulations!")]


def encrypted(tmp_path: Path) -> tuple[Path, Path]:
    pytest.importorskip("sqlcipher3", reason="the 'encrypt' extra (sqlcipher3) is not installed")
    key, path = key_file(tmp_path / "store.key"), tmp_path / "secret.db"
    with MemoryStore(path, scripted_config(), update_judge="off", key_file=key) as store:
        store.add(marker_graphs())
    return key, path


def test_the_service_stages_an_encrypted_stores_export_in_memory_only(tmp_path: Path) -> None:
    from promem_fast.serve.service import Service

    key, path = encrypted(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    service = Service(path, scripted_config(), key_file=key)
    try:
        with service.export("default") as staged:
            where = os.readlink(f"/proc/self/fd/{staged.fileno()}")
            assert not where.startswith(str(tmp_path)), where  # no file on the store's disk, named or not
            assert b"Zanzibarite" in staged.read()
    finally:
        service.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_export_of_an_encrypted_store_is_refused_without_plaintext_and_says_so_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, path = encrypted(tmp_path)
    out = tmp_path / "dump.jsonl"
    assert main(["export", str(out), "--db", str(path), "--key-file", str(key)]) == 2
    err = capsys.readouterr().err
    assert "--plaintext" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    assert main(["export", str(out), "--db", str(path), "--key-file", str(key), "--plaintext"]) == 0
    assert "plain text" in capsys.readouterr().out and b"Zanzibarite" in out.read_bytes()


def promem(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promem_fast.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_list_history_and_delete_read_an_encrypted_store(tmp_path: Path, how: str) -> None:
    key, path = encrypted(tmp_path)
    flag = ["--key-file", str(key)] if how == "flag" else []
    env = {"PROMEM_KEY_FILE": str(key)} if how == "env" else {}
    listed = promem("list", "--db", str(path), "--user", "Okonkwo-Vasquez", "--json", *flag, env=env)
    assert listed.returncode == 0, listed.stderr
    memories = {json.loads(line)["memory"]: json.loads(line)["id"] for line in listed.stdout.splitlines()}
    assert set(memories) == {"Okonkwo-Vasquez keeps a Quillfeather journal.",
                             "Okonkwo-Vasquez collects Zanzibarite stones.",
                             "Okonkwo-Vasquez reads Quillfeather poetry."}
    stones = memories["Okonkwo-Vasquez collects Zanzibarite stones."]
    history = promem("history", str(stones), "--db", str(path), *flag, env=env)
    assert history.returncode == 0 and "Zanzibarite" in history.stdout, history.stderr
    deleted = promem("delete", "--db", str(path), "--user", "Okonkwo-Vasquez", "--memory-id", str(stones),
                     "--profile", "scripted", *flag, env=env)
    assert deleted.returncode == 0 and json.loads(deleted.stdout) == {"deleted": 1}, deleted.stderr
    again = promem("list", "--db", str(path), "--user", "Okonkwo-Vasquez", *flag, env=env)
    assert again.returncode == 0 and "Zanzibarite" not in again.stdout and "Quillfeather poetry" in again.stdout


def test_a_deleted_memory_leaves_no_word_in_its_sessions_events(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.db"
    graphs = Engine(scripted_config()).extract([make_session("s1", "Maya", TURNS)])
    with MemoryStore(path, scripted_config(), update_judge="off") as store:
        store.add(graphs)
        journal = next(h.node_id for h in store.hits("Maya") if "Quillfeather" in h.text)
    assert main(["delete", "--db", str(path), "--user", "Maya", "--memory-id", str(journal),
                 "--profile", "scripted"]) == 0
    data = b"".join(p.read_bytes() for p in files_of(path))
    assert b"Quillfeather" not in data  # in no table, no free page and no WAL frame
    assert b"Biscuit" in data  # the other memory of the session is kept, events included
    with MemoryStore(path, read_only=True) as store:
        (events,) = store._db.execute("SELECT events FROM sessions").fetchone()
    assert [e["text"] for e in json.loads(events)] == ["Maya adopted a beagle named Biscuit last Saturday."]
