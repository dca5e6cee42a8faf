"""The engine: many session programs at once on the model backends, graphs out in input order.

Each session's pipeline is plain sequential code (a generator, see :mod:`promem_fast.pipeline`) that
yields lists of requests. A driver (:mod:`promem_fast.driver`) runs the programs: by default the continuous
one, where each session posts its next requests as soon as its own replies are in and every backend works
on its own thread; ``driver: round`` selects the round-synchronous one (one call per request kind per
round). Output is the same whatever the driver, window or batch size.

Faults stay local (:mod:`promem_fast.isolation`): a batch that raises is split in halves down to the
failing request, which is retried and, after the last attempt, handed to its program as a
:class:`~promem_fast.requests.Failure`. A program that crashes loses only its own session. Finished graphs
leave in input order, and at most ``max_in_flight`` sessions are in progress (``max_in_flight +
max_reorder`` held in all, see :mod:`promem_fast.driver.continuous`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from promem_fast.backends.base import Compressor, Embedder, LLMBackend, NLIBackend, Similarity
from promem_fast.config import EngineConfig
from promem_fast.context import RunContext
from promem_fast.driver.continuous import ContinuousDriver
from promem_fast.driver.kinds import Kinds, session_date
from promem_fast.driver.lanes import Lanes
from promem_fast.driver.rounds import RoundDriver
from promem_fast.errors import SessionFailed
from promem_fast.requests import Program
from promem_fast.services import Services
from promem_fast.run_summary import RunSummary
from promem_fast.types import MemoryGraph, Session

log = logging.getLogger(__name__)


class Engine:
    """Extracts memory graphs for many sessions at once.

    ``Engine(config).extract(sessions)`` returns one :class:`MemoryGraph` per session in input order;
    ``extract_stream`` yields them as they finish (still in input order) with bounded memory.
    Backends can be injected (``Engine(config, llm=my_backend)``) instead of being built from the config.
    """

    def __init__(self, config: EngineConfig | None = None, *, llm: LLMBackend | None = None,
                 nli: NLIBackend | None = None, embedder: Embedder | None = None,
                 similarity: Similarity | None = None, compressor: Compressor | None = None) -> None:
        self.config = (config or EngineConfig()).validate()
        self.services = Services(self.config, llm=llm, nli=nli, embedder=embedder, similarity=similarity,
                                 compressor=compressor)
        self.summary = RunSummary()
        kinds = self._kinds = Kinds(self.config, self.services)
        self._lanes = Lanes(kinds)
        self.driver: ContinuousDriver | RoundDriver = (
            ContinuousDriver(kinds, self._lanes, self.summary) if self.config.driver == "continuous"
            else RoundDriver(kinds, self.summary))
        self.on_session_error: Callable[[Session, BaseException], None] | None = None
        """Called for each session whose program crashed, under either ``on_error`` policy (with ``stop``, just
        before the run ends); the CLI writes rejects."""

    # ------------------------------------------------------------------------------------ public API
    def window(self) -> int:
        """Sessions in flight at once: ``max_in_flight``, or the auto window for 0 (sized to the KV cache)."""
        return self._kinds.window()

    def extract(self, sessions: Iterable[Session | dict[str, Any]]) -> list[MemoryGraph]:
        """Memory graphs of ``sessions``, in input order."""
        return list(self.extract_stream(sessions))

    def extract_stream(self, sessions: Iterable[Session | dict[str, Any]], *, total: int | None = None,
                       progress: bool | None = None) -> Iterator[MemoryGraph]:
        """Yield each session's graph as soon as it and every session before it are done; ``progress``: count
        them on stderr (None: as the configuration's ``progress`` says)."""
        from promem_fast.io import session_from_dict

        timings = self.config.record_timings

        def programs() -> Iterator[tuple[Session, Callable[[RunContext], Program[MemoryGraph]]]]:
            for item in sessions:
                session = item if isinstance(item, Session) else session_from_dict(item)
                yield session, (lambda ctx, s=session: _dated_program(s, ctx))

        if total is None and hasattr(sessions, "__len__"):
            total = len(sessions)  # type: ignore[arg-type]
        bar = self._progress(total, self.config.progress if progress is None else progress)
        started, cpu_started = time.perf_counter(), time.thread_time()
        backend_before, load_before = sum(self.summary.backend_seconds.values()), self.services.load_seconds
        try:
            for session, outcome in self.run(programs()):
                if isinstance(outcome, BaseException):
                    self.summary.rejected += 1
                    if self.on_session_error is not None:
                        self.on_session_error(session, outcome)
                    if self.config.on_error == "stop":
                        raise SessionFailed(f"session {session.session_id!r} failed: "
                                            f"{type(outcome).__name__}: {outcome}") from outcome
                    log.error("session %s failed and was skipped: %s", session.session_id, outcome)
                    continue
                if not timings:
                    for st in outcome.stats.stages.values():
                        st.seconds = 0.0
                self.summary.add(outcome)
                if bar is not None:
                    bar.update(1)
                yield outcome
        finally:
            elapsed = time.perf_counter() - started
            self.summary.wall_seconds += elapsed
            self.summary.load_seconds = self.services.load_seconds
            self.summary.engine_seconds += self._engine_share(
                elapsed, time.thread_time() - cpu_started,
                sum(self.summary.backend_seconds.values()) - backend_before, self.services.load_seconds - load_before)
            if bar is not None:
                bar.close()

    def run(self, programs: Iterable[tuple[Any, Callable[[RunContext], Program[Any]]]]
            ) -> Iterator[tuple[Any, Any]]:
        """The generic driver: ``(key, make_program)`` pairs in, ``(key, value or exception)`` out, in order.

        Evaluation uses it too (QA and judge programs), so everything shares one batching loop. The source
        may yield :data:`~promem_fast.driver.state.IDLE` to let the sessions in flight advance before it is asked again.
        """
        return self.driver.run(programs)

    def close(self) -> None:
        self.services.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ internals
    def _progress(self, total: int | None, enabled: bool) -> Any:
        from promem_fast.progress import progress

        return progress(enabled, total)

    def _engine_share(self, wall: float, driver_cpu: float, backend: float, loads: float) -> float:
        """The engine's own seconds in a run. The round driver calls every backend on its own thread, so its
        share is what the backend calls and model loads left of the wall; the continuous driver's backends
        run on lane threads whose seconds overlap, so its share is the driver thread's CPU time."""
        if self.config.driver == "round":
            return max(0.0, wall - backend - loads)
        return min(wall, max(0.0, driver_cpu))


def _dated_program(session: Session, ctx: RunContext) -> Program[MemoryGraph]:
    """The session's program, its context told the session's day (for chat templates that print a date) and
    id (for its warnings)."""
    from promem_fast.pipeline import session_program

    ctx.date = session_date(session.timestamp)
    ctx.session = session.session_id
    return session_program(session, ctx)
