"""Time read once: every timestamp form the loaders accept reaches the prompts, the chat template's own date
and the store as the same day, and one date rule holds for session timestamps and for ``as_of``/``since``/
``until`` on every surface (Python, HTTP, CLI, MCP): a time the rule refuses is an error naming the field,
never a traceback, a 500 or a 503, and one bad session never loses the others.

Expected days are written by hand from the forms themselves ("1:56 pm on 8 Sep, 2023" is 2023-09-08)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from conftest import HALUMEM, ROOT, make_session, scripted_config
from promem_fast.backends._message_cache import template_date
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.engine import Engine
from promem_fast.errors import InputError
from promem_fast.io import session_from_dict
from promem_fast.store import MemoryStore
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.testing.service_processes import Server, serving


FORMS = {  # the form as a dataset writes it -> the day and the template's date_string, by hand
    "1:56 pm on 8 Sep, 2023": ("2023-09-08", "08 Sep 2023"),          # LoCoMo, short month
    "10:00 am on 20 May, 2023": ("2023-05-20", "20 May 2023"),        # LoCoMo
    "4:00 pm on 1 June, 2023": ("2023-06-01", "01 Jun 2023"),         # LoCoMo, long month
    "Sep 04, 2025, 09:05:32": ("2025-09-04", "04 Sep 2025"),          # HaluMem
    "2023/05/20 (Sat) 02:21": ("2023-05-20", "20 May 2023"),          # LongMemEval
    "2023/05/20": ("2023-05-20", "20 May 2023"),
    "2024-03-02T23:30:00-05:00": ("2024-03-03", "03 Mar 2024"),       # an offset: the day in UTC
    1_700_000_000: ("2023-11-14", "14 Nov 2023"),                     # Unix seconds (22:13:20 UTC)
}
TURNS = [("I moved to Lisbon in May for a job at Nordvik Labs.", "Lisbon is lovely; how is the new job?")]


class Dated(ScriptedLLM):
    """The scripted model, keeping the date line of every prompt and the template date of every request."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.lines: set[str] = set()
        self.template: set[str | None] = set()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        for request in requests:
            text = "\n".join(m["content"] for m in request.messages)
            self.lines.update(line for line in text.splitlines() if "took place on" in line)
            self.template.add(template_date(request.date).get("date_string"))
        return super().generate(requests)


@pytest.mark.parametrize("form", sorted(FORMS, key=str))
def test_each_accepted_form_reaches_prompts_template_and_store_as_one_day(form: str | int, tmp_path: Path) -> None:
    day, date_string = FORMS[form]
    session = session_from_dict(make_session("s1", "Maya", TURNS, timestamp=form).to_dict())
    llm = Dated()
    (graph,) = Engine(scripted_config(), llm=llm).extract([session])
    assert llm.lines and all(day in line for line in llm.lines), llm.lines
    assert llm.template == {date_string}
    with MemoryStore(tmp_path / "m.db", scripted_config(), update_judge="off") as store:
        store.add([graph])
        hits = store.hits("Maya")
    assert hits and {h.valid_from[:10] for h in hits if h.valid_from} == {day}
    assert {h.valid_from for h in hits} != {None}


def test_the_real_halumem_and_locomo_sessions_are_dated_alike_everywhere(tmp_path: Path) -> None:
    """The loaders' own sessions (LoCoMo's "1:56 pm on 8 May, 2023", HaluMem's "Jan 15, 2029, 15:12:20"):
    the day of each prompt's date line, of the template's date_string and of the stored memories agree."""
    from promem_fast.eval.datasets import load_benchmark

    files = [("locomo", ROOT / "tests" / "fixtures" / "locomo_mini.json")]
    if HALUMEM.is_file():  # the real HaluMem user, where present
        files.append(("halumem", HALUMEM))
    for kind, path in files:
        sessions = load_benchmark(kind, path, 1).users[0].sessions[:4]
        llm = Dated()
        graphs = Engine(scripted_config(), llm=llm).extract(sessions)
        days = {line.split("took place on ")[1][:10] for line in llm.lines}
        assert len(days) == len({s.timestamp for s in sessions}), (kind, days)  # every session dated in prompts
        assert {s for s in llm.template if s is not None} == {
            date.fromisoformat(d).strftime("%d %b %Y") for d in days}, kind
        with MemoryStore(tmp_path / f"{kind}.db", scripted_config(), update_judge="off") as store:
            store.add(graphs)
            stored = {h.valid_from[:10] for s in sessions for h in store.hits(s.user) if h.valid_from}
        assert stored == days, kind


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2024-13-01",
                                   "next tuesday"])
def test_a_session_time_the_rule_refuses_is_an_input_error_naming_the_field(stamp: str) -> None:
    record = make_session("s1", "Maya", TURNS, timestamp=stamp).to_dict()
    with pytest.raises(InputError) as caught:
        session_from_dict(record)
    assert caught.value.field == "timestamp" and stamp[:20] in caught.value.message


@pytest.mark.parametrize("stamp", [1e12, float("inf"), float("nan"), True])
def test_unix_seconds_outside_the_calendar_or_not_a_number_are_refused_by_field(stamp: float) -> None:
    record = {**make_session("s1", "Maya", TURNS).to_dict(), "timestamp": stamp}
    with pytest.raises(InputError) as caught:
        session_from_dict(record)
    assert caught.value.field == "timestamp"


def promem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promem_fast.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_extract_and_ingest_keep_the_good_session_beside_one_with_an_overflowing_time(tmp_path: Path) -> None:
    bad = make_session("bad", "Maya", TURNS, timestamp="0001-01-01T00:00:00+05:00").to_dict()
    good = make_session("good", "Maya", TURNS, timestamp="2024-03-02T10:00:00").to_dict()
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in (bad, good)))
    out = tmp_path / "graphs.jsonl"
    run = promem("extract", str(source), "-o", str(out), "--profile", "scripted")
    assert "Traceback" not in run.stderr, run.stderr
    assert [json.loads(line)["session_id"] for line in out.read_text().splitlines()] == ["good"]
    assert "'timestamp'" in run.stderr and "0001-9999" in run.stderr
    ingested = promem("ingest", str(out), "--db", str(tmp_path / "m.db"), "--profile", "scripted",
                      "--update-judge", "off")
    assert ingested.returncode == 0 and "Traceback" not in ingested.stderr, ingested.stderr
    listed = promem("list", "--db", str(tmp_path / "m.db"), "--user", "Maya", "--json")
    assert {json.loads(line)["valid_from"] for line in listed.stdout.splitlines()} == {"2024-03-02T10:00:00"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    sessions = [make_session("m1", "Maya", TURNS, timestamp="2024-01-15T09:00:00").to_dict(),
                make_session("m2", "Maya", [("I adopted a beagle named Biscuit.", "Lovely!")],
                             timestamp="2024-03-02T10:00:00").to_dict()]
    with serving(tmp_path_factory.mktemp("time") / "memory.db", "acme", "Maya", sessions) as served:
        yield served


BAD_TIMES = [("as_of", "0001-01-01T00:00:00+05:00"), ("since", "9999-12-31T23:59:59-05:00"),
             ("until", "0001-01-01T00:00:00+05:00"), ("as_of", "2024-13-01"), ("since", "yesterday-ish")]


@pytest.mark.parametrize("route", ["search", "answer"])
@pytest.mark.parametrize("field,value", BAD_TIMES)
def test_http_refuses_a_time_the_rule_refuses_with_a_422_naming_it(served: tuple[Server, str], route: str,
                                                                    field: str, value: str) -> None:
    server, key = served
    body = {"query": "Lisbon"} if route == "search" else {"question": "Where does Maya live?"}
    with server.client(key) as http:
        reply = http.post(f"/v1/users/Maya/{route}", json={**body, field: value})
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize("route", ["search", "answer"])
def test_http_refuses_since_after_until(served: tuple[Server, str], route: str) -> None:
    server, key = served
    body = {"query": "Lisbon"} if route == "search" else {"question": "Where does Maya live?"}
    with server.client(key) as http:
        reply = http.post(f"/v1/users/Maya/{route}", json={**body, "since": "2024-03-01", "until": "2024-02-01"})
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["body", "since"] and "until" in reply.json()["detail"][0]["msg"]


def test_since_and_until_keep_what_was_said_within_the_window(served: tuple[Server, str]) -> None:
    server, key = served
    with server.client(key) as http:
        def said(**window: str) -> set[str]:
            hits = http.post("/v1/users/Maya/search", json={"query": "Maya", **window}).json()["results"]
            return {h["session_ids"][0] for h in hits}

        assert said() == {"m1", "m2"}
        assert said(since="2024-03-02") == {"m2"}  # said on that day, not before it
        assert said(since="2024-03-03") == set()
        assert said(until="2024-03-01") == {"m1"}
        assert said(until="2024-03-02") == {"m1", "m2"}  # a bare day runs through its end
        assert said(since="2024-01-15", until="2024-01-15") == {"m1"}


@pytest.mark.parametrize("option,value", [("--as-of", "0001-01-01T00:00:00+05:00"), ("--since", "2024-13-01")])
def test_the_cli_refuses_a_bad_time_in_one_line(served: tuple[Server, str], option: str, value: str) -> None:
    server, _ = served
    run = promem("search", "Lisbon", "--db", str(server.path), "--user", "Maya", "--tenant", "acme", option, value,
                 "--profile", "scripted")
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and option.lstrip("-").replace("-", "_") in run.stderr


def test_mcp_search_refuses_a_bad_time_naming_it(tmp_path: Path) -> None:
    import asyncio

    from mcp.server.mcpserver.exceptions import ToolError

    from promem_fast.serve.mcp_tools import build_server
    from promem_fast.serve.service import Service

    service = Service(tmp_path / "memory.db", scripted_config())
    try:
        server = build_server(service, "default")
        for field, value in BAD_TIMES:
            with pytest.raises(ToolError, match=field):
                asyncio.run(server.call_tool("search", {"user_id": "Maya", "query": "Lisbon", field: value}))
    finally:
        service.close()


def test_help_openapi_and_mcp_say_the_same_about_the_window(served: tuple[Server, str]) -> None:
    import asyncio

    from promem_fast.serve.mcp_tools import build_server

    server, _ = served
    with server.client(None) as http:
        fields = http.get("/openapi.json").json()["components"]["schemas"]["SearchQuery"]["properties"]
    helped = promem("search", "--help").stdout
    tools = asyncio.run(build_server(service=None, tenant="default").list_tools())  # type: ignore[arg-type]
    (search,) = [t for t in tools if t.name == "search"]
    for said in ("said on or after", "said on or before", "what held at this time"):
        assert said in " ".join(" ".join(str(v.get("description", "")) for v in fields.values()).split())
        assert said in " ".join(helped.split()), said
        assert said in " ".join((search.description or "").split()), said


@pytest.mark.parametrize("stamp", ["9999-12-31T10:00:00", "0001-01-01T10:00:00"])
def test_a_session_at_either_end_of_the_calendar_is_extracted_whole(stamp: str) -> None:
    """The rule accepts years 0001-9999; "tomorrow" on the last day (or "last week" on the first) has no
    calendar day, so it stays as said instead of failing the session's steps."""
    said = [("I fly to Oslo tomorrow and I saw Ana yesterday and last week.", "Safe travels!")]
    session = session_from_dict(make_session("s1", "Maya", said, timestamp=stamp).to_dict())
    (graph,) = Engine(scripted_config()).extract([session])
    assert graph.nodes and graph.stats.failures == []
    assert {n.date for n in graph.nodes} == {stamp[:10]}
