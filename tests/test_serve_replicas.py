"""Several ``promem serve`` replicas and a ``promem worker`` over one PostgreSQL store, as real processes.

Sessions are posted to both replicas under a bounded load; a worker and one replica are killed with
SIGKILL, the replica while it holds claimed sessions (the worker too when it holds some by then: the
replicas, woken by the posts they accept, often claim first). The leases of what they held lapse, the survivors take those
sessions over, and every session answered 202 is stored exactly once, with the same update links as one
SQLite server given the same input.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ROOT, tomas_sessions
from serve_server import Server, children, new_key, wait_job

USERS = [f"Tomas {i}" for i in range(8)]
LEASE = "2"


def sessions_of(user: str) -> list[dict[str, Any]]:
    out = []
    for session in tomas_sessions(12):
        record = session.to_dict()
        record["user"] = user
        out.append(record)
    return out


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "promem_fast.cli", "worker", "--db", url, "--profile", "scripted",
           "--job-lease", LEASE]
    with open(log, "ab") as sink:
        return subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=sink)


def links(export: str) -> set[tuple[str, ...]]:
    """The update and duplicate links of an export, named by user, session and node (never by row id)."""
    found = set()
    for line in export.splitlines():
        item = json.loads(line)
        if item.get("kind") == "supersede":
            found.add(("update", item["user"], item["old"]["session_id"], str(item["old"]["node"]),
                       item["new"]["session_id"], str(item["new"]["node"])))
        elif item.get("kind") == "merge":
            found.add(("duplicate", item["user"], item["node"]["session_id"], str(item["node"]["node"]),
                       item["kept"]["session_id"], str(item["kept"]["node"])))
    return found


def holders(url: str) -> set[int]:
    """The process ids that hold running sessions now."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT DISTINCT claimed_by FROM serve_queue WHERE state = 'running'").fetchall()
    return {int(holder.rsplit(":", 1)[1]) for (holder,) in rows}


def post_all(servers: list[Server], key: str) -> list[str]:
    jobs = []
    for i, user in enumerate(USERS):
        with servers[i % len(servers)].client(key) as http:
            for part in range(0, 12, 4):  # three posts per user, spread over the replicas
                reply = http.post(f"/v1/users/{user}/sessions", json={"sessions": sessions_of(user)[part:part + 4]})
                assert reply.status_code == 202, reply.text
                jobs.append(reply.json()["job_id"])
    return jobs


def test_killed_replica_and_worker_lose_nothing_and_store_each_session_once(tmp_path: Path, pg_url: str) -> None:
    key = new_key(pg_url, "acme")
    a = Server(pg_url, "--job-lease", LEASE, "--rate", "0", log=tmp_path / "a.log")
    b = Server(pg_url, "--job-lease", LEASE, "--rate", "0", log=tmp_path / "b.log")
    worker = start_worker(pg_url, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 120
        while b" ready" not in (tmp_path / "worker.log").read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.1)
        engines = {"worker": children(worker.pid), "a": children(a.proc.pid)}
        jobs = post_all([a, b], key)
        deadline = time.monotonic() + 60
        killed: set[str] = set()

        def kill(name: str) -> None:
            for pid in engines[name]:
                os.kill(pid, signal.SIGKILL)
            (worker.send_signal if name == "worker" else a.proc.send_signal)(signal.SIGKILL)
            killed.add(name)

        while "a" not in killed and time.monotonic() < deadline:  # each killed once it holds sessions
            held = holders(pg_url)
            for name, pids in engines.items():
                if name not in killed and held & set(pids):
                    kill(name)
            time.sleep(0.01)
        assert "a" in killed, "the bounded load ended before replica a held sessions"
        if "worker" not in killed:  # the replicas' engines claimed first (they are woken by the posts they accept)
            kill("worker")
        with b.client(key) as http:  # any replica answers for any job: the records are in the database
            states = [wait_job(http, job, timeout=180) for job in jobs]
            assert all(s["done"] == s["total"] and not s["errors"] for s in states), states
            for user in USERS:
                stored = http.get(f"/v1/users/{user}/sessions").json()["sessions"]
                assert sorted(stored) == sorted(s["session_id"] for s in sessions_of(user))
            shared = http.get("/v1/export").text
    finally:
        for proc in (worker,):
            if proc.poll() is None:
                proc.kill()
        b.stop()
    import psycopg

    with psycopg.connect(pg_url) as conn:
        counts = conn.execute("SELECT count(*), count(DISTINCT (user_id, session_id)) FROM sessions").fetchone()
    assert counts == (12 * len(USERS), 12 * len(USERS))
    # the same input through one server on an SQLite file gives the same update links
    single_path = tmp_path / "single.db"
    single_key = new_key(single_path, "acme")
    single = Server(single_path, "--rate", "0", log=tmp_path / "single.log")
    try:
        for job in post_all([single], single_key):
            with single.client(single_key) as http:
                wait_job(http, job, timeout=180)
        with httpx.Client(base_url=single.url, headers={"Authorization": f"Bearer {single_key}"}) as http:
            alone = http.get("/v1/export").text
    finally:
        single.stop()
    assert links(shared) == links(alone) and links(alone)


@pytest.mark.parametrize("bad", ["postgresql://nobody@127.0.0.1:1/none"])
def test_a_worker_with_a_wrong_url_says_so_in_one_line(bad: str) -> None:
    done = subprocess.run([sys.executable, "-m", "promem_fast.cli", "worker", "--db", bad, "--profile", "scripted"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("promem: postgresql://nobody@127.0.0.1:1/none: cannot")
