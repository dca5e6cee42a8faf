"""The service as an attacker and a careful operator try it, over real HTTP (uvicorn on 127.0.0.1, scripted
profile): no input gets a 500, names the service could not address are refused, a delete sticks while the
user's job runs and takes the job records with it, finished jobs expire, keys never reach the log, and the
store's files are private."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import make_session
from promem_fast.testing.service_processes import Server, new_key, wait_job

TURNS = [("I adopted a beagle named Biscuit last Saturday.", "Congratulations on adopting Biscuit!"),
         ("I moved to Lisbon in May for a job at Nordvik Labs.", "Lisbon is lovely; how is the new job?")]


def session(sid: str, user: str = "Maya") -> dict[str, Any]:
    return make_session(sid, user, TURNS).to_dict()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    path = tmp_path_factory.mktemp("private") / "memory.db"
    key = new_key(path, "acme")
    server = Server(path, "--rate", "0")
    try:
        with server.client(key) as http:
            reply = http.post("/v1/users/Maya/sessions", json={"sessions": [session("m1")]})
            assert wait_job(http, reply.json()["job_id"])["done"] == 1
        yield server, key
    finally:
        server.stop()


@pytest.fixture
def http(served: tuple[Server, str]) -> Iterator[httpx.Client]:
    with served[0].client(served[1]) as client:
        yield client


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("node", [2**63, 2**64 + 5, 10**30])
def test_a_memory_id_past_64_bits_is_a_422_naming_it(http: httpx.Client, method: str, node: int) -> None:
    reply = http.request(method, f"/v1/users/Maya/memories/{node}")
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["path", "node_id"]


RAW_SURROGATE = '"\\ud800"'  # the JSON escape of a lone surrogate, as an attacker sends it


@pytest.mark.parametrize(("route", "body", "field"), [
    ("/v1/users/Maya/search", '{"query": %s}' % RAW_SURROGATE, "body.query"),
    ("/v1/users/Maya/search", '{"query": "dog", "k": %s}' % RAW_SURROGATE, "body.k"),
    ("/v1/users/Maya/answer", '{"question": %s}' % RAW_SURROGATE, "body.question"),
    ("/v1/users/Maya/sessions", '{"sessions": [{"session_id": %s, "turns": []}]}' % RAW_SURROGATE,
     "body.sessions[0].session_id"),
    ("/v1/users/Maya/sessions", '{"sessions": [{"session_id": "ok", "turns": [{"role": "user", "text": %s}]}]}'
     % RAW_SURROGATE, "body.sessions[0].turns[0].text"),
])
def test_a_lone_surrogate_anywhere_in_a_body_is_a_422_naming_the_field(http: httpx.Client, route: str, body: str,
                                                                       field: str) -> None:
    reply = http.post(route, content=body.encode(), headers={"content-type": "application/json"})
    assert reply.status_code == 422, reply.text
    (problem,) = reply.json()["detail"]
    assert problem["field"] == field and "surrogate" in problem["msg"]


@pytest.mark.parametrize(("path", "field"), [("/v1/users/%2E%2E/memories", "user_id"),
                                             ("/v1/users/a%00b/sessions", "user_id"),
                                             ("/v1/users/Maya/sessions/%2E%2E", "session_id"),
                                             ("/v1/users/" + "x" * 300 + "/graph", "user_id")])
def test_a_path_like_or_invisible_name_in_a_route_is_a_422(http: httpx.Client, path: str, field: str) -> None:
    method = "DELETE" if "/sessions/" in path else "GET"
    reply = http.request(method, path)
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["path", field]


def test_duplicated_session_ids_in_one_request_are_a_422_naming_both(http: httpx.Client) -> None:
    reply = http.post("/v1/users/Maya/sessions", json={"sessions": [session("d1"), session("d2"), session("d1")]})
    assert reply.status_code == 422, reply.text
    (twin,) = reply.json()["detail"]
    assert twin["field"] == "sessions[2].session_id" and "sessions[0].session_id" in twin["error"]
    assert "d1" not in http.get("/v1/users/Maya/sessions").json()["sessions"]


def test_a_key_in_the_query_string_is_refused_with_a_401_naming_the_header(served: tuple[Server, str]) -> None:
    server, key = served
    for param in ("api_key", "token", "key"):
        reply = httpx.get(f"{server.url}/v1/users", params={param: key})
        assert reply.status_code == 401 and "header" in reply.json()["detail"], reply.text
    # even alongside a good header key: the key in the URL is exposed, so the request is not served
    with server.client(key) as http:
        reply = http.get("/v1/users", params={"api_key": key})
    assert reply.status_code == 401


def test_the_export_is_streamed_from_a_file_no_folder_lists(http: httpx.Client, served: tuple[Server, str]) -> None:
    before = sorted(p.name for p in served[0].path.parent.iterdir())
    lines = http.get("/v1/export").text.splitlines()
    assert '"promem-store"' in lines[0] and any('"m1"' in line for line in lines[1:])
    assert sorted(p.name for p in served[0].path.parent.iterdir()) == before


def test_store_files_of_the_service_are_private(served: tuple[Server, str]) -> None:
    path = served[0].path
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir() if p.name.startswith("memory.db")}
    assert modes == {"memory.db": 0o600, "memory.db-wal": 0o600, "memory.db-shm": 0o600}


def test_an_export_the_client_downloads_is_private_whatever_the_umask(served: tuple[Server, str], open_umask: None,
                                                                     tmp_path: Path) -> None:
    from promem_fast.client import Client

    with Client(served[0].url, served[1]) as client:
        client.export(tmp_path / "dump.jsonl")
    assert stat.S_IMODE((tmp_path / "dump.jsonl").stat().st_mode) == 0o600
    assert '"m1"' in (tmp_path / "dump.jsonl").read_text()


def started(tmp_path: Path, *extra: str, **options: Any) -> tuple[Server, str]:
    """A fresh server on its own store, and a key of tenant acme."""
    key = new_key(tmp_path / "memory.db", "acme")
    return Server(tmp_path / "memory.db", "--rate", "0", *extra, **options), key


def until(done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def queue_depth(server: Server) -> int:
    """Sessions accepted and not finished, cancelled ones the engine is still running included."""
    return int(httpx.get(server.url + "/healthz").json()["queue_depth"])


def test_the_access_log_holds_no_key(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server, key = started(tmp_path, log=log, verbose=True)
    secret = key.split("_", 2)[2]
    try:
        with server.client(key) as http:
            statuses = [http.get(route).status_code for route in
                        ("/v1/users", "/v1/users/Maya/memories", f"/v1/users/{key}/graph")]  # a key in the path
        for params in ({"api_key": key}, {"token": key}, {"q": key}):
            statuses.append(httpx.get(f"{server.url}/v1/users", params=params).status_code)
        statuses.append(httpx.get(f"{server.url}/v1/users", headers={"X-API-Key": key}).status_code)
    finally:
        server.stop()
    text = log.read_text()
    assert text.count("GET /v1/users") >= 6  # the requests were logged ...
    assert secret not in text and key not in text  # ... and no key with them
    assert statuses == [200, 404, 401, 401, 401, 401, 200]


def test_deleting_a_user_while_its_job_runs_sticks_and_purges_the_job(tmp_path: Path) -> None:
    server, key = started(tmp_path, "--max-in-flight", "4")
    try:
        with server.client(key) as http:
            sessions = [make_session(f"z{i}", "Zed", TURNS * 3).to_dict() for i in range(150)]
            job = http.post("/v1/users/Zed/sessions", json={"sessions": sessions}).json()["job_id"]
            until(lambda: http.get(f"/v1/jobs/{job}").json()["done"] > 0, 60)
            reply = http.delete("/v1/users/Zed")
            assert reply.status_code == 200, reply.text
            until(lambda: queue_depth(server) == 0, 180)  # the sessions running at the delete finish
            assert queue_depth(server) == 0
            assert http.get("/v1/users").json()["users"] == []  # nothing came back
            assert http.get("/v1/users/Zed/sessions").status_code == 404
            assert http.get(f"/v1/jobs/{job}").status_code == 404  # its user name and session ids are gone
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "memory.db") as raw:  # nothing of the user is left in the job tables either
        assert raw.execute("SELECT COUNT(*) FROM serve_jobs").fetchone()[0] == 0
        assert raw.execute("SELECT COUNT(*) FROM serve_queue").fetchone()[0] == 0


def test_deleting_an_agents_sessions_while_their_job_runs_sticks_and_keeps_the_other_agents(tmp_path: Path) -> None:
    """mem0's ``delete_all(user_id=, agent_id=)`` over HTTP while that agent's sessions are being extracted: the
    queued ones are cancelled, the running ones are not stored when they finish, the stored ones go, and no
    job record keeps their ids; the user's other agent keeps its memory."""
    import json

    server, key = started(tmp_path, "--max-in-flight", "4")
    try:
        with server.client(key) as http:
            kept = [make_session(f"b{i}", "Zed", TURNS).to_dict() for i in range(2)]
            assert wait_job(http, http.post("/v1/users/Zed/sessions", json={
                "sessions": kept, "metadata": {"agent_id": "bot-b"}}).json()["job_id"])["done"] == 2
            busy = [make_session(f"a{i}", "Zed", TURNS * 3).to_dict() for i in range(150)]
            job = http.post("/v1/users/Zed/sessions", json={"sessions": busy, "metadata": {"agent_id": "bot-a"}}
                            ).json()["job_id"]
            until(lambda: http.get(f"/v1/jobs/{job}").json()["done"] > 0, 60)
            reply = http.delete("/v1/users/Zed", params={"filters": json.dumps({"agent_id": "bot-a"})})
            assert reply.status_code == 200, reply.text
            until(lambda: queue_depth(server) == 0, 180)  # the sessions running at the delete finish
            assert queue_depth(server) == 0
            assert http.get("/v1/users/Zed/sessions").json()["sessions"] == ["b0", "b1"]  # none came back
            left = http.get("/v1/users/Zed/memories").json()["memories"]
            assert left and {m["metadata"]["agent_id"] for m in left} == {"bot-b"}
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "memory.db") as raw:  # no record of bot-a's sessions is left in the queue
        assert raw.execute("SELECT COUNT(*) FROM serve_queue WHERE session_id LIKE 'a%' OR payload LIKE '%bot-a%'"
                           ).fetchone()[0] == 0


def test_finished_jobs_expire_after_the_retention_period(tmp_path: Path) -> None:
    server, key = started(tmp_path, "--job-retention", "1")
    try:
        with server.client(key) as http:
            job = http.post("/v1/users/Maya/sessions", json={"sessions": [session("r1")]}).json()["job_id"]
            assert wait_job(http, job)["done"] == 1
            until(lambda: http.get(f"/v1/jobs/{job}").status_code == 404, 30)
            assert http.get(f"/v1/jobs/{job}").status_code == 404
            assert http.get("/v1/users/Maya/sessions").json()["sessions"] == ["r1"]  # the memory stays
    finally:
        server.stop()


def test_the_service_and_mcp_refuse_names_they_could_not_address(tmp_path: Path) -> None:
    """``Service.submit`` is what both the HTTP route and the MCP ``add`` tool call; MCP takes the user name
    from the agent, unchecked by any route."""
    from conftest import scripted_config
    from promem_fast.serve.service import Service

    service = Service(tmp_path / "memory.db", scripted_config())
    try:
        for user in ("..", "Ann/Lee", "a\\b", "x" * 300):
            job, rejected = service.submit("acme", user, [session("n1", user)])
            assert job is None and [r["field"] for r in rejected] == ["sessions[0].user"], rejected
        assert service.queue.depth() == 0
    finally:
        service.close()


def test_the_export_is_staged_private_and_unlinked(tmp_path: Path) -> None:
    from conftest import scripted_config
    from promem_fast.serve.service import Service

    service = Service(tmp_path / "memory.db", scripted_config())
    try:
        with service.export("acme") as staged:
            info = os.fstat(staged.fileno())
            assert (stat.S_IMODE(info.st_mode), info.st_nlink) == (0o600, 0)  # owner-only, in no folder
            assert b'"promem-store"' in staged.read()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db", "memory.db-shm", "memory.db-wal"]
    finally:
        service.close()
