"""``promem serve`` over real HTTP: every route, every refusal, tenant isolation, the web page, the client.

One real server process (uvicorn on 127.0.0.1, the scripted profile) serves the module; two tenants each have
memory in it, so every route is also tried with the other tenant's key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import tomas_sessions, make_session
from promem_fast.testing.service_processes import Server, new_key, wait_job

TOMAS = "Tomas Berg"
MAYA = "Maya"


def maya_session(sid: str = "maya-1") -> dict[str, Any]:
    return make_session(sid, MAYA, [
        ("I adopted a beagle named Biscuit last Saturday.", "Congratulations on adopting Biscuit!"),
        ("I moved to Lisbon in May for a job at Nordvik Labs.", "Lisbon is lovely; how is the new job?"),
        ("My sister Ana visits me in Lisbon every month.", "It is great that Ana visits so often."),
    ]).to_dict()


def add(http: httpx.Client, user: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    reply = http.post(f"/v1/users/{user}/sessions", json={"sessions": sessions})
    assert reply.status_code == 202, reply.text
    return wait_job(http, reply.json()["job_id"])


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Server, dict[str, str]]]:
    """One server per backend: the store in an SQLite file, then in a PostgreSQL database."""
    folder = tmp_path_factory.mktemp("serve")
    path: Path | str = folder / "memory.db"
    if request.param == "postgresql":
        path = request.getfixturevalue("pg_server").fresh_database()
    keys = {name: new_key(path, tenant) for name, tenant in
            (("a", "acme"), ("b", "globex"), ("rate", "acme"), ("revoked", "acme"), ("c", "initech"))}
    from promem_fast.serve import db
    from promem_fast.serve.keys import KeyRing

    conn = db.connect(path)
    KeyRing(conn).revoke(keys["revoked"])
    conn.close()
    server = Server(path, "--rate", "20", "--burst", "60", "--max-body", "1000000", log=folder / "serve.log")
    try:
        with server.client(keys["a"]) as a, server.client(keys["b"]) as b:
            assert add(a, TOMAS, [s.to_dict() for s in tomas_sessions(3)])["done"] == 3
            assert add(b, MAYA, [maya_session()])["done"] == 1
        yield server, keys
    finally:
        server.stop()


@pytest.fixture
def a(served: tuple[Server, dict[str, str]]) -> Iterator[httpx.Client]:
    with served[0].client(served[1]["a"]) as http:
        yield http


@pytest.fixture
def b(served: tuple[Server, dict[str, str]]) -> Iterator[httpx.Client]:
    with served[0].client(served[1]["b"]) as http:
        yield http


# ---------------------------------------------------------------------------------------------- routes
def test_reads_of_a_users_memory(a: httpx.Client) -> None:
    users = a.get("/v1/users").json()["users"]
    assert TOMAS in users and MAYA not in users  # Maya is the other tenant's
    sessions = a.get(f"/v1/users/{TOMAS}/sessions").json()["sessions"]
    assert sorted(sessions) == sorted(s.session_id for s in tomas_sessions(3))
    memories = a.get(f"/v1/users/{TOMAS}/memories").json()["memories"]
    assert memories and all(m["user_id"] == TOMAS and m["session_ids"][0] in sessions for m in memories)
    one = a.get(f"/v1/users/{TOMAS}/memories/{memories[0]['id']}").json()
    assert one == memories[0]
    graph = a.get(f"/v1/users/{TOMAS}/graph").json()
    ids = {n["id"] for n in graph["nodes"]}
    assert {m["id"] for m in memories} <= ids
    assert graph["edges"] and all(e["source"] in ids and e["target"] in ids for e in graph["edges"])
    assert graph["details"] and all(d["node"] in ids for d in graph["details"])


def test_search_returns_ranked_hits_with_details_and_dates(a: httpx.Client) -> None:
    hits = a.post(f"/v1/users/{TOMAS}/search", json={"query": "job at the hospital", "k": 5}).json()["results"]
    assert 0 < len(hits) <= 5
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(h["valid_from"] for h in hits) and any(h["details"] for h in hits)


MEMORY_FIELDS = {"id", "memory", "user_id", "session_ids", "valid_from", "valid_until", "recorded_at", "superseded_by",
                 "reason", "score", "details", "metadata", "links", "edits"}


def test_a_hit_has_one_id(a: httpx.Client) -> None:
    hits = a.post(f"/v1/users/{TOMAS}/search", json={"query": "work"}).json()["results"]
    assert hits
    for hit in hits:
        assert set(hit) == MEMORY_FIELDS  # no second id (the extracted node's own index) and no copy of the text
        assert isinstance(hit["id"], int) and hit["user_id"] == TOMAS
    explained = a.post(f"/v1/users/{TOMAS}/search", json={"query": "work", "explain": True}).json()["results"]
    assert [h["id"] for h in explained] == [h["id"] for h in hits]  # explaining changes no order
    for hit in explained:  # mem0's explain: the same memory, with how it was ranked
        assert set(hit) == MEMORY_FIELDS | {"score_details"}
        assert hit["score_details"]["semantic_score"] == hit["score"] and hit["score_details"]["window"] is None


def test_history_and_job_times_read_as_iso_8601(a: httpx.Client) -> None:
    node = a.get(f"/v1/users/{TOMAS}/memories").json()["memories"][0]["id"]
    chain = a.get(f"/v1/users/{TOMAS}/memories/{node}/history").json()
    assert (chain["id"], [m["id"] for m in chain["nodes"]], chain["edges"]) == (node, [node], [])  # never replaced
    assert a.get(f"/v1/users/{TOMAS}/memories/999999/history").status_code == 404
    reply = a.post("/v1/users/Timed/sessions", json={"sessions": [dict(maya_session("t-1"), user="Timed")]})
    job = wait_job(a, reply.json()["job_id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", job["created"]), job["created"]
    assert job["user_id"] == "Timed"
    assert a.delete("/v1/users/Timed").json()["deleted"] > 0  # the module's other tests count acme's sessions


def test_serve_says_where_it_listens_and_logs_each_request(served: tuple[Server, dict[str, str]],
                                                           a: httpx.Client) -> None:
    server, keys = served
    a.get("/v1/users")
    log = server.log.read_text()
    assert f"listening on {server.url}/ (page), {server.url}/docs (API)" in log
    assert re.search(r'"GET /v1/users HTTP/1.1" 200', log)
    assert all(key not in log for key in keys.values())  # the key travels in a header, never into the log


def test_openapi_schemas_are_typed(served: tuple[Server, dict[str, str]]) -> None:
    spec = httpx.get(served[0].url + "/openapi.json").json()
    schemas = spec["components"]["schemas"]
    search = spec["paths"]["/v1/users/{user_id}/search"]["post"]
    assert search["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Hits"}
    assert set(schemas["Memory"]["properties"]) == MEMORY_FIELDS | {"score_details"}  # only when asked to explain
    assert schemas["SearchQuery"]["properties"]["k"]["default"] == 10
    assert {"as_of", "since", "until"} <= set(schemas["SearchQuery"]["properties"])
    assert set(schemas["Answer"]["properties"]) == {"question", "answer", "abstained", "as_of", "error", "memories"}
    for path, verbs in spec["paths"].items():  # every /v1 reply is described, none left as an untyped object
        for verb, op in verbs.items():
            if path.startswith("/v1") and path != "/v1/export":
                ok = next(code for code in op["responses"] if code.startswith("2"))
                assert "$ref" in op["responses"][ok]["content"]["application/json"]["schema"], (verb, path)


def rounds(server: Server) -> float:
    line = next(x for x in httpx.get(server.url + "/metrics").text.splitlines()
                if x.startswith("promem_engine_rounds_total "))
    return float(line.split()[1])


def test_answer_runs_on_the_one_shared_engine(served: tuple[Server, dict[str, str]], a: httpx.Client) -> None:
    before = rounds(served[0])
    # a question sharing a word ("job") with a memory: one the stand-in embedder cannot relate is abstained
    # from without the model (test_abstain)
    reply = a.post(f"/v1/users/{TOMAS}/answer", json={"question": "Which job did Tomas Berg take?"})
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["question"] == "Which job did Tomas Berg take?" and answer["answer"]
    assert set(answer) == {"question", "answer", "abstained", "as_of", "error", "memories"}  # no gold, ...
    assert answer["memories"] and set(answer["memories"][0]) == {"id", "memory", "session_id", "day", "score"}
    assert rounds(served[0]) > before  # the worker's engine ran the QA programs (no second engine)


def test_export_holds_only_the_tenants_sessions(a: httpx.Client) -> None:
    reply = a.get("/v1/export")
    assert reply.status_code == 200
    lines = [json.loads(line) for line in reply.text.splitlines()]
    sessions = [line for line in lines if line.get("kind") == "session"]
    assert len(sessions) == 3 and {s["tenant"] for s in sessions} == {"acme"}
    assert {s["user"] for s in sessions} == {TOMAS}


def test_deletes_of_a_node_a_session_and_a_user(a: httpx.Client) -> None:
    user = "Delete Me"
    add(a, user, [dict(maya_session("d-1"), user=user), dict(maya_session("d-2"), user=user)])
    memories = a.get(f"/v1/users/{user}/memories").json()["memories"]
    node = memories[0]["id"]
    assert a.delete(f"/v1/users/{user}/memories/{node}").json() == {"deleted": 1}
    assert a.get(f"/v1/users/{user}/memories/{node}").status_code == 404
    # d-2 said the same as d-1: its saying of the removed memory stands in for it now
    after = a.get(f"/v1/users/{user}/memories").json()["memories"]
    assert node not in [m["id"] for m in after] and len(after) == len(memories)
    assert {m["memory"] for m in after} == {m["memory"] for m in memories}
    assert a.delete(f"/v1/users/{user}/sessions/d-1").json()["deleted"] > 0
    assert a.get(f"/v1/users/{user}/sessions").json() == {"sessions": ["d-2"]}
    assert a.delete(f"/v1/users/{user}/sessions/d-1").status_code == 404
    assert a.delete(f"/v1/users/{user}").json()["deleted"] > 0
    assert a.get(f"/v1/users/{user}/memories").status_code == 404
    assert user not in a.get("/v1/users").json()["users"]


def test_a_job_reports_progress_and_the_sessions_it_could_not_take(a: httpx.Client) -> None:
    bad = {"session_id": "broken", "turns": [{"role": "user", "text": " "}]}
    reply = a.post("/v1/users/Partial/sessions", json={"sessions": [bad, dict(maya_session("p-1"), user="Partial")]})
    assert reply.status_code == 202
    body = reply.json()
    assert body["accepted"] == 1
    assert body["rejected"] == [{"index": 0, "session_id": "broken", "field": "sessions[0].turns[0].text",
                                 "error": "turn has no text"}]
    status = wait_job(a, body["job_id"])
    assert (status["total"], status["done"], status["failed"], status["state"]) == (1, 1, 0, "finished")
    assert a.get("/v1/users/Partial/sessions").json() == {"sessions": ["p-1"]}


def test_health_and_metrics(served: tuple[Server, dict[str, str]], a: httpx.Client) -> None:
    assert httpx.get(served[0].url + "/healthz").json()["ok"] is True
    text = httpx.get(served[0].url + "/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["promem_queue_depth"] == 0
    assert values['promem_sessions_total{outcome="done"}'] >= 4
    assert values['promem_stage_tokens_total{stage="draft",kind="prompt"}'] > 0
    assert values["promem_engine_rounds_total"] > 0 and values['promem_backend_calls_total{kind="generate"}'] > 0
    assert "acme" not in text and "globex" not in text and TOMAS not in text


def test_openapi_lists_the_versioned_routes(served: tuple[Server, dict[str, str]]) -> None:
    spec = httpx.get(served[0].url + "/openapi.json").json()
    assert {"/v1/users/{user_id}/sessions", "/v1/jobs/{job_id}", "/v1/users/{user_id}/search",
            "/v1/users/{user_id}/answer", "/v1/users/{user_id}/graph", "/v1/export",
            "/v1/users/{user_id}/memories/{node_id}/history"} <= set(spec["paths"])
    docs = httpx.get(served[0].url + "/docs")
    assert docs.status_code == 200 and "/static/swagger/swagger-ui-bundle.js" in docs.text
    assert "https://" not in docs.text  # served from the package: works with no internet
    assert httpx.get(served[0].url + "/static/swagger/swagger-ui-bundle.js").status_code == 200
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


# ---------------------------------------------------------------------------------------------- refusals
ROUTES = [
    ("GET", "/v1/users", None),
    ("GET", f"/v1/users/{TOMAS}/memories", None),
    ("GET", f"/v1/users/{TOMAS}/sessions", None),
    ("GET", f"/v1/users/{TOMAS}/graph", None),
    ("POST", f"/v1/users/{TOMAS}/search", {"query": "work"}),
    ("POST", f"/v1/users/{TOMAS}/answer", {"question": "What?"}),
    ("POST", f"/v1/users/{TOMAS}/sessions", {"sessions": [maya_session()]}),
    ("GET", "/v1/export", None),
    ("DELETE", f"/v1/users/{TOMAS}", None),
]


@pytest.mark.parametrize("key", ["", "pmk_000000000000_notakeyatall1234567890", "revoked", "garbage"])
def test_an_unknown_missing_or_revoked_key_gets_401_on_every_route(served: tuple[Server, dict[str, str]],
                                                                     key: str) -> None:
    server, keys = served
    with server.client(keys.get(key, key)) as http:
        for method, path, body in ROUTES:
            reply = http.request(method, path, json=body)
            assert reply.status_code == 401, (method, path)
            assert reply.json() == {"detail": "invalid or missing API key: send 'Authorization: Bearer pmk_…' or "
                                              "'X-API-Key: pmk_…' (the operator makes keys with: promem keys "
                                              "create --db STORE --tenant NAME)"}
    with httpx.Client(base_url=server.url, headers={"X-API-Key": keys["a"]}) as http:  # the other header works
        assert http.get(f"/v1/users/{TOMAS}/sessions").json()["sessions"]  # and nothing was deleted


def test_a_body_not_sent_as_json_gets_415_saying_which_header_to_send(a: httpx.Client) -> None:
    """curl -d without -H sends a form: the reply says what to send, not pydantic's view of a form."""
    reply = a.post(f"/v1/users/{TOMAS}/search", content=b'{"query": "work"}',
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status_code == 415
    assert "Content-Type: application/json" in reply.json()["detail"]
    bare = a.post(f"/v1/users/{TOMAS}/search", content=b'{"query": "work"}', headers={"Content-Type": ""})
    assert bare.status_code == 415 and "no Content-Type" in bare.json()["detail"]


def test_validation_errors_name_the_field(a: httpx.Client) -> None:
    reply = a.post(f"/v1/users/{TOMAS}/search", json={"k": 3})
    assert reply.status_code == 422 and reply.json()["detail"][0]["loc"] == ["body", "query"]
    reply = a.post(f"/v1/users/{TOMAS}/search", json={"query": "x", "k": 0})
    assert reply.status_code == 422 and reply.json()["detail"][0]["loc"] == ["body", "k"]
    reply = a.post(f"/v1/users/{TOMAS}/sessions", json={"sessions": []})
    assert reply.status_code == 422 and reply.json()["detail"][0]["loc"] == ["body", "sessions"]
    reply = a.post(f"/v1/users/{TOMAS}/sessions", json={"sessions": [{"session_id": "x", "turns": "hello"}]})
    assert reply.status_code == 422
    assert reply.json()["detail"] == [{"index": 0, "session_id": "x", "field": "sessions[0].turns",
                                       "error": "must be a list, got str"}]
    reply = a.post(f"/v1/users/{TOMAS}/sessions", json={"sessions": [dict(maya_session(), user="Someone")]})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "sessions[0].user"
    assert a.get(f"/v1/users/{TOMAS}/memories/notanumber").json()["detail"][0]["loc"] == ["path", "node_id"]


def test_messages_may_be_what_the_user_said_and_anything_else_is_refused_by_field(a: httpx.Client) -> None:
    """mem0's add takes a plain string; a list of things that are neither sessions nor messages is the caller's
    fault (a 422 naming ``messages``), never a 500 (found by the schemathesis run)."""
    said = a.post(f"/v1/users/{TOMAS}/sessions", json={"messages": "I started learning the cello."})
    assert said.status_code == 202 and said.json()["accepted"] == 1
    for wrong in (["a"], [1, 2], [{"role": "user", "content": "hi"}, "x"]):
        reply = a.post(f"/v1/users/{TOMAS}/sessions", json={"messages": wrong})
        assert reply.status_code == 422, wrong
        assert reply.json()["detail"][0]["loc"][:2] == ["body", "messages"]


def test_a_body_over_the_limit_gets_413(a: httpx.Client) -> None:
    big = {"sessions": [dict(maya_session(), turns=[{"role": "user", "text": "x" * 1_100_000}])]}
    assert a.post(f"/v1/users/{TOMAS}/sessions", json=big).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts the bytes received
        for _ in range(12):
            yield b" " * 100_000

    reply = a.post(f"/v1/users/{TOMAS}/search", content=chunks(), headers={"content-type": "application/json"})
    assert reply.status_code == 413
    assert a.post(f"/v1/users/{TOMAS}/search", json={"query": "work"}).status_code == 200


def test_too_many_requests_get_429_with_retry_after(served: tuple[Server, dict[str, str]]) -> None:
    server, keys = served
    with server.client(keys["rate"]) as http:
        codes = []
        for _ in range(150):
            reply = http.get("/v1/users")
            codes.append(reply.status_code)
            if reply.status_code == 429:
                assert int(reply.headers["Retry-After"]) >= 1
                break
        assert codes[-1] == 429 and len(codes) > 50
        time.sleep(1.2)
        assert http.get("/v1/users").status_code == 200
    with server.client(keys["a"]) as http:  # the limit is per key
        assert http.get("/v1/users").status_code == 200


# ---------------------------------------------------------------------------------------------- tenants
@pytest.mark.parametrize("method,path,body", [
    ("GET", f"/v1/users/{TOMAS}/memories", None),
    ("GET", f"/v1/users/{TOMAS}/sessions", None),
    ("GET", f"/v1/users/{TOMAS}/graph", None),
    ("POST", f"/v1/users/{TOMAS}/search", {"query": "work", "k": 5}),
    ("POST", f"/v1/users/{TOMAS}/answer", {"question": "Where does Tomas Berg work?"}),
    ("DELETE", f"/v1/users/{TOMAS}", None),
    ("DELETE", f"/v1/users/{TOMAS}/sessions/SESSION", None),
    ("GET", f"/v1/users/{TOMAS}/memories/NODE", None),
    ("DELETE", f"/v1/users/{TOMAS}/memories/NODE", None),
    ("GET", "/v1/memories/NODE", None),
    ("GET", "/v1/memories/NODE/history", None),
    ("PATCH", "/v1/memories/NODE", {"data": "Tomas Berg works nowhere."}),
    ("DELETE", "/v1/memories/NODE", None),
    ("DELETE", f"/v1/users/{TOMAS}?filters=%7B%7D", None),
    ("GET", "/v1/jobs/JOB", None),
])
def test_another_tenants_memory_is_not_found(a: httpx.Client, b: httpx.Client, method: str, path: str,
                                             body: Any) -> None:
    node = a.get(f"/v1/users/{TOMAS}/memories").json()["memories"][0]["id"]
    session = a.get(f"/v1/users/{TOMAS}/sessions").json()["sessions"][0]
    job = None  # a job of tenant a's only where the route names one (each request counts against a's rate limit)
    if "JOB" in path:
        job = a.post(f"/v1/users/{TOMAS}/sessions", json={"sessions": [tomas_sessions(1)[0].to_dict()]}
                     ).json()["job_id"]
        path = path.replace("JOB", job)
    path = path.replace("NODE", str(node)).replace("SESSION", session)
    before = a.get("/v1/export").text
    reply = b.request(method, path, json=body)
    assert (reply.status_code, reply.json()) == (404, {"detail": "not found"})
    unknown = b.request(method, path.replace(TOMAS, "Nobody At All").replace(job or "JOB", "0" * 16), json=body)
    assert (unknown.status_code, unknown.json()) == (404, {"detail": "not found"})  # no hint that it exists
    assert TOMAS not in b.get("/v1/users").json()["users"]
    assert TOMAS not in b.get("/v1/export").text
    if job is not None:
        wait_job(a, job)
    assert a.get("/v1/export").text == before  # untouched (a job re-adds a session it already had)


# ---------------------------------------------------------------------------------------------- web page
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test does)")


def chromium(url: str, *args: str) -> str:
    """Headless Chromium on ``url`` after its scripts ran (the fetches to 127.0.0.1 included)."""
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--window-size=1280,800", "--virtual-time-budget=10000", *args, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def graph_pixels(png: Path) -> tuple[int, int]:
    """Pixels of the graph panel that are drawn (not its white background), and those in a memory's colour
    (blue, or red for a search hit)."""
    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(png).convert("RGB")).astype(np.int32)
    height, width, _ = image.shape
    panel = image[60:height - 10, int(width * 0.4):width - 10]
    drawn = int((panel != 255).any(axis=2).sum())
    nodes = sum(int((np.abs(panel - np.array(colour)) < 24).all(axis=2).sum())
                for colour in ([0x3b, 0x6f, 0xd4], [0xd4, 0x3b, 0x3b]))
    return drawn, nodes


@needs_chromium
def test_the_web_page_draws_the_graph_and_finds_memories(served: tuple[Server, dict[str, str]], a: httpx.Client,
                                                        tmp_path: Path) -> None:
    server, keys = served
    # min=0: the stand-in embedder's scores sit below the page's default floor, made for real embedders
    url = f"{server.url}/#key={keys['a']}&user={TOMAS.replace(' ', '%20')}&q=promotion&min=0"
    dom = chromium(url, "--dump-dom")
    graph = a.get(f"/v1/users/{TOMAS}/graph").json()
    assert f'data-nodes="{len(graph["nodes"])}"' in dom
    results = len(re.findall(r"<li[ >]", dom))
    assert results > 0 and f'data-results="{results}"' in dom and "data-error" not in dom
    shot = Path(os.environ.get("PROMEM_PAGE_SCREENSHOT", tmp_path / "page.png"))  # docs/serve-page.png
    chromium(url, f"--screenshot={shot}")
    drawn, nodes = graph_pixels(shot)
    assert drawn > 5_000 and nodes > 200
    empty = tmp_path / "empty.png"  # the same page without a key draws nothing: the check can fail
    chromium(f"{server.url}/", f"--screenshot={empty}")
    assert graph_pixels(empty)[1] == 0


# ---------------------------------------------------------------------------------------------- client
def test_the_python_client_has_the_memory_verbs(served: tuple[Server, dict[str, str]], tmp_path: Path) -> None:
    from promem_fast.client import Client, ServerError

    server, keys = served
    with Client(server.url, keys["b"]) as client:
        assert client.add(maya_session("maya-2"), user_id=MAYA)["done"] == 1
        assert client.users() == [MAYA]
        assert client.sessions(user_id=MAYA) == ["maya-1", "maya-2"]
        hits = client.search("beagle Biscuit", user_id=MAYA, top_k=3)["results"]
        assert 0 < len(hits) <= 3 and "Biscuit" in hits[0]["memory"] and set(hits[0]) == MEMORY_FIELDS
        memories = client.get_all(user_id=MAYA)["results"]
        assert client.get(memories[0]["id"], user_id=MAYA) == memories[0]
        # maya-2 says what maya-1 said: its saying was merged into the memory, so the history holds both
        history = client.history(memories[0]["id"], user_id=MAYA)
        assert history["nodes"][0]["id"] == memories[0]["id"] and history["nodes"][0]["session_ids"][0] == "maya-1"
        assert [e["kind"] for e in history["edges"]] == ["duplicate"]
        assert {n["id"] for n in client.graph(user_id=MAYA)["nodes"]} >= {m["id"] for m in memories}
        reply = client.answer("What is the name of Maya's beagle?", user_id=MAYA)
        assert reply["question"] == "What is the name of Maya's beagle?" and reply["answer"]
        assert client.export(tmp_path / "globex.jsonl") == 2
        assert client.delete(memories[0]["id"], user_id=MAYA) == {"deleted": 1}
        assert client.delete(user_id=MAYA, session_id="maya-2")["deleted"] > 0
        assert client.sessions(user_id=MAYA) == ["maya-1"]
        with pytest.raises(ServerError) as refused:
            client.search("work", user_id=TOMAS)
        assert refused.value.status == 404


def test_the_client_adds_a_conversation_given_as_messages_once(served: tuple[Server, dict[str, str]]) -> None:
    from promem_fast.client import Client

    server, keys = served
    chat = [{"role": "user", "content": "I started learning the cello in March."},
            {"role": "assistant", "content": "How are the lessons going?"}]
    with Client(server.url, keys["b"]) as client:
        assert client.add(chat, user_id="Cellist", date="2025-04-02")["done"] == 1
        assert client.add(chat, user_id="Cellist", date="2025-04-02")["done"] == 1  # the same id: stored once
        (session,) = client.sessions(user_id="Cellist")
        assert session.startswith("msg-")
        assert "cello" in client.search("music lessons", user_id="Cellist", top_k=1)["results"][0]["memory"]
        client.add(chat, user_id="Cellist", date="2025-05-01")  # another day: another conversation
        assert len(client.sessions(user_id="Cellist")) == 2
        assert client.delete(user_id="Cellist")["deleted"] > 0


def test_a_session_the_store_refuses_fails_alone(tmp_path: Path) -> None:
    from promem_fast.store import MemoryStore

    path = tmp_path / "memory.db"
    key = new_key(path, "acme")
    MemoryStore(path).close()
    conn = sqlite3.connect(path)  # the file itself refuses one session, as a full disk or a bad row would
    conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON sessions WHEN NEW.session_id = 'poison' "
                 "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    conn.close()
    server = Server(path)
    try:
        with server.client(key) as http:
            sessions = [maya_session("good-1"), maya_session("poison"), maya_session("good-2")]
            status = add(http, MAYA, sessions)
            assert (status["done"], status["failed"]) == (2, 1)
            error = status["errors"][0]
            assert error["session_id"] == "poison" and "refused by the test" in error["error"]
            assert http.get(f"/v1/users/{MAYA}/sessions").json()["sessions"] == ["good-1", "good-2"]
            assert add(http, MAYA, [maya_session("good-3")])["done"] == 1  # the worker goes on
    finally:
        server.stop()


def test_the_mem0_verbs_over_http_metadata_filters_update_delete_all_and_reset(
        served: tuple[Server, dict[str, str]]) -> None:
    """mem0's verbs and names over HTTP (through the client): add with metadata, search by top_k and filters,
    update, delete_all, reset; the reset empties the key's tenant only."""
    from promem_fast.client import Client, ServerError

    server, keys = served
    with Client(server.url, keys["c"]) as client:
        client.add("I keep bees in Porto.", user_id="Ana", metadata={"topic": "hobby"})
        client.add("I work as a nurse.", user_id="Ana", metadata={"topic": "work"})
        client.add("I live in Lisbon.", user_id="Rui")
        client.add("My locker code is 4411.", user_id="Ana", infer=False)  # kept as written, no model
        client.add("My locker code is 4411.", user_id="Ana", infer=False)  # said again: kept again, as mem0 does
        assert [m["memory"] for m in client.get_all(user_id="Ana")["results"]] == [
            "Ana keep bees in Porto.", "Ana work as a nurse.", "My locker code is 4411.", "My locker code is 4411."]
        work = client.search("what does Ana do", user_id="Ana", top_k=5, filters={"topic": "work"})["results"]
        assert [(m["memory"], m["metadata"]) for m in work] == [("Ana work as a nurse.", {"topic": "work"})]
        with pytest.raises(ServerError) as bad:
            client.search("x", user_id="Ana", filters={"no such key!": 1})
        assert bad.value.status == 422 and "plain name" in str(bad.value.detail)
        every = client.search("what does Ana do", user_id="Ana", top_k=5)["results"]
        best = max(m["score"] for m in every)
        assert [m["id"] for m in client.search("what does Ana do", user_id="Ana", threshold=best)["results"]] == [
            m["id"] for m in every if m["score"] >= best]
        assert client.search("what does Ana do", user_id="Ana", threshold=min(best + 0.01, 1.0))["results"] == []
        changed = client.update(work[0]["id"], "Ana works as a surgeon.", user_id="Ana")
        assert (changed["id"], changed["memory"]) == (work[0]["id"], "Ana works as a surgeon.")
        assert client.search("surgeon", user_id="Ana", top_k=1)["results"][0]["id"] == work[0]["id"]
        assert client.delete_all(user_id="Ana") == {"deleted": 4}
        assert client.reset() == {"deleted": 1}
        assert client.users() == []
    with Client(server.url, keys["b"]) as other:
        assert other.users() == [MAYA]  # another tenant keeps its memory


def test_mem0_scopes_over_http_agent_and_run_in_lists_searches_and_deletes(
        served: tuple[Server, dict[str, str]]) -> None:
    """A mem0 program's agent_id and run_id through the client: stored with the session, then the scope of
    get_all, search and delete_all, which removes that agent's memory only; a malformed ``filters`` query
    parameter is a 422 naming it."""
    from promem_fast.client import Client, ServerError
    from promem_fast.errors import InputError

    def said(memory: dict[str, Any]) -> str:
        """Which of the things Ana said a memory is about."""
        (word,) = [w for w in ("bees", "tomatoes", "nurse", "Paris") if w in memory["memory"]]
        return word

    server, keys = served
    with Client(server.url, keys["c"]) as client:
        client.add("I keep bees in Porto.", user_id="Ana", agent_id="garden-bot", run_id="monday")
        client.add("I grow tomatoes on my balcony.", user_id="Ana", agent_id="garden-bot", run_id="friday")
        client.add("I work as a nurse.", user_id="Ana", agent_id="career-bot")
        garden = client.get_all(user_id="Ana", agent_id="garden-bot")["results"]
        assert [(said(m), m["metadata"]) for m in garden] == [
            ("bees", {"agent_id": "garden-bot", "run_id": "monday"}),
            ("tomatoes", {"agent_id": "garden-bot", "run_id": "friday"})]
        assert [said(m) for m in client.get_all(user_id="Ana", run_id="friday")["results"]] == ["tomatoes"]
        assert [said(m) for m in client.get_all(user_id="Ana", top_k=1)["results"]] == ["bees"]  # oldest first
        found = client.search("what does Ana do", user_id="Ana", agent_id="career-bot")["results"]
        assert [said(m) for m in found] == ["nurse"]
        # mem0 2.x names the user inside filters, and the count as limit
        assert client.search("what does Ana do", filters={"user_id": "Ana", "agent_id": "career-bot"}) == {
            "results": found}
        assert [said(m) for m in client.get_all(filters={"user_id": "Ana"}, limit=2)["results"]] == ["bees", "tomatoes"]
        assert len(client.search("Ana", user_id="Ana", limit=2)["results"]) == 2
        with pytest.raises(InputError, match="user_id"):
            client.search("what does Ana do", filters={"agent_id": "career-bot"})
        # an agent's answer is drawn from its own memory only
        shown = client.answer("What does Ana grow on the balcony?", user_id="Ana", agent_id="garden-bot")["memories"]
        assert shown and {said(m) for m in shown} <= {"bees", "tomatoes"}
        assert client.answer("What does Ana grow on the balcony?", user_id="Ana",
                             agent_id="career-bot")["answer"] is None  # nothing of it in the career agent's memory
        with pytest.raises(ServerError) as refused:
            client.answer("x", user_id="Ana", filters={"a b": 1})
        assert refused.value.status == 422 and "plain name" in str(refused.value.detail)
        with pytest.raises(InputError, match="differ"):  # refused before anything is sent
            client.get_all(user_id="Ana", agent_id="a", filters={"agent_id": "b"})
        assert client.delete_all(user_id="Ana", agent_id="nobody") == {"deleted": 0}  # a known user: nothing
        assert client.delete_all(user_id="Ana", agent_id="garden-bot") == {"deleted": 2}
        assert [said(m) for m in client.get_all(user_id="Ana")["results"]] == ["nurse"]
        assert len(client.sessions(user_id="Ana")) == 1
        with pytest.raises(ServerError) as unknown:
            client.delete_all(user_id="Nobody", agent_id="garden-bot")
        assert unknown.value.status == 404
        # a memory by id alone, as mem0's get, update, history and delete take it
        (nurse,) = client.get_all(user_id="Ana")["results"]
        assert client.get(nurse["id"]) == nurse
        assert client.update(nurse["id"], "Ana works as a midwife.")["memory"] == "Ana works as a midwife."
        assert [m["memory"] for m in client.history(nurse["id"])["nodes"]] == ["Ana works as a midwife."]
        assert client.get(nurse["id"], user_id="Ana")["edits"][0]["text"] == nurse["memory"]
        with pytest.raises(ServerError) as elsewhere:  # named under another user: not found
            client.get(nurse["id"], user_id="Rui")
        assert elsewhere.value.status == 404
        assert client.delete(nurse["id"]) == {"deleted": 1}
        with pytest.raises(ServerError) as gone:
            client.get(nurse["id"])
        assert gone.value.status == 404
        with pytest.raises(InputError, match="user_id"):
            client.delete()
    with Client(server.url, keys["c"]) as client:  # a stay that ended: out of searches and lists unless asked
        client.add("I am in Paris for a conference this week.", user_id="Ana", date="2020-01-27",
                   expiration_date="2020-01-31")
        client.add("I keep bees in Porto.", user_id="Ana", date="2020-01-20")
        assert [said(m) for m in client.get_all(user_id="Ana")["results"]] == ["bees"]
        assert {said(m) for m in client.search("Where is Ana?", user_id="Ana")["results"]} == {"bees"}
        assert {said(m) for m in client.search("Where is Ana?", user_id="Ana", show_expired=True)["results"]} == {
            "bees", "Paris"}
        assert [said(m) for m in client.get_all(user_id="Ana", show_expired=True)["results"]] == ["Paris", "bees"]
        assert "Paris" in {said(m) for m in client.search("Where is Ana?", user_id="Ana", as_of="2020-01-30")[
            "results"]}
        with pytest.raises(ServerError) as unreadable:
            client.add("I am in Oslo.", user_id="Ana", expiration_date="soon")
        assert unreadable.value.status == 422
        assert unreadable.value.detail[0]["field"] == "sessions[0].metadata.expiration_date"
        client.delete_all(user_id="Ana")
    with server.client(keys["c"]) as http:
        for bad, said_as in (("{not json", "not JSON"), ('["agent_id"]', "JSON object"),
                          ('{"a b": 1}', "plain name")):
            for reply in (http.get("/v1/users/Ana/memories", params={"filters": bad}),
                          http.delete("/v1/users/Ana", params={"filters": bad})):
                assert reply.status_code == 422, reply.text
                (problem,) = reply.json()["detail"]
                assert problem["loc"] == ["query", "filters"] and said_as in problem["msg"]


def test_a_memory_takes_metadata_of_its_own_over_http(served: tuple[Server, dict[str, str]]) -> None:
    """mem0's ``update(memory_id, text, metadata, expiration_date)`` through the client and a raw PATCH: the
    memory's own metadata is what filters read for it, its session's other memory keeps the session's; an
    expiration_date of null removes the date; changing a scope or saying nothing is a 422 naming the field."""
    from promem_fast.client import Client, ServerError

    server, keys = served
    with Client(server.url, keys["c"]) as client:
        client.add([{"role": "user", "content": "I keep bees in Porto."}, {"role": "assistant", "content": "Nice."},
                    {"role": "user", "content": "I work as a nurse."}], user_id="Ana", agent_id="life-bot",
                   metadata={"topic": "life"})
        bees, nurse = client.get_all(user_id="Ana")["results"]
        assert "bees" in bees["memory"] and "nurse" in nurse["memory"]
        changed = client.update(bees["id"], metadata={"topic": "hobby"}, expiration_date="2020-01-31")
        assert changed["metadata"] == {"agent_id": "life-bot", "topic": "hobby", "expiration_date": "2020-01-31"}
        assert changed["edits"] == [{"text": bees["memory"], "at": changed["edits"][0]["at"],
                                     "metadata": {"agent_id": "life-bot", "topic": "life"}}]
        assert [m["id"] for m in client.get_all(user_id="Ana")["results"]] == [nurse["id"]]  # expired alone
        assert [m["id"] for m in client.get_all(user_id="Ana", filters={"topic": "hobby"}, show_expired=True)[
            "results"]] == [bees["id"]]
        assert client.update(bees["id"], expiration_date=None, user_id="Ana")["metadata"] == {
            "agent_id": "life-bot", "topic": "hobby"}
        assert [m["id"] for m in client.search("what does Ana do", user_id="Ana", filters={"topic": "life"})[
            "results"]] == [nurse["id"]]
        with pytest.raises(ServerError) as scope:
            client.update(bees["id"], metadata={"agent_id": "other-bot"})
        assert scope.value.status == 422 and scope.value.detail[0]["field"] == "body.metadata.agent_id"
        client.delete_all(user_id="Ana")
    with server.client(keys["c"]) as http:
        reply = http.patch("/v1/memories/1", json={})
        assert reply.status_code == 422 and "new text" in reply.json()["detail"][0]["msg"]
        reply = http.patch("/v1/memories/1", json={"data": "a", "text": "b"})
        assert reply.status_code == 422 and "once" in reply.json()["detail"][0]["msg"]


def test_the_same_words_said_again_later_are_a_new_conversation_and_arrivals_keep_their_order(
        served: tuple[Server, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Undated conversations over HTTP are said when they arrive: "I live in Lisbon" said again after "I live in
    Porto" is stored (before: the same words made the same id, and the later saying was dropped as already
    stored, leaving Porto current), and conversations that arrive within one second keep their order whatever
    their words (before: ordered by a digest of them). A request sent again, or one naming its conversation,
    stores it once."""
    from promem_fast import shapes
    from promem_fast.client import Client

    def current(client: Client) -> list[str]:
        return [m["memory"] for m in client.get_all(user_id="Ana")["results"]]

    server, keys = served
    with Client(server.url, keys["c"]) as client:
        client.add("I live in a small flat in Lisbon near the river.", user_id="Ana")
        client.add("I live in a small flat in Porto near the river.", user_id="Ana")
        client.add("I live in a small flat in Lisbon near the river.", user_id="Ana")
        assert current(client) == ["Ana live in a small flat in Lisbon near the river."]
        assert len(client.sessions(user_id="Ana")) == 3
        client.delete_all(user_id="Ana")
        # within one second (the client's clock held there): arrival order, not the words' digest; the two
        # wordings below sort the other way round by digest
        ticks = iter(range(100, 200))
        monkeypatch.setattr(shapes, "received", lambda: ("2026-01-05T10:00:00", f"20260105T100000{next(ticks):06d}"))
        first, then = "I work as a nurse in a small clinic.", "I work as a teacher in a small clinic."
        digest = [hashlib.sha256(json.dumps([[{"role": "user", "content": said}], None], sort_keys=True).encode()
                                 ).hexdigest() for said in (first, then)]
        assert digest[1] < digest[0]  # the ids before were "msg-" and these: the teacher would come first
        client.add(first, user_id="Ana")
        client.add(then, user_id="Ana")
        assert current(client) == ["Ana work as a teacher in a small clinic."]
        client.delete_all(user_id="Ana")
    with server.client(keys["c"]) as http:
        body = {"messages": "I keep bees on the roof.", "session_id": "bees-1"}
        for _ in range(2):  # a request sent again after a lost reply
            wait_job(http, http.post("/v1/users/Ana/sessions", json=body).json()["job_id"])
        assert http.get("/v1/users/Ana/sessions").json()["sessions"] == ["bees-1"]
        refused = http.post("/v1/users/Ana/sessions", json={"sessions": [{"messages": "x"}], "session_id": "x"})
        assert refused.status_code == 422
