"""The store across processes: a writer process and a reader here on one file (WAL), and a writer killed
with SIGKILL inside a session's transaction, after which the store is as it was before that session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, scripted_config
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
    for hit in store.get_all("w"):
        out[hit["session_id"]] = out.get(hit["session_id"], 0) + 1
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
