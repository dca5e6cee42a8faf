"""The question's time reaches the store through every surface: HTTP, the Python client, MCP's arguments and
the CLI all take ``as_of`` and the ``since``/``until`` window, and give what the store gives for them.

The store is Tom's three sessions of ``test_store_time`` (he moves from Boston to Denver on 2024-03-02),
judged with its hand-written verdict table; the service then only reads it. Expected texts are written by
hand: on 2024-02-01 Tom's home is Boston, today it is Denver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from promem_fast.testing.service_processes import Server, new_key
from test_page import browser  # noqa: F401 (the fixture: Debian's Chromium through Playwright)
from test_store_time import BIKE, BOSTON, CELLO, DENVER, FINTECH, HONDA, NURSE, S1, S2, S3, engine, open_store

QUESTION = "Where is Tom's home?"


@pytest.fixture(scope="module")
def tom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    path = tmp_path_factory.mktemp("time") / "memory.db"
    with open_store(path) as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
    key = new_key(path, "default")
    server = Server(path, "--update-judge", "off")
    try:
        yield server, key
    finally:
        server.stop()


def texts(hits: list[dict]) -> list[str]:
    return [h["memory"] for h in hits]


def test_http_search_and_answer_take_the_questions_time(tom: tuple[Server, str]) -> None:
    server, key = tom
    with server.client(key) as http:
        now = http.post("/v1/users/Tom/search", json={"query": QUESTION}).json()["results"]
        then = http.post("/v1/users/Tom/search", json={"query": QUESTION, "as_of": "2024-02-01"}).json()["results"]
        january = http.post("/v1/users/Tom/search", json={"query": "Tom", "since": "2024-01-01",
                                                            "until": "2024-01-31"}).json()["results"]
        past = http.post("/v1/users/Tom/answer", json={"question": QUESTION, "as_of": "2024-02-01"}).json()
    assert DENVER in texts(now) and BOSTON not in texts(now)
    assert texts(then)[0] == BOSTON and DENVER not in texts(then)
    assert then[0]["valid_until"] == "2024-03-02T10:00:00"
    assert BOSTON in texts(january) and DENVER not in texts(january)
    assert past["as_of"] == "2024-02-01T23:59:59" and BOSTON in [m["memory"] for m in past["memories"]]
    assert all("Denver" not in m["memory"] for m in past["memories"])


def test_the_client_and_the_cli_take_the_questions_time(tom: tuple[Server, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from promem_fast.cli import main
    from promem_fast.client import Client

    server, key = tom
    with Client(server.url, key) as client:
        assert texts(client.search(QUESTION, user_id="Tom", as_of="2024-02-01")["results"])[0] == BOSTON
        assert DENVER not in texts(client.search("Tom", user_id="Tom", since="2024-01-01", until="2024-01-31")["results"])
        assert client.answer(QUESTION, user_id="Tom", as_of="2024-02-01")["as_of"] == "2024-02-01T23:59:59"
    capsys.readouterr()
    assert main(["search", QUESTION, "--db", str(server.path), "--user-id", "Tom", "--as-of", "2024-02-01",
                 "--json", "--profile", "scripted"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert texts(hits)[0] == BOSTON and DENVER not in texts(hits)
    assert main(["search", QUESTION, "--db", str(server.path), "--user-id", "Tom", "--json",
                 "--profile", "scripted"]) == 0
    assert BOSTON not in texts([json.loads(line) for line in capsys.readouterr().out.splitlines()])


def test_mcp_tools_take_the_same_time_arguments() -> None:
    """The tools' signatures as an agent sees them: the HTTP body's names and defaults."""
    import asyncio

    from promem_fast.serve.mcp_tools import build_server

    server = build_server(service=None, tenant="default")  # type: ignore[arg-type]  # listing runs no tool
    tools = {tool.name: tool.input_schema["properties"] for tool in asyncio.run(server.list_tools())}
    assert {"as_of", "since", "until"} <= set(tools["search"]) and {"as_of", "since", "until"} <= set(tools["answer"])
    assert tools["search"]["top_k"]["default"] == 10  # the HTTP body's and mem0's name
    assert set(tools["add"]) == {"user_id", "messages", "date", "metadata", "infer", "expiration_date"}
    assert tools["search"]["show_expired"]["default"] is False and "show_expired" in tools["list"]
    assert tools["add"]["infer"]["default"] is True and "threshold" in tools["search"]  # as over HTTP
    assert set(tools["delete"]) == {"user_id", "memory_id", "session_id", "filters"}  # filters: as DELETE's query
    assert {"filters", "top_k"} <= set(tools["list"])  # as GET .../memories


def test_the_page_lists_what_holds_now_and_the_rest_on_request(tom: tuple[Server, str], browser: Any) -> None:
    server, key = tom
    with server.client(key) as http:
        nodes = http.get("/v1/users/Tom/graph").json()["nodes"]
    merged = [n for n in nodes if n["merged_into"] is not None]
    assert [(n["session_id"], n["text"]) for n in merged] == [("s3", FINTECH)]  # said again, joined s2's
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    page.goto(f"{server.url}/#key={key}&user=Tom")
    page.wait_for_function("document.body.dataset.nodes === '9'")  # 4 + 3 + 2 memories said
    shown = sorted(page.locator("#results li .text").all_inner_texts())
    assert shown == sorted([DENVER, FINTECH, CELLO, BIKE])  # Boston, the nurse job, the vehicles: replaced
    page.check("#old")
    page.wait_for_function("document.body.dataset.listed === '9'")
    page.close()


def test_the_page_counts_a_memory_past_its_expiry_as_one_that_no_longer_holds(
        tmp_path_factory: pytest.TempPathFactory, browser: Any) -> None:
    """A session added with an expiration_date that has passed: its memory is flagged in the graph and the
    page lists it only with the replaced ones, as searches and lists leave it out."""
    import dataclasses

    from store_helpers import graph

    trip = "Tom is in Lisbon for a week of meetings."
    away = dataclasses.replace(graph("trip", "Tom", [trip], timestamp="2020-01-27T09:00:00"),
                               metadata={"expiration_date": "2020-01-31"})
    path = tmp_path_factory.mktemp("expiry") / "memory.db"
    with open_store(path) as store, engine() as eng:
        store.add([S1, away], engine=eng)
    key = new_key(path, "default")
    server = Server(path, "--update-judge", "off")
    try:
        with server.client(key) as http:
            nodes = http.get("/v1/users/Tom/graph").json()["nodes"]
            assert {n["text"]: n["expired"] for n in nodes} == {
                BOSTON: False, NURSE: False, CELLO: False, HONDA: False, trip: True}
            assert trip not in texts(http.get("/v1/users/Tom/memories").json()["memories"])
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"{server.url}/#key={key}&user=Tom")
        page.wait_for_function("document.body.dataset.nodes === '5'")
        assert sorted(page.locator("#results li .text").all_inner_texts()) == sorted([BOSTON, NURSE, CELLO, HONDA])
        page.check("#old")
        page.wait_for_function("document.body.dataset.listed === '5'")
        page.close()
    finally:
        server.stop()
