"""Counters of the service, rendered as Prometheus text for ``/metrics``.

Only totals over all tenants are exposed (no tenant or user label), so a scrape reveals nothing about who
stores what.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from promem_fast.serve.limits import ASGIApp, Message, Receive, Scope, Send
from promem_fast.types import RunStats

log = logging.getLogger(__name__)

RATE_WINDOW_S = 60.0
"""Sessions per second are measured over the last minute."""


class Metrics:
    """Thread-safe counters filled by the worker and the request handlers."""

    def __init__(self, queue_depth: Callable[[], int], engine_counts: Callable[[], tuple[int, dict[str, int]]],
                 remote: Callable[[], dict[str, Any]] | None = None) -> None:
        self._lock = threading.Lock()
        self._queue_depth = queue_depth
        self._engine_counts = engine_counts
        self._remote = remote
        """The engine process's :meth:`state` (its worker fills the session counters), when it runs apart."""
        self._finished: deque[float] = deque()
        self._started = time.monotonic()
        self.sessions = {"done": 0, "failed": 0}
        self.failed_steps = 0
        self.tokens: dict[tuple[str, str], int] = {}
        self.requests: dict[int, int] = {}
        self.users_per_window_max = 0
        """Most distinct users (tenant, user) whose sessions were in the engine's window at once."""

    def session_done(self, stats: RunStats | None, ok: bool) -> None:
        now = time.monotonic()
        with self._lock:
            self.sessions["done" if ok else "failed"] += 1
            self._finished.append(now)
            while self._finished and self._finished[0] < now - RATE_WINDOW_S:
                self._finished.popleft()
            if stats is not None:
                self.failed_steps += stats.counts.get("failed_steps", 0)
                for stage, st in stats.stages.items():
                    for kind, n in (("prompt", st.prompt_tokens), ("completion", st.completion_tokens)):
                        self.tokens[(stage, kind)] = self.tokens.get((stage, kind), 0) + n

    def window_users(self, n: int) -> None:
        with self._lock:
            self.users_per_window_max = max(self.users_per_window_max, n)

    def request(self, status: int) -> None:
        with self._lock:
            self.requests[status] = self.requests.get(status, 0) + 1

    def sessions_per_second(self) -> float:
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._finished if t >= now - RATE_WINDOW_S]
        return len(recent) / max(min(RATE_WINDOW_S, now - self._started), 1e-3)

    def state(self) -> dict[str, Any]:
        """The worker's counters as plain data (sent from the engine process to the HTTP process)."""
        rounds, calls = self._engine_counts()
        rate = self.sessions_per_second()
        with self._lock:
            return {"sessions": dict(self.sessions), "tokens": [[s, k, n] for (s, k), n in self.tokens.items()],
                    "failed_steps": self.failed_steps, "users": self.users_per_window_max, "rounds": rounds,
                    "calls": dict(calls), "rate": rate}

    def render(self) -> str:
        state = self.state()
        if self._remote is not None:
            try:
                state = self._remote()
            except Exception as exc:  # the engine process is down: its counters are unknown, say so in the log
                log.warning("no counters from the engine process: %s", exc)
        rounds, calls = state["rounds"], state["calls"]
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value:g}" for labels, value in samples)

        with self._lock:
            requests = dict(self.requests)
        sessions = state["sessions"]
        tokens = {(s, k): n for s, k, n in state["tokens"]}
        failed_steps, users = state["failed_steps"], state["users"]
        metric("promem_queue_depth", "gauge", "Sessions accepted and not finished (pending or running).",
               [("", self._queue_depth())])
        metric("promem_sessions_total", "counter", "Sessions finished, by outcome.",
               [(f'{{outcome="{k}"}}', v) for k, v in sessions.items()])
        metric("promem_sessions_per_second", "gauge", f"Sessions finished per second over the last "
               f"{RATE_WINDOW_S:g} s.", [("", state["rate"])])
        metric("promem_stage_tokens_total", "counter", "LLM tokens per pipeline stage and kind.",
               [(f'{{stage="{s}",kind="{k}"}}', v) for (s, k), v in sorted(tokens.items())])
        metric("promem_failed_steps_total", "counter", "Pipeline steps recorded as failures inside finished "
               "sessions.", [("", failed_steps)])
        metric("promem_engine_rounds_total", "counter", "Batching rounds of the engine.", [("", rounds)])
        metric("promem_backend_calls_total", "counter", "Model backend calls, by request kind.",
               [(f'{{kind="{k}"}}', v) for k, v in sorted(calls.items())])
        metric("promem_window_users_max", "gauge", "Most users (of any tenants) whose sessions shared the engine "
               "window at once.", [("", users)])
        metric("promem_http_responses_total", "counter", "HTTP responses, by status code.",
               [(f'{{code="{k}"}}', v) for k, v in sorted(requests.items())])
        return "\n".join(out) + "\n"


class CountResponses:
    """ASGI middleware that counts each HTTP response by status in :meth:`Metrics.request`.

    A plain ASGI wrapper rather than Starlette's ``@app.middleware("http")``, which runs every request in a
    task of its own with streams between the two: about half a millisecond of the server's CPU per request,
    on the path of every search."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.request(int(message["status"]))
            await send(message)

        await self.app(scope, receive, counted)
