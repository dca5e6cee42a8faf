"""One session program in flight: the requests it posted, the answers so far, and how to resume it.

Shared by both drivers (:mod:`.rounds` and :mod:`.continuous`); only the driver's own thread touches it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from promem_fast.context import RunContext
from promem_fast.errors import PromemError
from promem_fast.prefix_cache import PrefixCacheModel
from promem_fast.requests import Program, Request
from promem_fast.services import Services
from promem_fast.types import RunStats

log = logging.getLogger(__name__)

UNSET: Any = object()
"""A slot not answered yet (``None`` is a legitimate answer)."""

END: Any = object()
"""What :func:`pull` returns once the source is exhausted."""


class _Idle:
    def __repr__(self) -> str:
        return "IDLE"


IDLE: Any = _Idle()
"""What a source given to :meth:`~promem_fast.engine.Engine.run` may yield instead of a ``(key,
make_program)`` pair: nothing new right now, keep the sessions in flight going. A long-lived source (the
``promem serve`` worker feeding the window from its job queue) yields it when its queue is empty, so sessions
already admitted keep advancing instead of the loop blocking in ``next()``; it is asked again after the next
round (the continuous driver: after answers came or a short wait). A source that yields ``IDLE`` while
nothing is in flight is asked again at once, so it should wait a little itself first."""


def pull(source: Iterator[Any]) -> Any:
    """The source's next item (a ``(key, make_program)`` pair or :data:`IDLE`), or :data:`END`."""
    return next(source, END)


@dataclass(eq=False)
class SessionRun:
    """A program and its current step: ``pending`` requests, ``results`` filled in as answers settle."""

    key: Any
    program: Program[Any] | None
    ctx: RunContext
    pending: list[Request] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    raws: list[list[str]] = field(default_factory=list)
    left: int = 0
    """Slots of the current step not settled yet; the program resumes when it reaches 0."""
    value: Any = UNSET
    error: BaseException | None = None
    prefill: list[tuple[int, int, str, str, list[int] | None, int, int]] = field(default_factory=list)
    """Replies of the current step, ``(slot, attempt, stage, role, block hashes, prompt tokens, reply
    tokens)``, counted under the session's prefix caches once the step is complete, in slot order (so the
    count is the same whatever order the replies came back in)."""
    caches: dict[Hashable, PrefixCacheModel] = field(default_factory=dict)
    """The session's prefix cache model per LLM backend."""

    def post(self, requests: list[Request]) -> None:
        self.pending = list(requests)
        self.results = [UNSET] * len(requests)
        self.attempts = [0] * len(requests)
        self.raws = [[] for _ in requests]
        self.left = len(requests)

    def settle(self, slot: int, value: Any) -> None:
        """Give slot ``slot`` its answer (a value or a :class:`~promem_fast.requests.Failure`)."""
        self.results[slot] = value
        self.left -= 1

    @property
    def ready(self) -> bool:
        return self.left == 0

    @property
    def done(self) -> bool:
        return self.value is not UNSET or self.error is not None

    @property
    def outcome(self) -> Any:
        return self.error if self.error is not None else self.value


def start(key: Any, make: Callable[[RunContext], Program[Any]], services: Services) -> SessionRun:
    """Build the program and run it to its first request list (a program that cannot start fails alone)."""
    run = SessionRun(key=key, program=None, ctx=RunContext(services, RunStats()))
    try:
        run.program = make(run.ctx)
    except Exception as exc:
        run.error = exc
        return run
    advance(run)
    return run


def advance(run: SessionRun) -> None:
    """Resume the program with its answers (or start it); it posts its next requests or finishes."""
    assert run.program is not None
    try:
        requests = next(run.program) if not run.pending else run.program.send(run.results)
    except StopIteration as stop:
        run.value = stop.value
        run.pending = []
        return
    except Exception as exc:  # a program that crashes loses only its own session
        log.debug("session program crashed", exc_info=True)
        run.error = exc
        run.pending = []
        return
    if not requests:
        run.error = PromemError("a session program yielded an empty request list")
        run.pending = []
        return
    run.post(requests)
