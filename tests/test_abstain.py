"""Answers that abstain: a question no stored memory bears on gets ``answer`` null and a reason, never a guess,
through Python, HTTP (a real server), the CLI (a subprocess) and MCP (the tool over stdio); a question the
memory does hold still gets its answer. The evaluation counts an abstention as each benchmark does.

The store is Tom's three sessions of ``test_store_time`` (his home, job, cello, vehicles). The off-topic
question shares no word with any of them, and the scripted profile's hashing embedder puts it at a cosine of
about 0 from each: nothing reaches the relevance floor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from promem_fast.testing.service_processes import Server, new_key
from test_serve_tools import SCRIPTED, tool_result
from test_store_time import S1, S2, S3, engine, open_store

OFF_TOPIC = "What is the capital of Mongolia?"
ON_TOPIC = "Where is Tom's home?"
NOTHING = "memory holds nothing on this"


@pytest.fixture(scope="module")
def tom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("abstain") / "memory.db"
    with open_store(path) as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
    return path


def test_the_store_abstains_without_asking_the_model(tom: Path) -> None:
    shown: list[str] = []
    with open_store(tom) as store, engine(shown) as eng:
        off, on = store.answer("Tom", [OFF_TOPIC, ON_TOPIC], engine=eng)
        (nobody,) = store.answer("Ann", [ON_TOPIC], engine=eng)  # a user with no memory at all
    assert off["prediction"] is None and off["abstained"].startswith(NOTHING) and off["memories"] == []
    assert nobody["prediction"] is None and "no memory is stored" in nobody["abstained"]
    assert on["prediction"] and on["abstained"] is None
    assert len(shown) == 1  # the model saw the on-topic question only: nothing was guessed for the others


def test_python_memory_abstains(tom: Path) -> None:
    from promem_fast import Memory

    with Memory(tom, profile="scripted", update_judge="off") as memory:
        off = memory.answer(OFF_TOPIC, user_id="Tom")
        on = memory.answer(ON_TOPIC, user_id="Tom")
    assert (off["answer"], off["error"]) == (None, None) and off["abstained"].startswith(NOTHING)
    assert on["answer"] and on["abstained"] is None


def test_http_answer_abstains_over_a_real_server(tom: Path) -> None:
    key = new_key(tom, "default")
    server = Server(tom, "--update-judge", "off")
    try:
        with server.client(key) as http:
            off = http.post("/v1/users/Tom/answer", json={"question": OFF_TOPIC})
            on = http.post("/v1/users/Tom/answer", json={"question": ON_TOPIC}).json()
            schema = http.get("/openapi.json").json()["components"]["schemas"]["Answer"]["properties"]
    finally:
        server.stop()
    assert off.status_code == 200
    body = off.json()
    assert body["answer"] is None and body["abstained"].startswith(NOTHING) and body["error"] is None
    assert on["answer"] and on["abstained"] is None
    assert "abstained" in schema


def test_cli_ask_abstains_in_a_subprocess(tom: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ask = [sys.executable, "-m", "promem_fast.cli", "ask", OFF_TOPIC, "--db", str(tom), "--user", "Tom", *SCRIPTED]
    plain = subprocess.run(ask, capture_output=True, text=True, env=env, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith(f"(no answer) {NOTHING}")
    as_json = subprocess.run([*ask, "--json"], capture_output=True, text=True, env=env, timeout=120)
    reply = json.loads(as_json.stdout)
    assert reply["answer"] is None and reply["abstained"].startswith(NOTHING)


def test_mcp_answer_tool_abstains(tom: Path) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                   args=["-m", "promem_fast.cli", "mcp", "--db", str(tom), "--update-judge", "off",
                                         *SCRIPTED])
    replies: dict[str, Any] = {}

    async def converse() -> None:
        with anyio.fail_after(180):
            async with Client(params, read_timeout_seconds=120) as client:
                for question in (OFF_TOPIC, ON_TOPIC):
                    replies[question] = tool_result(await client.call_tool(
                        "answer", {"user_id": "Tom", "question": question}))

    anyio.run(converse)
    assert replies[OFF_TOPIC]["answer"] is None and replies[OFF_TOPIC]["abstained"].startswith(NOTHING)
    assert replies[ON_TOPIC]["answer"] and replies[ON_TOPIC]["abstained"] is None


def test_the_answer_prompt_says_not_to_guess() -> None:
    from promem_fast.store.qa_prompts import QA_NOT_FOUND, render_qa

    system = render_qa("qa_memory", user="Tom", memories="", question_time="today", question="q")[0]["content"]
    assert "do not guess" in system and QA_NOT_FOUND in system


def _judged(program: Iterator[Any]) -> Any:
    try:
        next(program)
    except StopIteration as done:
        return done.value
    raise AssertionError("the judge asked a model about an abstention")


def test_halumem_counts_an_abstention_as_omission_and_right_on_a_boundary_question() -> None:
    from promem_fast.eval.judges import halumem_qa_judge
    from promem_fast.eval.benchmark import Question
    from promem_fast.store.qa import Answer

    def question(boundary: bool) -> Question:
        return Question(question_id="q", user_id="u", question="Where does Tom live?", answer="Denver",
                        question_type="Memory Boundary" if boundary else "Basic Fact Recall",
                        session_ids=("s",), abstention=boundary)

    abstained = Answer("q", "Where does Tom live?", "x", "Denver", None, "memory", abstained=NOTHING)
    answerable = _judged(halumem_qa_judge(question(False), abstained, None))  # type: ignore[arg-type]
    boundary = _judged(halumem_qa_judge(question(True), abstained, None))  # type: ignore[arg-type]
    assert answerable["result_type"] == "Omission" and boundary["result_type"] == "Correct"
