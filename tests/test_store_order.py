"""Which memories are current does not depend on timing: the same supersede and merge links after one
uninterrupted ``promem extract --db``, after kill -9 and resume rounds (real processes killed at several
points), with windows of 1, 16 and 512 sessions, and through ``promem ingest`` of the same graphs.

Each user's sessions come in an input order that is not their time order, with changed jobs and homes and
repeated facts, so the links depend on the order they are judged in: a run that judged in arrival order
would give other links for another window or another kill point.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

JOBS = ["nurse", "surgeon", "porter", "nurse"]
HOMES = ["Boston", "Denver", "Boston"]


def sessions() -> list[dict[str, object]]:
    """3 users x 10 sessions; the input interleaves users and puts each user's days out of order."""
    out = []
    for u, user in enumerate(["Maya", "Ben", "Ines"]):
        for day in [3, 0, 7, 1, 9, 4, 2, 8, 5, 6]:
            said = [f"I work at the Mercy hospital as a {JOBS[(day + u) % len(JOBS)]} on night shifts.",
                    f"I live in a small flat in {HOMES[(day + 2 * u) % len(HOMES)]} near the old harbour.",
                    f"I keep {day + 1} plants on my balcony."]
            turns = []
            for tid, text in enumerate(said):
                turns += [{"turn_id": tid, "role": "user", "text": text},
                          {"turn_id": tid, "role": "assistant", "text": "Good to know."}]
            out.append({"session_id": f"{user[0].lower()}{day}", "user": user,
                        "timestamp": f"2024-0{1 + day // 5}-{10 + day:02d}T09:00:00", "turns": turns})
    order = sorted(range(len(out)), key=lambda i: (i % 10, i // 10))  # users interleaved
    return [out[i] for i in order]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("order") / "sessions.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in sessions()))
    return path


def promem(*argv: object) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "promem_fast.cli", *map(str, argv)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finished(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]


def extract(inputs: Path, out: Path, db: Path, window: int, *more: str) -> subprocess.Popen[bytes]:
    return promem("extract", inputs, "-o", out, "--db", db, "--profile", "scripted", "--no-timings",
                  "--max-in-flight", window, *more)


def links(db: Path) -> dict[str, set[tuple[str, ...]]]:
    """Every link named by user, session and text (store ids differ between runs), and pending sessions."""
    raw = sqlite3.connect(db)
    try:
        named = ("SELECT u.name, sa.session_id, a.text, sb.session_id, b.text, l.reason FROM {table} l "
                 "JOIN nodes a ON a.id = l.{first} JOIN nodes b ON b.id = l.{second} "
                 "JOIN sessions sa ON sa.id = a.session_pk JOIN sessions sb ON sb.id = b.session_pk "
                 "JOIN users u ON u.id = a.user_id")
        return {"update": set(raw.execute(named.format(table="supersedes", first="old", second="new"))),
                "duplicate": set(raw.execute(named.format(table="merges", first="node", second="kept"))),
                "pending": set(raw.execute("SELECT session_id FROM sessions WHERE judged = 0")),
                "sessions": {(n,) for (n,) in raw.execute("SELECT COUNT(*) FROM sessions")}}
    except sqlite3.OperationalError:  # a store of before merges and judging: its supersede links alone
        return {"update": set(raw.execute(named.format(table="supersedes", first="old", second="new")))}
    finally:
        raw.close()


def stored(db: Path) -> int:
    if not db.exists():
        return 0
    raw = sqlite3.connect(db)
    try:
        return int(raw.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        raw.close()


@pytest.fixture(scope="module")
def reference(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[tuple[str, ...]]]:
    folder = tmp_path_factory.mktemp("reference")
    finished(extract(inputs, folder / "out.jsonl", folder / "m.db", 16))
    found = links(folder / "m.db")
    # not a trivial memory: jobs and homes were replaced, repeated facts merged, all 30 sessions judged
    assert len(found["update"]) >= 10 and len(found["duplicate"]) >= 10
    assert found["pending"] == set() and found["sessions"] == {(30,)}
    # written by hand: Maya's first day (day 0) says nurse; her day-1 session replaces it with surgeon
    assert ("Maya", "m0", "Maya work at the Mercy hospital as a nurse on night shifts.", "m1",
            "Maya work at the Mercy hospital as a surgeon on night shifts.") in {r[:5] for r in found["update"]}
    return found


@pytest.mark.parametrize("window", [1, 512])
def test_the_window_does_not_change_which_memories_are_current(inputs: Path, tmp_path: Path, window: int,
                                                                reference: dict[str, set[tuple[str, ...]]]) -> None:
    finished(extract(inputs, tmp_path / "out.jsonl", tmp_path / "m.db", window))
    assert links(tmp_path / "m.db") == reference


def test_ingest_of_the_graphs_gives_the_links_of_extract_db(inputs: Path, tmp_path: Path,
                                                             reference: dict[str, set[tuple[str, ...]]]) -> None:
    finished(promem("extract", inputs, "-o", tmp_path / "out.jsonl", "--profile", "scripted", "--no-timings"))
    finished(promem("ingest", tmp_path / "out.jsonl", "--db", tmp_path / "m.db", "--profile", "scripted"))
    assert links(tmp_path / "m.db") == reference
    # the same graphs in the reverse order, in two files ingested one after the other
    lines = (tmp_path / "out.jsonl").read_text().splitlines(keepends=True)[::-1]
    (tmp_path / "a.jsonl").write_text("".join(lines[:13]))
    (tmp_path / "b.jsonl").write_text("".join(lines[13:]))
    for part in ("a.jsonl", "b.jsonl"):
        finished(promem("ingest", tmp_path / part, "--db", tmp_path / "r.db", "--profile", "scripted"))
    assert links(tmp_path / "r.db") == reference


def test_kill_9_and_resume_rounds_give_the_links_of_an_uninterrupted_run(
        inputs: Path, tmp_path: Path, reference: dict[str, set[tuple[str, ...]]]) -> None:
    out, db = tmp_path / "out.jsonl", tmp_path / "m.db"
    killed_at = []
    for point in (2, 8, 14, 20, 26):  # five rounds
        proc = extract(inputs, out, db, 1, *(["--resume"] if out.exists() else []))
        deadline = time.monotonic() + 120
        while proc.poll() is None and stored(db) < point and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed_at.append(stored(db))
    assert len(killed_at) >= 3, f"the run finished before most kill points ({killed_at})"
    finished(extract(inputs, out, db, 1, "--resume"))
    assert links(db) == reference


def test_the_service_fed_in_reverse_order_in_uneven_posts_gives_the_same_links(
        inputs: Path, tmp_path: Path, reference: dict[str, set[tuple[str, ...]]]) -> None:
    from promem_fast.testing.service_processes import Server, new_key, wait_job

    db = tmp_path / "memory.db"
    key = new_key(db, "acme")
    server = Server(db)
    try:
        with server.client(key) as http:
            records = [json.loads(line) for line in inputs.read_text().splitlines()][::-1]
            for user in ("Ines", "Maya", "Ben"):
                mine = [r for r in records if r["user"] == user]
                for part in (mine[:1], mine[1:7], mine[7:]):
                    reply = http.post(f"/v1/users/{user}/sessions", json={"sessions": part})
                    assert reply.status_code == 202, reply.text
                    assert wait_job(http, reply.json()["job_id"])["done"] == len(part)
    finally:
        server.stop()
    assert links(db) == reference
