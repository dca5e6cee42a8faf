"""The readers of untrusted files under a coverage-guided fuzzer (a short atheris smoke; ``make fuzz`` runs it
longer), and each input the fuzzer found crashing them, kept as a regression test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, scripted_config
from promem_fast.errors import InputError
from promem_fast.store import MemoryStore
from store_helpers import graph

RUNS = int(os.environ.get("PROMEM_ATHERIS_RUNS", "1500"))

SESSION_SEED = (b'{"session_id":"s1","user":"Ann","turns":[{"role":"user","text":"I like tea."},'
                b'{"role":"assistant","text":"ok","turn_id":0}]}\n'
                b'{"session_id":"s2","user":"Bob","messages":[{"role":"user","content":"hi"}]}\n')


def export_of(tmp_path: Path) -> bytes:
    with MemoryStore(tmp_path / "src.db", scripted_config(), update_judge="off") as store:
        store.add([graph("a1", "Ann", ["Ann likes tea.", "Ann owns a cat."], edges=[(0, 1, "temporal")],
                         details=[["tea"]]), graph("a2", "Ann", ["Ann now likes coffee."])])
        store.export(tmp_path / "seed.jsonl")
    return (tmp_path / "seed.jsonl").read_bytes()


@pytest.mark.parametrize("target", ["jsonl", "import"])
def test_atheris_smoke_finds_no_crash(target: str, tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="atheris (the dev extra) is not installed")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "seed").write_bytes(SESSION_SEED if target == "jsonl" else export_of(tmp_path))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz_targets.py"), target, f"-runs={RUNS}",
                           "-seed=7", f"-artifact_prefix={tmp_path}/", str(corpus)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = re.search(r"Done (\d+) runs", done.stderr)
    assert ran is not None and int(ran.group(1)) == RUNS
    assert not list(tmp_path.glob("crash-*"))


def import_bytes(tmp_path: Path, data: bytes) -> InputError:
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    with MemoryStore(tmp_path / "dst.db", scripted_config(), update_judge="off") as store:
        with pytest.raises(InputError) as info:
            store.import_(path)
        assert store.users() == []
    str(info.value).encode("utf-8")
    return info.value


def test_import_of_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    """Found by atheris: one byte flipped inside a session line raised UnicodeDecodeError."""
    header, first, *rest = export_of(tmp_path).split(b"\n")
    error = import_bytes(tmp_path, b"\n".join([header, first.replace(b"Ann likes", b"Ann \xbf likes"), *rest]))
    assert error.line == 2 and "UTF-8" in error.message


def test_import_of_a_session_with_two_nodes_of_one_id_names_the_line(tmp_path: Path) -> None:
    """Found by atheris: a node id changed to its neighbour's raised sqlite3.IntegrityError."""
    header, first, *rest = export_of(tmp_path).split(b"\n")
    record = json.loads(first)
    record["session"]["nodes"][1]["id"] = record["session"]["nodes"][0]["id"]
    error = import_bytes(tmp_path, b"\n".join([header, json.dumps(record).encode(), *rest]))
    assert (error.line, error.session_id) == (2, "a1") and "UNIQUE" in error.message


@pytest.mark.parametrize(("header", "field"), [
    ({"format": "promem-store", "version": "1", "dim": 256}, "version"),
    ({"format": "promem-store", "version": 1, "dim": "256"}, "dim"),
    ({"format": "promem-store", "version": 1, "dim": -3}, "dim"),
    ({"format": "promem-store", "version": 1, "dim": 10**12}, "dim"),
    ({"format": "promem-\ud800", "version": 1}, "format"),
])
def test_import_of_a_bad_header_names_the_field(header: dict, field: str, tmp_path: Path) -> None:
    error = import_bytes(tmp_path, json.dumps(header).encode() + b"\n")
    assert (error.line, error.field) == (1, field)
