"""Any OpenAI-compatible ``/v1/chat/completions`` endpoint (``vllm serve``, llama.cpp server, ...).

Standard library only (``urllib`` plus a thread pool of ``LLMConfig.max_concurrency`` workers), so an
on-prem deployment needs no HTTP client package. Nothing is contacted unless ``llm.base_url`` is set.

Requests: ``model``, ``messages``, ``max_tokens``, ``temperature``, ``seed``, and when the engine gives a
schema ``response_format = {"type": "json_schema", "json_schema": {"name": "reply", "schema": ...,
"strict": ...}}``: strict, in the form OpenAI's strict mode accepts, when the schema has one, else as written
and not strict (:mod:`._openai_schema`). A server that refuses that form (llama-cpp-python's refuses any
``response_format`` type but ``text`` and ``json_object``) gets ``{"type": "json_object", "schema": ...}``
from then on, the form it takes, after one refused request and a warning; ``schema_form`` fixes either.
``ignore_eos`` (a vLLM extension) is sent only when the config asks for it. Every other key of
``LLMConfig.options`` is merged into each request body as is, except the backend's own knobs ``backoff_s``
(base delay of the exponential backoff, default 0.5 s), ``max_backoff_s`` (cap, 30 s) and ``schema_form``
(``auto``, ``json_schema`` or ``json_object``).

Failures: HTTP 429, 5xx, refused connections and timeouts are retried up to ``max_retries`` times with
exponential backoff and jitter; the jitter comes from a generator seeded by (``seed``, request position,
attempt), so a rerun waits the same way. A ``Retry-After`` header replaces the computed delay. Other 4xx
answers fail at once with :class:`BackendError` carrying the server's message (:class:`ContextOverflow`
when the server says the prompt is too long). When retries run out, a server that stays unreachable,
rate-limited or unavailable (429, 502, 503, 504) raises :class:`BackendUnavailable`; another 5xx raises
:class:`BackendError`, so the engine can isolate the request that triggers it.

Token counts: completions record the server's ``usage``; a server without it gets an estimate, with one
warning. ``count_tokens`` is exact when the server offers vLLM's ``POST /tokenize`` (at the root, next to
``/v1``) for chat messages; otherwise it is a deliberately high estimate, a token per three characters
plus a few tokens of template per message, so a prompt judged to fit does fit (llama.cpp's ``/tokenize``
takes raw text without the chat template and is not used). ``context_length`` is the configured value,
else the ``max_model_len`` that vLLM lists under ``/v1/models``, else the ``n_ctx`` that llama.cpp's
``llama-server`` gives under ``GET /props`` (a slot's window, which it starts at the model's whole context unless
told ``-c``), else 8192. A server that refuses a prompt as too long (vLLM's, OpenAI's, llama.cpp's and
llama-cpp-python's wordings) raises :class:`ContextOverflow` at once, not retried, naming the setting to change.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from http.client import HTTPException
from typing import Any

from promem_fast.backends._message_cache import MessageCache
from promem_fast.backends._openai_schema import strict_form
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.config import LLMConfig
from promem_fast.errors import BackendError, BackendUnavailable, ConfigError, ContextOverflow

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192
_OVERFLOW_WORDS = ("context length", "maximum context", "context size", "context window", "context_length_exceeded")
"""How servers say a prompt does not fit: vLLM and OpenAI ("maximum context length", code
``context_length_exceeded``), llama.cpp's ``llama-server`` ("exceeds the available context size"),
llama-cpp-python's ("exceed context window", or OpenAI's wording from its server)."""
CHARS_PER_TOKEN = 3
"""Estimate when the server cannot count: English BPE runs near 4 characters a token, so 3 overcounts."""
TEMPLATE_TOKENS = 8
"""Estimated chat-template tokens per message (role header and separators), also overcounted."""
_UNAVAILABLE = frozenset({429, 502, 503, 504})
SCHEMA_FORMS = ("json_schema", "json_object")
"""How a reply schema is sent: OpenAI's form (vLLM and llama.cpp's llama-server take it too), or
``json_object`` with a ``schema``, which llama-cpp-python's server takes."""
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(eq=False)
class _Retryable(Exception):
    """A failure worth another attempt: an HTTP status (``None`` for no answer) and the server's hint."""

    status: int | None
    message: str
    retry_after: float | None = None


class _FormRefused(BackendError):
    """The server refused the request's ``response_format``: not retried as it is, but in the other form."""


def _server_message(raw: bytes) -> str:
    """The human part of an error body: OpenAI's ``error.message``, vLLM's ``message``, or the raw text."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:2000]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if data.get("message"):
            return str(data["message"])
    return text[:2000]


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Upper-side token estimate of a chat prompt (see the module docstring)."""
    return sum(math.ceil(len(m["content"]) / CHARS_PER_TOKEN) + TEMPLATE_TOKENS for m in messages) + TEMPLATE_TOKENS


class OpenAICompatLLM:
    """Chat completions over HTTP, ``max_concurrency`` requests in flight, answers in input order."""

    def __init__(self, config: LLMConfig) -> None:
        if not config.base_url:
            raise ConfigError("llm.base_url must be set for the openai backend, e.g. http://127.0.0.1:8000/v1")
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self._root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        self._api_key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        extra = dict(config.options)
        self._backoff_s = float(extra.pop("backoff_s", 0.5))
        self._max_backoff_s = float(extra.pop("max_backoff_s", 30.0))
        form = str(extra.pop("schema_form", "auto"))
        if form not in ("auto", *SCHEMA_FORMS):
            raise ConfigError(f"llm.options.schema_form must be auto, json_schema or json_object, not {form!r}")
        self._schema_form, self._form_fixed = ("json_schema" if form == "auto" else form), form != "auto"
        self._extra_body = extra
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        # Loopback servers are never reached through a proxy that the environment may name.
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)
        self._model: str | None = config.model
        self._context_length: int | None = config.context_length
        self._models: list[dict[str, Any]] | None = None
        self._tokenize: bool | None = None
        """Whether the server counts chat tokens itself; ``None`` until first asked."""
        self._counts: MessageCache[int] = MessageCache(lambda messages, _date: self._count(messages))
        """Prompt sizes by content: the engine measures a prompt, then sends it."""
        self._warned_usage = False

    # ------------------------------------------------------------------------------------ HTTP
    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        """One HTTP exchange; retryable failures become :class:`_Retryable`, the rest fail for good."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.config.timeout_s) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            message = _server_message(exc.read() or b"")
            if exc.code in (400, 422, 500) and "response_format" in message and body and "response_format" in body:
                raise _FormRefused(f"{url} answered HTTP {exc.code}: {message}") from exc
            if exc.code == 429 or exc.code >= 500:
                raise _Retryable(exc.code, message, _retry_after(exc.headers.get("Retry-After"))) from exc
            if exc.code == 400 and any(words in message.lower() for words in _OVERFLOW_WORDS):
                raise ContextOverflow(f"{url}: {message} (the server's context window is smaller than "
                                      f"llm.context_length = {self.context_length}: set it to the server's, or "
                                      "start the server with a larger one)") from exc
            raise BackendError(f"{url} answered HTTP {exc.code}: {message}") from exc
        except (urllib.error.URLError, ConnectionError, TimeoutError, HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Retryable(None, f"{type(exc).__name__}: {reason}") from exc
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise BackendError(f"{url} answered with a body that is not JSON: {payload[:200]!r}") from exc

    def _delay(self, position: int, attempt: int) -> float:
        """Exponential backoff with deterministic jitter in [50 %, 100 %] of the step."""
        step = min(self._max_backoff_s, self._backoff_s * (2 ** attempt))
        jitter = random.Random(f"{self.config.seed}/{position}/{attempt}").random()
        return step * (0.5 + 0.5 * jitter)

    def _call(self, method: str, url: str, body: dict[str, Any] | None = None, position: int = 0) -> Any:
        """:meth:`_send` with bounded retries; ``position`` (the request's place in its batch) seeds jitter."""
        attempts = self.config.max_retries + 1
        last: _Retryable | None = None
        for attempt in range(attempts):
            try:
                return self._send(method, url, body)
            except _Retryable as exc:
                last = exc
                if attempt + 1 < attempts:
                    delay = exc.retry_after if exc.retry_after is not None else self._delay(position, attempt)
                    delay = min(delay, self._max_backoff_s)
                    logger.warning("%s %s failed (%s: %s); retry %d/%d in %.2fs", method, url,
                                   exc.status or "no answer", exc.message, attempt + 1, attempts - 1, delay)
                    time.sleep(delay)
        assert last is not None
        what = f"HTTP {last.status}" if last.status is not None else "no answer"
        message = f"{method} {url}: {what} after {attempts} attempts: {last.message}"
        if last.status is None or last.status in _UNAVAILABLE:
            raise BackendUnavailable(message)
        raise BackendError(message)

    # ----------------------------------------------------------------------------- server facts
    def _model_list(self) -> list[dict[str, Any]]:
        if self._models is None:
            data = self._call("GET", f"{self.base_url}/models")
            entries = data.get("data") if isinstance(data, dict) else None
            self._models = [e for e in entries or [] if isinstance(e, dict)]
        return self._models

    @property
    def model(self) -> str:
        """The configured model name, else the first one the server lists."""
        if self._model is None:
            models = self._model_list()
            if not models or "id" not in models[0]:
                raise ConfigError(f"llm.model is not set and {self.base_url}/models lists no model")
            self._model = str(models[0]["id"])
        return self._model

    @property
    def context_length(self) -> int:
        if self._context_length is None:
            value: Any = None
            try:
                entries = self._model_list()
                chosen = [e for e in entries if e.get("id") == self.model] or entries[:1]
                value = chosen[0].get("max_model_len") if chosen else None
            except (BackendError, BackendUnavailable, ConfigError) as exc:
                logger.warning("could not read the context window from %s/models: %s", self.base_url, exc)
            if not (isinstance(value, int) and value > 0):
                value = self._slot_context()
            if isinstance(value, int) and value > 0:
                self._context_length = value
            else:
                logger.warning("context window unknown for %s; assuming %d tokens (set llm.context_length)",
                               self.base_url, DEFAULT_CONTEXT)
                self._context_length = DEFAULT_CONTEXT
        return self._context_length

    def _slot_context(self) -> int | None:
        """llama.cpp's ``llama-server`` window per slot (``GET /props``); ``None`` from a server without it."""
        try:
            props = self._send("GET", f"{self._root}/props", None)
        except (BackendError, _Retryable) as exc:
            logger.debug("%s/props gives no context window: %s", self._root, exc)
            return None
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        value = settings.get("n_ctx") if isinstance(settings, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    # ----------------------------------------------------------------------------------- tokens
    def _server_count(self, messages: Sequence[Message]) -> int | None:
        """Exact count from vLLM's ``/tokenize``; ``None`` (and never asked again) when not offered."""
        if self._tokenize is False:
            return None
        body = {"model": self.model, "messages": [dict(m) for m in messages], "add_generation_prompt": True}
        try:
            data = self._call("POST", f"{self._root}/tokenize", body)
        except BackendError as exc:
            if self._tokenize is None:
                logger.info("%s/tokenize is not available (%s); token counts are estimated", self._root, exc)
                self._tokenize = False
                return None
            raise
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int):
            tokens = data.get("tokens") if isinstance(data, dict) else None
            count = len(tokens) if isinstance(tokens, list) else None
        if count is None:
            logger.info("%s/tokenize gave no count; token counts are estimated", self._root)
            self._tokenize = False
            return None
        self._tokenize = True
        return count

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self._counts(messages)

    def _count(self, messages: Sequence[Message]) -> int:
        count = self._server_count(messages)
        return estimate_tokens(messages) if count is None else count

    # ------------------------------------------------------------------------------- generation
    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            **self._extra_body,
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
        }
        if request.schema is not None and self._schema_form == "json_object":
            body["response_format"] = {"type": "json_object", "schema": dict(request.schema)}
        elif request.schema is not None:
            strict = strict_form(request.schema)
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "reply", "schema": dict(request.schema) if strict is None else strict,
                "strict": strict is not None}}
        if self.config.ignore_eos:
            body["ignore_eos"] = True
        return body

    def _complete(self, position: int, request: GenerationRequest) -> Completion:
        url = f"{self.base_url}/chat/completions"
        body = self._body(request)
        try:
            data = self._call("POST", url, body, position)
        except _FormRefused as exc:
            if self._form_fixed or body["response_format"]["type"] != "json_schema":
                raise
            if self._schema_form == "json_schema":  # the first request to hear it says so; the others just resend
                logger.warning("%s refuses response_format json_schema (%s); sending reply schemas as json_object "
                               "with a schema from now on (llm.options.schema_form)", self.base_url,
                               " ".join(str(exc).split())[:240])
                self._schema_form = "json_object"
            data = self._call("POST", url, self._body(request), position)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendError(f"request {position}: unexpected completion body {str(data)[:300]}") from exc
        usage = data.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        if not isinstance(prompt_tokens, int) or not isinstance(completion_tokens, int):
            if not self._warned_usage:
                self._warned_usage = True
                logger.warning("%s returns no usage counts; prompt and completion tokens are estimated",
                               self.base_url)
            prompt_tokens = self.count_tokens(request.messages)
            completion_tokens = math.ceil(len(text) / CHARS_PER_TOKEN)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                          finish_reason=finish)

    def _run_all(self, pool: ThreadPoolExecutor, fn: Any, requests: Sequence[GenerationRequest]) -> list[Any]:
        """``fn(position, request)`` for every request; the first failure by position is raised, and work
        not yet started is cancelled as soon as anything fails."""
        futures: list[Future[Any]] = [pool.submit(fn, i, r) for i, r in enumerate(requests)]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        if pending:
            for future in pending:
                future.cancel()
            wait(pending)
        for future in futures:
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        return [f.result() for f in futures]

    def _check_fits(self, position: int, request: GenerationRequest) -> None:
        n = self.count_tokens(request.messages)
        if n + request.max_tokens > self.context_length:
            raise ContextOverflow(
                f"request {position} of the batch: {n} prompt tokens + max_tokens {request.max_tokens} exceed "
                f"the context window of {self.context_length} tokens ({self.model} at {self.base_url})")

    def open_stream(self) -> OpenAIStream:
        """Submit/complete with up to ``max_concurrency`` requests in flight (the continuous driver's way in)."""
        return OpenAIStream(self)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Every request checked against the window first, then sent with bounded concurrency."""
        if not requests:
            return []
        workers = max(1, min(self.config.max_concurrency, len(requests)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="promem-openai") as pool:
            self._run_all(pool, self._check_fits, requests)
            return self._run_all(pool, self._complete, requests)


class OpenAIStream:
    """Requests sent as they are submitted, ``max_concurrency`` at once from one long-lived pool of threads;
    ``complete`` returns those whose answer came back. The engine checks each prompt against the window
    before submitting it. A server gone for good (:class:`BackendUnavailable` after the retries) ends the
    run; any other failure fails its own request."""

    def __init__(self, backend: OpenAICompatLLM) -> None:
        self._backend = backend
        self._pool = ThreadPoolExecutor(max_workers=max(1, backend.config.max_concurrency),
                                        thread_name_prefix="promem-openai")
        self._futures: dict[Future[Completion], int] = {}

    def submit(self, key: int, request: GenerationRequest) -> None:
        self._futures[self._pool.submit(self._backend._complete, key, request)] = key

    def pending(self) -> int:
        return len(self._futures)

    def complete(self, timeout: float | None) -> list[tuple[int, Completion | BaseException]]:
        if not self._futures:
            return []
        done, _ = wait(list(self._futures), timeout=timeout, return_when=FIRST_COMPLETED)
        out: list[tuple[int, Completion | BaseException]] = []
        for future in done:
            key = self._futures.pop(future)
            exc = future.exception()
            if isinstance(exc, BackendUnavailable):
                raise exc
            out.append((key, exc if exc is not None else future.result()))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._futures.clear()
