"""A second process on the store of a running ``promem serve``: an operator lists, creates or revokes keys
(or reads memory) while the service runs, then the service is killed. Nothing the service acknowledged may
be lost: every process that opens the file must keep the others' SQLite locks intact, or the last one to
close takes the WAL (and every commit in it) away from under the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from conftest import ROOT, make_session
from promem_fast.testing.service_processes import Server, new_key, wait_job

TURNS = [("I adopted a beagle named Biscuit last Saturday.", "Congratulations on adopting Biscuit!"),
         ("I moved to Lisbon in May for a job at Nordvik Labs.", "Lisbon is lovely; how is the new job?")]


def promem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promem_fast.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_keys_commands_beside_a_running_server_lose_nothing_across_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    key = new_key(path, "acme")
    server = Server(path, "--rate", "0")
    try:
        listed = promem("keys", "list", "--db", str(path))  # the operator looks, while the service runs
        assert listed.returncode == 0, listed.stderr
        created = promem("keys", "create", "--db", str(path), "--tenant", "acme")
        assert created.returncode == 0, created.stderr
        fresh = created.stdout.strip()
        with server.client(fresh) as other:  # a key made while serving works at once (checked below)
            fresh_status = other.get("/v1/users").status_code
        with server.client(key) as http:
            sessions = [make_session(f"s{i}", "Maya", TURNS).to_dict() for i in range(20)]
            reply = http.post("/v1/users/Maya/sessions", json={"sessions": sessions})
            assert reply.status_code == 202, reply.text
            job = reply.json()["job_id"]
            assert wait_job(http, job)["done"] == 20
        server.kill()
        server = Server(path, "--rate", "0")
        with server.client(key) as http:
            stored = http.get("/v1/users/Maya/sessions")
            assert stored.status_code == 200, stored.text
            assert len(stored.json()["sessions"]) == 20
            assert http.get(f"/v1/jobs/{job}").status_code == 200
        assert fresh_status == 200
        with server.client(fresh) as other:
            assert other.get("/v1/users").status_code == 200
    finally:
        server.stop()


def test_a_reader_process_beside_a_running_server_loses_nothing_across_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    key = new_key(path, "acme")
    server = Server(path, "--rate", "0")
    try:
        with server.client(key) as http:
            first = http.post("/v1/users/Maya/sessions", json={"sessions": [make_session("r0", "Maya", TURNS).to_dict()]})
            assert wait_job(http, first.json()["job_id"])["done"] == 1
            listed = promem("list", "--db", str(path), "--user", "Maya", "--tenant", "acme")
            assert listed.returncode == 0, listed.stderr
            sessions = [make_session(f"r{i}", "Maya", TURNS).to_dict() for i in range(1, 6)]
            job = http.post("/v1/users/Maya/sessions", json={"sessions": sessions}).json()["job_id"]
            assert wait_job(http, job)["done"] == 5
        server.kill()
        server = Server(path, "--rate", "0")
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as http:
            assert len(http.get("/v1/users/Maya/sessions").json()["sessions"]) == 6
    finally:
        server.stop()
