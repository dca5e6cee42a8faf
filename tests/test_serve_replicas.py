"""Several ``promem serve`` replicas and ``promem worker`` processes over one PostgreSQL store, as real processes.

Sessions are posted to both replicas under a bounded load; a worker and one replica are killed with
SIGKILL, the replica while it holds claimed sessions (the worker too when it holds some by then: the
replicas, woken by the posts they accept, often claim first). The leases of what they held lapse, the
survivors take those sessions over, and every session answered 202 is stored exactly once, with the same
update links as one SQLite server given the same input. A worker killed while it holds sessions has them
finished by another worker; the queue's heartbeat and a finish that could not be recorded never leave
sessions running for good.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, scripted_config, tomas_sessions

from promem_fast.engine import Engine
from promem_fast.serve import db
from promem_fast.serve.job_worker import Worker as EngineWorker
from promem_fast.serve.jobs import JobQueue
from promem_fast.serve.metrics import Metrics
from promem_fast.store import MemoryStore, StoreError
from promem_fast.testing.service_processes import (Server, Worker, children, holders, kill_host, links, new_key,
                                                   single_node_exports, wait_job)

USERS = [f"Tomas {i}" for i in range(8)]
LEASE = "2"


def sessions_of(user: str) -> list[dict[str, Any]]:
    out = []
    for session in tomas_sessions(12):
        record = session.to_dict()
        record["user"] = user
        out.append(record)
    return out


POSTS = [("acme", user, sessions_of(user)[part:part + 4]) for user in USERS for part in range(0, 12, 4)]
"""Three posts of four sessions per user."""


def post_all(servers: list[Server], key: str) -> list[str]:
    """Every post of :data:`POSTS`, each user's to one replica in turn; the job ids."""
    jobs = []
    for i, (_, user, sessions) in enumerate(POSTS):
        with servers[i // 3 % len(servers)].client(key) as http:
            reply = http.post(f"/v1/users/{user}/sessions", json={"sessions": sessions})
            assert reply.status_code == 202, reply.text
            jobs.append(reply.json()["job_id"])
    return jobs


def test_killed_replica_and_worker_lose_nothing_and_store_each_session_once(tmp_path: Path, pg_url: str) -> None:
    key = new_key(pg_url, "acme")
    a = Server(pg_url, "--job-lease", LEASE, "--rate", "0", log=tmp_path / "a.log")
    b = Server(pg_url, "--job-lease", LEASE, "--rate", "0", log=tmp_path / "b.log")
    worker = Worker(pg_url, "--job-lease", LEASE, log=tmp_path / "worker.log")
    try:
        procs = {"worker": worker.proc, "a": a.proc}
        engines = {name: children(proc.pid) for name, proc in procs.items()}
        jobs = post_all([a, b], key)
        deadline = time.monotonic() + 60
        killed: set[str] = set()

        def kill(name: str) -> None:
            kill_host(procs[name])
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
        worker.stop()
        a.stop()
        b.stop()
    import psycopg

    with psycopg.connect(pg_url) as conn:
        counts = conn.execute("SELECT count(*), count(DISTINCT (user_id, session_id)) FROM sessions").fetchone()
    assert counts == (12 * len(USERS), 12 * len(USERS))
    # the same input through one server on an SQLite file gives the same update links
    alone = single_node_exports(tmp_path, POSTS)["acme"]
    assert links(shared) == links(alone) and links(alone)


def test_a_worker_killed_holding_sessions_has_them_finished_by_another_worker_once(tmp_path: Path,
                                                                                 pg_url: str) -> None:
    """No replica: the sessions are queued as a replica queues them, worker a is killed (with its engine) while
    it holds some, and worker b, started after, finishes every one of them once the lease lapses."""
    queue = JobQueue(db.connect(pg_url))
    jobs = [queue.submit(tenant, user, sessions) for tenant, user, sessions in POSTS]
    a = Worker(pg_url, "--job-lease", LEASE, log=tmp_path / "a.log")
    engine = set(children(a.proc.pid))
    deadline = time.monotonic() + 60
    while not holders(pg_url) & engine and time.monotonic() < deadline:
        time.sleep(0.005)
    kill_host(a.proc)
    import psycopg

    with psycopg.connect(pg_url) as conn:
        held = {seq for (seq,) in conn.execute("SELECT seq FROM serve_queue WHERE state = 'running'")}
    assert held, "worker a finished every session before it could be killed"
    b = Worker(pg_url, "--job-lease", LEASE, log=tmp_path / "b.log")
    try:
        deadline = time.monotonic() + 180
        while queue.depth() and time.monotonic() < deadline:
            time.sleep(0.1)
        states = [queue.status("acme", job) for job in jobs]
    finally:
        b.stop()
    assert all(s is not None and s["done"] == s["total"] and not s["errors"] for s in states), states
    with psycopg.connect(pg_url) as conn:
        finishers = {holder for (holder,) in conn.execute(
            "SELECT DISTINCT claimed_by FROM serve_queue WHERE seq = ANY(%s)", (sorted(held),))}
        stored = conn.execute("SELECT u.name, s.session_id FROM sessions s JOIN users u ON u.id = s.user_id"
                              ).fetchall()
    assert {int(h.rsplit(":", 1)[1]) for h in finishers}.isdisjoint(engine)  # b took over what a held
    assert sorted(stored) == sorted((user, s["session_id"]) for _, user, batch in POSTS for s in batch)
    api = Server(pg_url, "--rate", "0", log=tmp_path / "api.log")
    try:
        with api.client(new_key(pg_url, "acme")) as http:
            shared = http.get("/v1/export").text
    finally:
        api.stop()
    assert links(shared) == links(single_node_exports(tmp_path, POSTS)["acme"])


def test_the_lease_of_held_sessions_is_renewed_while_another_transaction_locks_one_of_them(pg_url: str) -> None:
    """The heartbeat does not wait for a row another transaction holds (the worker marking it done): had it
    waited there, every lease it holds would lapse meanwhile, and a finish waiting on a row it had locked
    would be a deadlock."""
    import psycopg

    queue = JobQueue(db.connect(pg_url), lease_s=0.6)
    queue.submit("acme", "Tomas", sessions_of("Tomas")[:2])
    first, second = queue.claim(2)
    try:
        with psycopg.connect(pg_url) as other:  # a transaction holding the second row, as a finish does
            other.execute("UPDATE serve_queue SET finished = 0 WHERE seq = %s", (second.seq,))
            time.sleep(2.0)  # three leases
            with psycopg.connect(pg_url, autocommit=True) as look:
                (lease,) = look.execute("SELECT lease_until FROM serve_queue WHERE seq = %s",
                                        (first.seq,)).fetchone()
            other.rollback()
    finally:
        queue.close()
    assert lease > time.time(), "the first session's lease lapsed while the heartbeat waited for the second"


def test_a_session_running_past_its_lease_is_not_claimed_again_by_its_own_process(store_at: str) -> None:
    """The engine asks for more sessions while others still run; one running longer than a lease (any session
    of the CPU default) must stay this process's, on either backend, or it is extracted twice."""
    queue = JobQueue(db.connect(store_at), lease_s=0.3)
    queue.submit("acme", "Tomas", sessions_of("Tomas")[:3])
    running = queue.claim(2)
    time.sleep(1.2)  # four leases
    later = queue.claim(3)
    queue.close()
    assert [c.session_id for c in later] == [sessions_of("Tomas")[2]["session_id"]]
    assert {c.session_id for c in running} == {s["session_id"] for s in sessions_of("Tomas")[:2]}


def heartbeats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "promem-lease"]


def test_the_lease_heartbeat_ends_when_nothing_is_held_and_when_the_queue_closes(store_at: str) -> None:
    """A queue's heartbeat is a thread of the host process (a library user's, or a server's): it must not
    outlive the rows it renews, nor go on knocking at a database after the queue is closed."""
    before = set(heartbeats())
    conn = db.connect(store_at)
    queue = JobQueue(conn, lease_s=0.3)
    queue.submit("acme", "Tomas", sessions_of("Tomas")[:2])
    first = queue.claim(1)
    assert len(set(heartbeats()) - before) == 1
    queue.finish([(first[0].seq, None)])
    time.sleep(0.5)  # past the next beat
    assert set(heartbeats()) - before == set(), "the heartbeat went on with nothing held"
    held = queue.claim(1)
    assert len(held) == 1 and len(set(heartbeats()) - before) == 1, "a new claim is not renewed"
    queue.close()
    assert set(heartbeats()) - before == set(), "the heartbeat outlived its closed queue"
    conn.close()


class OnceUnreachable(JobQueue):
    """A job queue whose first finish fails, as it does when the connection drops then."""

    failed = 0

    def finish(self, outcomes: list[tuple[int, str | None]]) -> None:
        if not self.failed:
            self.failed += 1
            raise StoreError("postgresql://…: connection lost; the transaction was rolled back")
        super().finish(outcomes)


def test_sessions_whose_finish_was_lost_are_finished_later_and_stored_once(pg_url: str) -> None:
    config = scripted_config()
    queue = OnceUnreachable(db.connect(pg_url), lease_s=1.0)
    job = queue.submit("acme", "Tomas", sessions_of("Tomas")[:4])
    with MemoryStore(pg_url, config, update_judge="off") as store:
        worker = EngineWorker(Engine(config), queue, Metrics(queue.depth, lambda: (0, {})),
                              lambda tenant, graphs: store.add(graphs, tenant=tenant))
        worker.start()
        try:
            deadline = time.monotonic() + 60
            while queue.depth() and time.monotonic() < deadline:
                time.sleep(0.1)
            status = queue.status("acme", job)
        finally:
            worker.stop()
            queue.close()
        stored = store.sessions("Tomas", tenant="acme")
    assert queue.failed == 1
    assert status is not None and (status["done"], status["errors"]) == (4, []), status
    assert sorted(stored) == sorted(s["session_id"] for s in sessions_of("Tomas")[:4])


@pytest.mark.parametrize("bad", ["postgresql://nobody@127.0.0.1:1/none"])
def test_a_worker_with_a_wrong_url_says_so_in_one_line(bad: str) -> None:
    done = subprocess.run([sys.executable, "-m", "promem_fast.cli", "worker", "--db", bad, "--profile", "scripted"],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("promem: postgresql://nobody@127.0.0.1:1/none: cannot")
