"""The request kinds and the jobs made of them: what a posted request becomes for its backend.

The drivers share three steps per request, each in its own module: :meth:`Kinds.job` (here, on the
driver's thread) turns a posted request into a :class:`Job` and :meth:`Kinds.target` says which executor
serves it; :func:`~promem_fast.driver.calls.call` (any thread; it touches no session state) runs a batch of
jobs on the backend; :class:`~promem_fast.driver.settle.Settler` (the driver's thread again) parses and
checks each outcome into the session, counting the step's statistics (:mod:`.accounting`), or says to send
the request again. The round driver runs the three back to back per kind; the continuous driver runs the
call on the kind's own thread while it settles other answers.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from promem_fast.backends.base import GenerationRequest
from promem_fast.config import ROLES, EngineConfig
from promem_fast.driver.state import SessionRun
from promem_fast.driver.window import WindowSizer, resolve_window
from promem_fast.errors import PromemError
from promem_fast.requests import Anchor, Attend, CleanEdges, Compress, Embed, Entail, Generate, Match, Request
from promem_fast.services import Services
from promem_fast.times import day_of

KIND_NAMES: dict[type, str] = {
    Generate: "generate", Entail: "entail", Embed: "embed", Match: "match", Anchor: "anchor",
    CleanEdges: "clean_edges", Compress: "compress", Attend: "attend",
}
"""Request type → kind name, in the order the round driver serves the kinds of one round."""

@dataclass(eq=False, slots=True)
class Job:
    """One attempt at one posted request: who asked (``run``, ``slot``) and what the backend gets."""

    run: SessionRun
    slot: int
    kind: str
    payload: Any
    hashes: list[int] | None = None
    """The prompt's block hashes (:func:`~promem_fast.prefix_cache.block_hashes`), set where its ids are
    made (:func:`~promem_fast.driver.calls.prepare_job`, on the generation thread); None when the backend keeps its ids to itself."""
    n_ids: int = 0
    """Its number of ids (what the hashes cover, whole blocks and the rest)."""


def session_date(timestamp: str | None) -> str | None:
    """The ``YYYY-MM-DD`` day of a session timestamp, for the chat template's own date (None if absent); read
    by :func:`promem_fast.times.day_of`, so the template shows the day the prompts and the store show."""
    day = day_of(timestamp)
    return day.isoformat() if day is not None else None


class Kinds:
    """Jobs of one engine (its config and services): the window, each request's executor and its job."""

    def __init__(self, config: EngineConfig, services: Services) -> None:
        self.config = config
        self.services = services
        self._window: int | None = None
        self._sizer: WindowSizer | None = None

    def window(self) -> int:
        """Sessions in flight: ``max_in_flight``, or for 0 (auto) the main LLM backend's KV cache over a
        session's working set as measured so far (:mod:`promem_fast.driver.window`; loads that backend to ask it)."""
        if self._window is None:
            role = next((r for r in ROLES if r not in self.config.roles), "event")
            llm = self.services.llm(role) if self.config.max_in_flight == 0 else None
            self._window, self._sizer = resolve_window(self.config.max_in_flight, llm)
        return self._window if self._sizer is None else self._sizer.window()

    def observe(self, run: SessionRun, tokens: int) -> None:
        """A step of ``run`` held ``tokens`` of KV cache: the auto window follows (nothing for a set window)."""
        if self._sizer is not None:
            self._sizer.observe(id(run), tokens)

    # ------------------------------------------------------------------------------ driver's thread
    def target(self, request: Request) -> Hashable:
        """Which executor serves ``request``: one per LLM backend, one per other kind."""
        kind = KIND_NAMES.get(type(request))
        if kind is None:
            raise PromemError(f"unknown request kind: {type(request).__name__}")
        if kind == "generate":
            return kind, id(self.services.llm(request.role))  # type: ignore[union-attr]
        return kind, None

    def job(self, run: SessionRun, slot: int) -> Job:
        request = run.pending[slot]
        kind = KIND_NAMES[type(request)]
        payload: Any = request
        if kind == "generate":
            cfg = self.config.llm_for(request.role)  # type: ignore[union-attr]
            attempt = run.attempts[slot]
            payload = GenerationRequest(
                messages=request.messages, schema=request.schema,  # type: ignore[union-attr]
                max_tokens=request.max_tokens, seed=cfg.seed + attempt,  # type: ignore[union-attr]
                temperature=cfg.temperature if attempt == 0 else cfg.retry_temperature,
                date=getattr(run.ctx, "date", None))
        return Job(run, slot, kind, payload)
