"""What an adversarial caller tries, over real HTTP and in real Chromium: markup in a memory's text cannot
blank the offline page, guessing keys meets a rate limit, and names that read alike (spaces at the ends,
no-break spaces, text-direction overrides, zero-width characters, ".") are refused with a 422 naming the
field instead of becoming a second user that looks like the first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from conftest import make_session, write_jsonl
from promem_fast.cli import main
from promem_fast.testing.service_processes import Server, serving
from store_helpers import graph
from test_serve import chromium, needs_chromium

SCRIPTED = ["--profile", "scripted", "--no-progress"]


@needs_chromium
@pytest.mark.parametrize("markup", ["<!--<script>", "</script><b>", "<!-- -->"])
def test_markup_in_a_memory_does_not_blank_the_offline_page(tmp_path: Path, markup: str) -> None:
    texts = [f"Maya wrote {markup} on the whiteboard at work.", "Maya adopted a beagle named Biscuit."]
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_text(graph("s1", "Maya", texts, edges=[(0, 1, "temporal")]).to_json() + "\n", encoding="utf-8")
    page = tmp_path / "graph.html"
    assert main(["view", str(graphs), "--session", "s1", "-o", str(page)]) == 0
    dom = chromium(page.as_uri(), "--dump-dom")
    assert 'data-nodes="2"' in dom and 'data-edges="1"' in dom


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    session = make_session("m1", "Maya", [("I adopted a beagle named Biscuit.", "Lovely!")]).to_dict()
    with serving(tmp_path_factory.mktemp("hostile") / "memory.db", "acme", "Maya", [session]) as served:
        yield served


def test_wrong_keys_are_rate_limited_and_a_right_key_is_not(served: tuple[Server, str]) -> None:
    server, key = served
    statuses = []
    with server.client("pmk_000000000000_guessedguessedguessed") as guess:
        for _ in range(120):
            statuses.append(guess.get("/v1/users").status_code)
    assert set(statuses) == {401, 429} and statuses[0] == 401 and statuses[-1] == 429
    with server.client(key) as http:  # the owner of a valid key, from the same address, is served
        assert http.get("/v1/users").status_code == 200


LOOK_ALIKES = ["Maya ", " Maya", "Maya\u00a0Chen", "Maya\u202eahc", "Ma\u200bya", "Maya\u2060", "\ufeffMaya", "."]


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_a_look_alike_user_name_is_a_422_naming_the_user(served: tuple[Server, str], name: str) -> None:
    server, key = served
    session = make_session("x1", "Maya", [("I like tea.", "ok")]).to_dict()
    with server.client(key) as http:
        reply = http.post(f"/v1/users/{quote(name, safe='')}/sessions", json={"sessions": [{**session, "user": name}]})
        if name == ".":  # a client that resolves dot segments never sends it; one that does not is refused
            assert reply.status_code in (404, 405, 422), reply.text
        else:
            assert reply.status_code == 422, reply.text
            assert reply.json()["detail"][0]["loc"] == ["path", "user_id"]
        assert http.get("/v1/users").json()["users"] == ["Maya"]


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_the_python_client_refuses_a_name_the_service_could_not_address(served: tuple[Server, str],
                                                                         name: str) -> None:
    from promem_fast.client import Client
    from promem_fast.errors import InputError

    server, key = served
    with Client(server.url, key) as client:
        with pytest.raises(InputError) as caught:
            client.get_all(user_id=name)
        assert caught.value.field == "user_id"
        with pytest.raises(InputError):
            client.delete(user_id="Maya", session_id=name)
        assert [m["memory"] for m in client.get_all(user_id="Maya")["results"]]  # nothing was deleted


@pytest.mark.parametrize("name", ["Maya ", "Maya\u00a0Chen", "Maya\u202eahc", "Ma\u200bya"])
def test_extract_refuses_a_look_alike_user_naming_the_field(tmp_path: Path, name: str) -> None:
    sessions = [make_session("s1", name, [("I like tea.", "ok")]), make_session("s2", "Maya", [("I like tea.", "ok")])]
    source = write_jsonl(tmp_path / "in.jsonl", sessions)
    out = tmp_path / "g.jsonl"
    assert main(["extract", str(source), "-o", str(out), *SCRIPTED]) == 0
    rejects = [json.loads(line) for line in out.with_name("g.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(1, "user")]
    assert [json.loads(line)["user"] for line in out.read_text().splitlines()] == ["Maya"]


def test_the_raw_dot_route_never_reaches_another_route(served: tuple[Server, str]) -> None:
    """httpx resolves "." away; a raw HTTP request line keeps it, and the service refuses the name."""
    import socket

    server, key = served
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(f"GET /v1/users/./memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                     "Connection: close\r\n\r\n".encode())
        reply = b"".join(iter(lambda: sock.recv(65536), b""))
    assert reply.split(b" ", 2)[1] in (b"404", b"422"), reply[:200]
    assert httpx.get(server.url + "/healthz").status_code == 200
