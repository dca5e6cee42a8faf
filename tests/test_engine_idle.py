"""A long-lived source (the serve worker's queue) yields ``IDLE`` so sessions in flight go on without it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from conftest import tomas_sessions, scripted_config
from promem_fast.context import RunContext
from promem_fast.driver.state import IDLE
from promem_fast.engine import Engine
from promem_fast.pipeline import session_program


def test_sessions_in_flight_finish_while_the_source_has_nothing_new() -> None:
    first, second = tomas_sessions(2)
    engine = Engine(scripted_config())
    finished: list[str] = []
    idles = 0

    def source() -> Iterator[Any]:
        nonlocal idles
        yield first.session_id, (lambda ctx: session_program(first, ctx))
        # The queue is empty until the first session is done: only IDLE keeps the loop from waiting here.
        while not finished and idles < 10_000:
            idles += 1
            yield IDLE
        yield second.session_id, (lambda ctx: session_program(second, ctx))

    for key, outcome in engine.run(source()):
        assert not isinstance(outcome, BaseException)
        finished.append(key)
    assert finished == [first.session_id, second.session_id]
    assert 1 < idles < 10_000  # one IDLE per round of the first session, not a spin
    assert idles <= engine.summary.rounds


def test_a_source_of_only_idle_then_programs_runs_them() -> None:
    session = tomas_sessions(1)[0]
    make: Callable[[RunContext], Any] = lambda ctx: session_program(session, ctx)  # noqa: E731
    engine = Engine(scripted_config())
    items: list[Any] = [IDLE, IDLE, ("a", make), IDLE, ("b", make)]
    out = [key for key, outcome in engine.run(iter(items)) if not isinstance(outcome, BaseException)]
    assert out == ["a", "b"]
