"""``promem serve`` under load and under ``kill -9``: one engine batching many clients, nothing accepted lost.

Both tests run a real server process on 127.0.0.1 with the scripted profile and many client threads, so they
are marked slow (they still run in CI).
"""

from __future__ import annotations

import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import tomas_sessions, scripted_config
from promem_fast.engine import Engine
from promem_fast.testing.service_processes import Server, children, new_key, running, wait_job

pytestmark = pytest.mark.slow

CLIENTS = 16
SESSIONS = 20


def client_sessions(client: int, count: int) -> list[dict[str, Any]]:
    """``count`` HaluMem-schema sessions renamed for one client's own user."""
    base = tomas_sessions()
    return [dict(base[j % len(base)].to_dict(), session_id=f"c{client}-s{j}", user=f"user{client}")
            for j in range(count)]


def metrics(server: Server) -> dict[str, float]:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def run_clients(count: int, work: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # collected and asserted on by the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return errors


def test_16_clients_share_one_engine(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    keys = [new_key(path, f"tenant{i % 4}") for i in range(CLIENTS)]
    server = Server(path, "--rate", "0")
    latencies: list[float] = []
    jobs: dict[int, list[str]] = {i: [] for i in range(CLIENTS)}
    try:
        started = time.perf_counter()

        def client(i: int) -> None:
            with server.client(keys[i]) as http:
                for session in client_sessions(i, SESSIONS):  # one request per session, as an app would send
                    reply = http.post(f"/v1/users/user{i}/sessions", json={"sessions": [session]})
                    assert reply.status_code == 202, reply.text
                    jobs[i].append(reply.json()["job_id"])
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline:  # search while the engine works, until this client is done
                    t0 = time.perf_counter()
                    reply = http.post(f"/v1/users/user{i}/search", json={"query": "promotion at work", "k": 10})
                    if reply.status_code == 200:
                        latencies.append(time.perf_counter() - t0)
                    if http.get(f"/v1/jobs/{jobs[i][-1]}").json()["state"] == "finished":
                        break
                    time.sleep(0.25)  # an application searching now and then, not a flood
                for job in jobs[i]:
                    assert wait_job(http, job, timeout=240)["done"] == 1

        assert run_clients(CLIENTS, client) == []
        wall = time.perf_counter() - started
        m = metrics(server)
        with server.client(keys[0]) as http:
            assert len(http.get("/v1/users/user0/sessions").json()["sessions"]) == SESSIONS
    finally:
        server.stop()
    total = CLIENTS * SESSIONS
    assert m['promem_sessions_total{outcome="done"}'] == total and m["promem_queue_depth"] == 0
    calls = sum(v for k, v in m.items() if k.startswith("promem_backend_calls_total"))
    rounds = m["promem_engine_rounds_total"]
    assert m["promem_window_users_max"] >= 8  # sessions of at least half the clients shared the window
    assert len(latencies) >= CLIENTS
    alone = Engine(scripted_config())  # side by side: sessions extracted one request at a time, no sharing
    for session in client_sessions(0, SESSIONS):
        alone.extract([session])
    alone_per_session = sum(alone.summary.backend_calls.values()) / SESSIONS
    # The continuous driver sends what each backend's queue holds as soon as the backend is free (no round
    # barrier), so calls are smaller and more numerous than in rounds; sharing still cuts them several fold.
    assert alone_per_session / (calls / total) > 2
    quantiles = statistics.quantiles(latencies, n=100)
    print(f"\nload: {CLIENTS} clients x {SESSIONS} sessions in {wall:.1f} s = {total / wall:.1f} sessions/s; "
          f"search under load p50 {1e3 * quantiles[49]:.1f} ms, p99 {1e3 * quantiles[98]:.1f} ms "
          f"({len(latencies)} searches); {rounds:.0f} rounds, {calls:.0f} backend calls "
          f"({calls / rounds:.2f} per round, {calls / total:.3f} per session); "
          f"most clients' users in one window {m['promem_window_users_max']:.0f}; one request at a time with no "
          f"sharing takes {alone_per_session:.1f} calls per session ({alone_per_session / (calls / total):.1f}x)")


def test_kill_9_mid_load_then_restart_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    clients = 8
    keys = [new_key(path, f"tenant{i % 2}") for i in range(clients)]
    server = Server(path, "--rate", "0")
    accepted: dict[int, list[str]] = {i: [] for i in range(clients)}
    sent: dict[int, list[str]] = {i: [] for i in range(clients)}
    jobs: dict[int, list[str]] = {i: [] for i in range(clients)}
    stop = threading.Event()

    def client(i: int) -> None:
        with server.client(keys[i]) as http:
            for session in client_sessions(i, 30):
                if stop.is_set():
                    return
                sent[i].append(session["session_id"])
                try:
                    reply = http.post(f"/v1/users/user{i}/sessions", json={"sessions": [session]})
                except httpx.TransportError:
                    return  # the server is gone: this one was not accepted
                assert reply.status_code == 202
                accepted[i].append(session["session_id"])
                jobs[i].append(reply.json()["job_id"])
                time.sleep(0.02)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and metrics(server).get('promem_sessions_total{outcome="done"}', 0) < 20:
        time.sleep(0.05)
    done_before = metrics(server)['promem_sessions_total{outcome="done"}']
    engine_processes = children(server.proc.pid)
    assert engine_processes  # the engine runs in a process of its own
    server.kill()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(running(pid) for pid in engine_processes):
        time.sleep(0.05)
    assert not any(running(pid) for pid in engine_processes)  # nothing left writing behind a killed server
    stop.set()
    for t in threads:
        t.join(60)
    total = sum(len(v) for v in accepted.values())
    assert 20 <= done_before < total  # killed mid-load: sessions were still queued and in flight

    engine = Engine(scripted_config())  # the same sessions extracted here, for their node counts
    server = Server(path, "--rate", "0")
    try:
        for i in range(clients):
            with server.client(keys[i]) as http:
                for job in jobs[i]:
                    assert wait_job(http, job, timeout=60)["done"] == 1
                stored = http.get(f"/v1/users/user{i}/sessions").json()["sessions"]
                assert len(stored) == len(set(stored))  # each session exactly once
                assert set(accepted[i]) <= set(stored)  # every accepted session
                # at most the request that was being answered at the kill: committed, its 202 never sent
                assert set(stored) <= set(sent[i]) and len(stored) - len(accepted[i]) <= 1
                nodes = Counter(m["session_ids"][0] for m in http.get(f"/v1/users/user{i}/memories",
                                                                  params={"history": True}).json()["memories"])
                reference = {g.session_id: len(g.nodes) for g in engine.extract(
                    s for s in client_sessions(i, 30) if s["session_id"] in stored)}
                assert {sid: nodes[sid] for sid in stored} == reference  # whole graphs, not half nor twice
                export = [line for line in http.get("/v1/export").text.splitlines() if '"kind":"session"' in line
                          or '"kind": "session"' in line]
                assert len(export) == len({line for line in export})
    finally:
        server.stop()


def test_a_stop_mid_job_leaves_the_rest_for_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    key = new_key(path, "acme")
    server = Server(path, "--rate", "0", "--max-in-flight", "8")
    with server.client(key) as http:
        job = http.post("/v1/users/user0/sessions", json={"sessions": client_sessions(0, 60)}).json()["job_id"]
        deadline = time.monotonic() + 60
        while http.get(f"/v1/jobs/{job}").json()["done"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
    server.stop()  # SIGTERM: the worker leaves the engine's loop without finishing the sessions in flight
    # uvicorn shuts down, then exits by the signal it caught (one that does not within stop()'s wait is killed,
    # and its return code says SIGKILL)
    assert server.proc.returncode in (0, -signal.SIGTERM)
    server = Server(path, "--rate", "0")
    try:
        with server.client(key) as http:
            assert http.get(f"/v1/jobs/{job}").json()["done"] < 60  # stopped mid-job
            status = wait_job(http, job, timeout=120)
            assert (status["done"], status["failed"]) == (60, 0)
            assert len(http.get("/v1/users/user0/sessions").json()["sessions"]) == 60
    finally:
        server.stop()
