"""The store across processes: a writer process and a reader here on one file (WAL), and a writer killed
with SIGKILL inside a session's transaction, after which the store is as it was before that session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, tomas_sessions, scripted_config, write_jsonl
from promem_fast.store import MemoryStore
from store_helpers import NODES_PER_SESSION, worker_graph

HELPER = Path(__file__).with_name("store_helpers.py")


def start_writer(db: Path, n: int, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{Path(__file__).parent}"}
    return subprocess.Popen([sys.executable, str(HELPER), str(db), str(n), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def wait_for(proc: subprocess.Popen[str], line: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        got = proc.stdout.readline()
        if got.strip() == line:
            return
        if not got and proc.poll() is not None:
            raise AssertionError(f"writer exited ({proc.returncode}) before {line!r}: {proc.stderr.read()}")
    raise AssertionError(f"no {line!r} within {timeout} s")


def counts(store: MemoryStore) -> dict[str, int]:
    out: dict[str, int] = {}
    for hit in store.hits("w"):
        out[hit.session_id] = out.get(hit.session_id, 0) + 1
    return out


def test_a_reader_process_only_ever_sees_whole_sessions_while_a_writer_adds(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    MemoryStore(db, scripted_config()).close()  # created, so the reader can open it read-only at once
    writer = start_writer(db, 12)
    seen: set[int] = set()
    with MemoryStore(db, scripted_config(), read_only=True) as reader:
        for _ in range(2000):  # bounded: the writer finishes long before
            now = counts(reader)
            assert all(n == NODES_PER_SESSION for n in now.values()), now
            seen.add(len(now))
            hits = reader.search("w", "fact 3 of session 5 topic5 item3", k=3)
            assert all(h.superseded_by is None for h in hits)
            if len(now) == 12:
                break
            time.sleep(0.005)
        assert writer.wait(timeout=120) == 0
        assert len(counts(reader)) == 12
    assert len(seen) > 2, "the reader never observed the store between sessions"


def test_kill_9_inside_a_session_leaves_no_torn_session_and_ingest_resumes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    writer = start_writer(db, 10, "--pause-in", "4")
    wait_for(writer, "inside 4")  # session 4's rows are written, its transaction is open
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    with MemoryStore(db, scripted_config(), update_judge="off") as store:
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert counts(store) == {f"w{i}": NODES_PER_SESSION for i in range(4)}
        assert store._db.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 4 * NODES_PER_SESSION
        assert store.sessions("w") == [f"w{i}" for i in range(4)]
        assert store.add(worker_graph(i) for i in range(10)) == 6  # the first four are kept, not repeated
        assert counts(store) == {f"w{i}": NODES_PER_SESSION for i in range(10)}


def test_extract_into_a_store_killed_then_resumed_stores_every_session_once(tmp_path: Path) -> None:
    sessions = tomas_sessions(12)
    source = write_jsonl(tmp_path / "in.jsonl", sessions)
    out, db = tmp_path / "graphs.jsonl", tmp_path / "memory.db"
    cmd = [sys.executable, "-m", "promem_fast.cli", "extract", str(source), "-o", str(out), "--db", str(db),
           "--max-in-flight", "2", "--profile", "scripted", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= 5:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert subprocess.run([*cmd, "--resume"], env=env, capture_output=True, timeout=300).returncode == 0
    written = {json.loads(line)["session_id"]: len(json.loads(line)["nodes"]) for line in out.read_text().splitlines()}
    with MemoryStore(db, scripted_config(), read_only=True) as store:
        assert store.sessions(sessions[0].user) == [s.session_id for s in sessions]
        stored: dict[str, int] = {}
        for hit in store.hits(sessions[0].user, history=True):
            stored[hit.session_id] = stored.get(hit.session_id, 0) + 1
    assert stored == {sid: n for sid, n in written.items() if n}


def test_three_writer_processes_take_turns_and_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    MemoryStore(db, scripted_config()).close()
    writers = [start_writer(db, 40, "--prefix", prefix) for prefix in ("a", "b", "c")]
    assert [w.wait(timeout=180) for w in writers] == [0, 0, 0], [w.stderr.read() for w in writers if w.stderr]
    with MemoryStore(db, scripted_config(), read_only=True) as store:
        assert counts(store) == {f"{p}{i}": NODES_PER_SESSION for p in "abc" for i in range(40)}
