"""A real ``promem serve`` process on 127.0.0.1 for the service tests (started, waited for, stopped or killed)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from conftest import ROOT
from promem_fast.serve import db
from promem_fast.serve.keys import KeyRing


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc): the server's engine process."""
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
    conn = db.connect(path)
    try:
        return KeyRing(conn).create(tenant, "test")
    finally:
        conn.close()


class Server:
    """``promem serve --profile scripted`` in a child process."""

    def __init__(self, path: Path | str, *extra: str, log: Path | None = None, verbose: bool = False) -> None:
        """``path``: the store, an SQLite file or a PostgreSQL URL (then ``log`` names the log file)."""
        self.path = path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log or Path(path).with_suffix(f".{self.port}.log")
        cmd = [sys.executable, "-m", "promem_fast.cli", *(["-v"] if verbose else []), "serve", "--db", str(path),
               "--port", str(self.port),
               "--profile", "scripted", *extra]
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=sink)
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
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_job(http: httpx.Client, job: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = http.get(f"/v1/jobs/{job}").json()
        if status["state"] == "finished":
            return status
        time.sleep(0.05)
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
            assert wait_job(http, job)["done"] == len(sessions)
        yield server, key
