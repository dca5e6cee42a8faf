"""The OpenAI-compatible backend against a small real HTTP server on 127.0.0.1 started by the test."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from promem_fast.backends.base import GenerationRequest
from promem_fast.backends.llm_openai import OpenAICompatLLM, estimate_tokens
from promem_fast.config import LLMConfig
from promem_fast.errors import BackendError, BackendUnavailable, ConfigError, ContextOverflow
from promem_fast.prompts import schema_for

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


class FakeServer:
    """Records every request, answers a scripted number of failures first, counts overlapping requests."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = []
        self.failures: list[tuple[int, dict[str, str]]] = []
        """(status, headers) answered, in order, to the next chat completion requests."""
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay_s = 0.0
        self.tokenize = True
        self.usage = True
        self.json_object_only = False
        """Refuse a ``response_format`` of a type other than ``text`` or ``json_object``, as llama-cpp-python's
        server does (HTTP 500, its request validation's message)."""
        self.models: list[dict[str, Any]] = [{"id": "served-model", "object": "model", "max_model_len": 2048}]
        self.props: dict[str, Any] | None = None
        """What ``GET /props`` answers (llama.cpp's llama-server), else 404."""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def chat_bodies(self) -> list[dict[str, Any]]:
        return [body for method, path, body, _ in self.requests if path == "/v1/chat/completions" and body]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                with server.lock:
                    server.requests.append(("GET", self.path, None, dict(self.headers)))
                if self.path == "/v1/models":
                    self._reply(200, {"object": "list", "data": server.models})
                elif self.path == "/props" and server.props is not None:
                    self._reply(200, server.props)
                else:
                    self._reply(404, {"error": {"message": "no such route"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(("POST", self.path, body, dict(self.headers)))
                if self.path == "/tokenize":
                    if not server.tokenize:
                        self._reply(404, {"detail": "Not Found"})
                        return
                    words = sum(len(m["content"].split()) + 2 for m in body["messages"]) + 1
                    self._reply(200, {"count": words, "max_model_len": 2048, "tokens": list(range(words))})
                    return
                if self.path != "/v1/chat/completions":
                    self._reply(404, {"error": {"message": "no such route"}})
                    return
                with server.lock:
                    failure = server.failures.pop(0) if server.failures else None
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                counted = True

                def reply(*args: Any) -> None:
                    # leave the count before answering: a client that has its answer may send the next
                    # request at once, and must not find this one still counted
                    nonlocal counted
                    with server.lock:
                        server.in_flight -= 1
                    counted = False
                    self._reply(*args)

                try:
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    if failure is not None:
                        reply(failure[0], {"error": {"message": f"scripted {failure[0]}"}}, failure[1])
                        return
                    form = (body.get("response_format") or {}).get("type", "text")
                    if server.json_object_only and form not in ("text", "json_object"):
                        reply(500, {"detail": f"1 validation error: body.response_format.type: {form!r} is not "
                                              "'text' or 'json_object'"})
                        return
                    last = body["messages"][-1]["content"]
                    if last == "BAD":
                        reply(400, {"object": "error", "message": "the request is malformed", "code": 400})
                        return
                    if last == "HUGE":  # llama-server's refusal of a prompt longer than its slot's window
                        reply(400, {"error": {"code": 400, "message": "request (4476 tokens) exceeds the available "
                                              "context size (4096 tokens)", "type": "exceed_context_size_error",
                                              "n_prompt_tokens": 4476, "n_ctx": 4096}})
                        return
                    text = json.dumps({"echo": last})
                    payload: dict[str, Any] = {
                        "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": "length" if body["max_tokens"] < 5 else "stop"}],
                    }
                    if server.usage:
                        payload["usage"] = {"prompt_tokens": len(last), "completion_tokens": 5,
                                            "total_tokens": len(last) + 5}
                    reply(200, payload)
                finally:
                    if counted:
                        with server.lock:
                            server.in_flight -= 1

        return Handler


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()
    fake.thread.join(timeout=5)


def _backend(url: str, **overrides: Any) -> OpenAICompatLLM:
    fields: dict[str, Any] = {"backend": "openai", "base_url": url, "model": "served-model", "max_retries": 3,
                              "timeout_s": 10.0, "options": {"backoff_s": 0.01}, "api_key_env": "PROMEM_TEST_KEY",
                              **overrides}
    return OpenAICompatLLM(LLMConfig(**fields))


def _request(text: str, **kw: Any) -> GenerationRequest:
    fields: dict[str, Any] = {"schema": None, "max_tokens": 16, **kw}
    return GenerationRequest(messages=({"role": "system", "content": "rules"}, {"role": "user", "content": text}),
                             **fields)


def test_answers_in_input_order_with_usage(server: FakeServer) -> None:
    server.delay_s = 0.01
    backend = _backend(server.url, max_concurrency=4)
    texts = [f"message {i}" for i in range(12)]
    out = backend.generate([_request(t) for t in texts])
    assert [json.loads(c.text)["echo"] for c in out] == texts
    assert [c.prompt_tokens for c in out] == [len(t) for t in texts]
    assert all(c.completion_tokens == 5 and c.finish_reason == "stop" for c in out)


def test_concurrency_is_bounded(server: FakeServer) -> None:
    server.delay_s = 0.05
    backend = _backend(server.url, max_concurrency=3)
    backend.generate([_request(f"m{i}") for i in range(10)])
    assert server.max_in_flight == 3


def test_request_body(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMEM_TEST_KEY", "sekrit")
    backend = _backend(server.url, ignore_eos=True, options={"backoff_s": 0.01, "top_p": 0.5})
    backend.generate([_request("a", schema=SCHEMA, seed=4, temperature=0.3, max_tokens=3), _request("b")])
    first, second = sorted(server.chat_bodies(), key=lambda b: b["messages"][-1]["content"])
    assert first["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "reply", "schema": {**SCHEMA, "additionalProperties": False}, "strict": True}}
    assert (first["seed"], first["temperature"], first["max_tokens"]) == (4, 0.3, 3)
    assert first["model"] == "served-model" and first["ignore_eos"] is True and first["top_p"] == 0.5
    assert "response_format" not in second
    headers = [h for _, path, _, h in server.requests if path == "/v1/chat/completions"]
    assert all(h.get("Authorization") == "Bearer sekrit" for h in headers)


def test_schemas_go_strict_only_in_the_form_openai_accepts(server: FakeServer) -> None:
    """OpenAI's strict mode rejects a request (HTTP 400) whose schema has an object without
    ``additionalProperties: false`` or with a property not required, or a refused keyword; vLLM and llama.cpp
    ignore the flag. The pipeline's own schemas, as sent."""
    draft = schema_for("draft", max_items=3)
    details = schema_for("detail", turns=["0", "1"])  # a turn's list may be left out: no strict form
    relation = schema_for("relation", n_events=3, relation_types=["causal"])  # a tuple: no strict form
    backend = _backend(server.url)
    backend.generate([_request(name, schema=schema) for name, schema in
                      (("draft", draft), ("details", details), ("relation", relation))])
    sent = {b["messages"][-1]["content"]: b["response_format"]["json_schema"] for b in server.chat_bodies()}
    assert sent["draft"] == {"name": "reply", "strict": True, "schema": {
        "type": "object", "required": ["facts"], "additionalProperties": False,
        "properties": {"facts": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}}}
    assert sent["details"] == {"name": "reply", "strict": False, "schema": details}
    assert sent["relation"] == {"name": "reply", "strict": False, "schema": relation}


def test_a_server_that_refuses_json_schema_gets_json_object_with_the_schema_after_one_refusal(
        server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    """llama-cpp-python's server takes a schema only as ``{"type": "json_object", "schema": ...}``: the refused
    request is sent again in that form at once (not retried as it was, minutes of backoff at default
    settings), every later one goes in that form, and the switch is said once."""
    server.json_object_only = True
    backend = _backend(server.url, max_concurrency=1)
    answers = backend.generate([_request(f"q{i}", schema=SCHEMA) for i in range(3)])
    assert [json.loads(a.text)["echo"] for a in answers] == ["q0", "q1", "q2"]
    assert [b["response_format"]["type"] for b in server.chat_bodies()] == [
        "json_schema", "json_object", "json_object", "json_object"]
    assert server.chat_bodies()[1]["response_format"]["schema"] == SCHEMA
    assert sum("refuses response_format json_schema" in r.getMessage() for r in caplog.records) == 1


def test_a_fixed_schema_form_is_kept_and_a_wrong_one_refused(server: FakeServer) -> None:
    server.json_object_only = True
    with pytest.raises(BackendError, match="response_format"):
        _backend(server.url, options={"backoff_s": 0.01, "schema_form": "json_schema"}).generate(
            [_request("q", schema=SCHEMA)])
    assert len(server.chat_bodies()) == 1  # refused once, not retried
    fixed = _backend(server.url, options={"backoff_s": 0.01, "schema_form": "json_object"})
    assert json.loads(fixed.generate([_request("r", schema=SCHEMA)])[0].text) == {"echo": "r"}
    with pytest.raises(ConfigError, match="schema_form must be auto, json_schema or json_object"):
        _backend(server.url, options={"schema_form": "grammar"})


@pytest.mark.slow
def test_llama_cpp_python_server_answers_the_pipelines_schemas(tmp_path: Any) -> None:
    """The real llama-cpp-python OpenAI-compatible server with the shipped SmolLM2: the pipeline's draft
    schema is answered with JSON that holds to it, through the form that server takes."""
    import subprocess
    import sys

    from promem_fast.backends._llamacpp_load import default_model_path
    from promem_fast.testing.service_processes import free_port

    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()),
                                "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"],
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.5)
        backend = _backend(url, model="smollm2", context_length=2048, max_retries=0)
        schema = schema_for("draft", max_items=3)
        (answer,) = backend.generate([GenerationRequest(messages=(
            {"role": "system", "content": "List facts about the user as JSON."},
            {"role": "user", "content": 'Reply as {"facts": [...]}: "I keep bees in Porto."'}),
            schema=schema, max_tokens=64, temperature=0.0)])
        facts = json.loads(answer.text)["facts"]
        assert isinstance(facts, list) and len(facts) <= 3 and all(isinstance(f, str) for f in facts)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_no_key_sends_no_authorization(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMEM_TEST_KEY", raising=False)
    _backend(server.url).generate([_request("a")])
    assert all("Authorization" not in h for _, _, _, h in server.requests)


def test_retries_on_429_and_500_then_succeeds(server: FakeServer) -> None:
    server.failures = [(429, {"Retry-After": "0"}), (500, {}), (503, {})]
    backend = _backend(server.url, max_concurrency=1)
    (out,) = backend.generate([_request("persist")])
    assert json.loads(out.text) == {"echo": "persist"}
    assert len(server.chat_bodies()) == 4


def test_retries_run_out(server: FakeServer) -> None:
    server.failures = [(503, {})] * 3
    with pytest.raises(BackendUnavailable, match="HTTP 503 after 3 attempts"):
        _backend(server.url, max_retries=2).generate([_request("x")])
    server.failures = [(500, {})] * 3
    with pytest.raises(BackendError, match="HTTP 500 after 3 attempts"):
        _backend(server.url, max_retries=2).generate([_request("x")])


def test_client_error_fails_fast(server: FakeServer) -> None:
    backend = _backend(server.url, max_concurrency=1)
    with pytest.raises(BackendError, match="HTTP 400: the request is malformed"):
        backend.generate([_request("BAD")])
    assert len(server.chat_bodies()) == 1


def test_unreachable_server_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = _backend(f"http://127.0.0.1:{port}/v1", max_retries=1, context_length=4096)
    with pytest.raises(BackendUnavailable, match="no answer after 2 attempts"):
        backend.generate([_request("anyone?")])


def test_exact_counts_from_tokenize(server: FakeServer) -> None:
    backend = _backend(server.url)
    messages = _request("three little words").messages
    assert backend.count_tokens(messages) == (1 + 2) + (3 + 2) + 1
    backend.count_tokens(messages)
    tokenize = [b for _, path, b, _ in server.requests if path == "/tokenize"]
    assert len(tokenize) == 1 and tokenize[0]["add_generation_prompt"] is True
    assert tokenize[0]["messages"] == [dict(m) for m in messages]


def test_estimate_without_tokenize_and_usage(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.tokenize = False
    server.usage = False
    backend = _backend(server.url)
    request = _request("x" * 30)
    assert backend.count_tokens(request.messages) == estimate_tokens(request.messages)
    assert estimate_tokens(request.messages) > 30 // 4
    with caplog.at_level("WARNING"):
        out = backend.generate([request, _request("y")])
    assert out[0].prompt_tokens == estimate_tokens(request.messages)
    assert out[0].completion_tokens > 0
    assert sum("no usage counts" in r.message for r in caplog.records) == 1


def test_context_length_from_models(server: FakeServer) -> None:
    assert _backend(server.url).context_length == 2048
    server.models = [{"id": "served-model", "object": "model"}]
    assert _backend(server.url).context_length == 8192
    assert _backend(server.url, context_length=1000).context_length == 1000
    assert _backend(server.url, model=None).model == "served-model"


def test_context_length_from_llama_servers_props(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    """llama.cpp's llama-server lists no max_model_len; its /props says the window of a slot."""
    server.models = [{"id": "served-model", "object": "model", "meta": {"n_ctx_train": 131072}}]
    server.props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}
    with caplog.at_level("WARNING"):
        assert _backend(server.url).context_length == 4096
    assert not [r for r in caplog.records if "context window unknown" in r.message]
    server.props = {"default_generation_settings": {"n_ctx": "big"}}  # not a window: the default, said so
    with caplog.at_level("WARNING"):
        assert _backend(server.url).context_length == 8192
    assert [r for r in caplog.records if "context window unknown" in r.message]


def test_a_prompt_the_server_finds_too_long_fails_at_once_naming_the_setting(server: FakeServer) -> None:
    backend = _backend(server.url, max_concurrency=1, context_length=32768)
    with pytest.raises(ContextOverflow, match="exceeds the available context size.*llm.context_length = 32768"):
        backend.generate([_request("HUGE")])
    assert len(server.chat_bodies()) == 1  # not retried: the same prompt would not fit the next time


def test_context_overflow_before_sending(server: FakeServer) -> None:
    backend = _backend(server.url, context_length=20)
    with pytest.raises(ContextOverflow, match="request 1"):
        backend.generate([_request("short", max_tokens=4), _request("word " * 30, max_tokens=4)])
    assert server.chat_bodies() == []


def test_length_finish_reason(server: FakeServer) -> None:
    (out,) = _backend(server.url).generate([_request("cut", max_tokens=2)])
    assert out.finish_reason == "length"


def test_backoff_honours_retry_after_and_is_deterministic(server: FakeServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import promem_fast.backends.llm_openai as module

    slept: list[float] = []
    monkeypatch.setattr(module.time, "sleep", slept.append)
    for _ in range(2):
        server.failures = [(429, {"Retry-After": "7"}), (503, {}), (502, {})]
        _backend(server.url, max_concurrency=1).generate([_request("wait")])
    assert slept[0] == slept[3] == 7.0
    assert slept[1:3] == slept[4:6]
    assert 0.01 <= slept[1] <= 0.02 and 0.02 <= slept[2] <= 0.04


def test_stream_keeps_max_concurrency_in_flight_and_hands_back_each_answer(server: FakeServer) -> None:
    server.delay_s = 0.05
    assert LLMConfig().max_concurrency == 256  # a vllm serve runs hundreds of sequences at once
    backend = _backend(server.url, max_concurrency=5)
    stream = backend.open_stream()
    try:
        for key in range(12):
            stream.submit(key, _request("BAD" if key == 7 else f"m{key}"))
        answers: dict[int, Any] = {}
        while stream.pending():
            answers.update(stream.complete(1.0))
    finally:
        stream.close()
    assert sorted(answers) == list(range(12))
    assert server.max_in_flight == 5
    assert isinstance(answers[7], BackendError)  # one request the server refuses fails alone
    assert [json.loads(answers[k].text)["echo"] for k in range(12) if k != 7] == [f"m{k}" for k in range(12) if k != 7]
