"""The memory service as real processes for the tests and benchmarks: ``promem serve`` replicas (uvicorn on
127.0.0.1) and ``promem worker`` engine workers over one store, started, waited for, stopped or killed.

A store is an SQLite file or a PostgreSQL URL (:mod:`.pg_server` gives one); with PostgreSQL any number of
replicas and workers share it, as they would on several hosts. Each process runs the ``scripted`` profile, so
what is measured or checked is the service's own work (HTTP, queue, leases, store), not a model's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import httpx

import promem_fast
from promem_fast.serve import db
from promem_fast.serve.keys import KeyRing

ROOT = Path(promem_fast.__file__).resolve().parent.parent
"""The source tree the child processes import (their ``PYTHONPATH``): the one this module came from."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc): a replica's or worker's engine process."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (exited, waiting for its parent to read its status)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def new_key(path: Path | str, tenant: str) -> str:
    """A new API key of ``tenant`` in the store at ``path`` (a file or a URL), as ``promem keys create`` makes."""
    with closing(db.connect(path)) as conn:
        return KeyRing(conn).create(tenant, "test")


def _spawn(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "promem_fast.cli", *command],
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=sink)


def kill_host(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a replica or worker and its engine process together, as when their host goes down: the engine
    gets no moment to finish a write after its parent is gone."""
    for pid in children(proc.pid):
        os.kill(pid, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL when the process is still there after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Server:
    """``promem serve --profile scripted`` in a child process, ready once its ``/healthz`` answers."""

    def __init__(self, path: Path | str, *extra: str, log: Path | None = None, verbose: bool = False) -> None:
        """``path``: the store, an SQLite file or a PostgreSQL URL (then ``log`` names the log file)."""
        self.path = path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log or Path(path).with_suffix(f".{self.port}.log")
        self.proc = _spawn([*(["-v"] if verbose else []), "serve", "--db", str(path), "--port", str(self.port),
                            "--profile", "scripted", *extra], self.log)
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout} s: {self.log.read_text()[-2000:]}")

    def client(self, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60.0)

    def kill(self) -> None:
        """SIGKILL the server alone (its engine process follows it on its own)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        stop(self.proc)


class Worker:
    """``promem worker --profile scripted`` over a PostgreSQL store, ready once it says so in its log."""

    def __init__(self, url: str, *extra: str, log: Path, timeout: float = 120.0) -> None:
        self.log = log
        self.proc = _spawn(["worker", "--db", url, "--profile", "scripted", *extra], log)
        deadline = time.monotonic() + timeout
        while b" ready" not in log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stop(self.proc)
                raise RuntimeError(f"worker not ready ({self.proc.returncode}): {log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop(self.proc)


def wait_job(http: httpx.Client, job: str, timeout: float = 120.0) -> dict[str, Any]:
    """The job's status once it is finished (every session stored or failed); AssertionError after ``timeout``.
    Polls at half a test server's rate limit (20/s), so the key keeps requests for the test's own checks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = http.get(f"/v1/jobs/{job}").json()
        if status["state"] == "finished":
            return dict(status)
        time.sleep(0.1)
    raise AssertionError(f"job {job} not finished in {timeout} s")


@contextmanager
def served(path: Path, tenant: str = "default", *extra: str) -> Iterator[tuple[Server, str]]:
    """A server over the store at ``path`` with a new key of ``tenant``; stopped on leaving."""
    key = new_key(path, tenant)
    server = Server(path, *extra)
    try:
        yield server, key
    finally:
        server.stop()


@contextmanager
def serving(path: Path, tenant: str, user: str, sessions: list[dict[str, Any]]) -> Iterator[tuple[Server, str]]:
    """A server (no rate limit) over a new store at ``path`` holding ``sessions`` of ``user``; yields it with
    a key of ``tenant``."""
    with served(path, tenant, "--rate", "0") as (server, key):
        with server.client(key) as http:
            job = http.post(f"/v1/users/{user}/sessions", json={"sessions": sessions}).json()["job_id"]
            status = wait_job(http, job)
        if status["done"] != len(sessions):
            raise AssertionError(f"{status['done']} of {len(sessions)} sessions stored: {status}")
        yield server, key


def holders(url: str) -> set[int]:
    """The process ids (engine processes) that hold claimed sessions of the PostgreSQL queue at ``url`` now."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT DISTINCT claimed_by FROM serve_queue WHERE state = 'running'").fetchall()
    return {int(holder.rsplit(":", 1)[1]) for (holder,) in rows}


def links(export: str) -> set[tuple[str, ...]]:
    """The update and duplicate links of an export, named by user, session and node (never by row id), so two
    stores written in different orders compare."""
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


Post = tuple[str, str, list[dict[str, Any]]]
"""One request of sessions: tenant, user, the sessions."""


def single_node_exports(folder: Path, posts: list[Post], timeout: float = 300.0) -> dict[str, str]:
    """Each tenant's export from one ``promem serve`` on an SQLite file given the same ``posts``: the reference
    that a store shared by replicas and workers, which took the sessions in another order, must equal."""
    path = folder / "single.db"
    keys = {tenant: new_key(path, tenant) for tenant in dict.fromkeys(tenant for tenant, _, _ in posts)}
    server = Server(path, "--rate", "0", log=folder / "single.log")
    try:
        jobs = []
        for tenant, user, sessions in posts:
            with server.client(keys[tenant]) as http:
                reply = http.post(f"/v1/users/{user}/sessions", json={"sessions": sessions})
                reply.raise_for_status()
                jobs.append((tenant, reply.json()["job_id"]))
        for tenant, job in jobs:
            with server.client(keys[tenant]) as http:
                wait_job(http, job, timeout)
        exports = {}
        for tenant, key in keys.items():
            with server.client(key) as http:
                exports[tenant] = http.get("/v1/export").text
    finally:
        server.stop()
    return exports
