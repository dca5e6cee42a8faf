"""The background worker: one engine, fed from the durable queue, shared by every client.

The worker's source claims pending sessions only as the engine's window has room, so sessions of different
clients share every backend batch (continuous batching across requests). When the queue is empty but
sessions are in flight it yields :data:`~promem_fast.driver.state.IDLE` so they keep advancing; when nothing is in
flight it waits on the queue's wakeup event. Question answering runs on the same engine: :class:`EngineGate`
hands QA programs to the worker, which interleaves them with extraction.

Finished graphs go to a writer thread of their own, which stores them (and judges updates, through the
gate, as programs of the same engine) while the engine's thread goes on settling and posting requests: a
batch of writes never pauses the sessions in flight.
"""

from __future__ import annotations

import logging
import queue as queues
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from promem_fast.driver.state import IDLE
from promem_fast.engine import Engine
from promem_fast.errors import PromemError
from promem_fast.serve.jobs import Claimed, JobQueue
from promem_fast.serve.metrics import Metrics
from promem_fast.types import MemoryGraph

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 300.0
"""How long a request waits for its programs (answering questions) to come back from the worker."""


class _Stopped(Exception):
    """Raised through the engine's loop to leave it at once when the service stops."""


@dataclass
class _Call:
    """Programs a request thread handed to the worker, and the outcomes as they come back."""

    programs: list[tuple[Any, Callable[[Any], Any]]]
    outcomes: list[Any] = field(default_factory=list)
    left: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.outcomes = [None] * len(self.programs)
        self.left = len(self.programs)


class Worker:
    """Runs the engine on a thread of its own until :meth:`stop`."""

    def __init__(self, engine: Engine, queue: JobQueue, metrics: Metrics,
                 write: Callable[[str, list[MemoryGraph]], None], *, poll_s: float = 0.5) -> None:
        self.engine = engine
        self._queue = queue
        self._metrics = metrics
        self._write = write
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._calls: deque[_Call] = deque()
        self._running: list[_Call] = []
        self._claimed: deque[Claimed] = deque()
        self._in_flight = 0
        self._users: Counter[tuple[str, str]] = Counter()
        self._stored: queues.SimpleQueue[tuple[Claimed, MemoryGraph] | None] = queues.SimpleQueue()
        """Finished graphs waiting for the writer thread (None: the worker is stopping)."""
        self._thread: threading.Thread | None = None
        self._writer: threading.Thread | None = None

    # ------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        resumed = self._queue.recover()
        if resumed:
            log.info("resuming %d sessions accepted before the last stop", resumed)
        self._thread = threading.Thread(target=self._loop, name="promem-worker", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="promem-writer", daemon=True)
        self._thread.start()
        self._writer.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work; sessions still in flight, or finished but not stored, stay claimed and are
        resumed at the next start."""
        self._stop.set()
        self._queue.wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._stored.put(None)
        if self._writer is not None:
            self._writer.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def call(self, programs: Iterable[tuple[Any, Callable[[Any], Any]]]) -> list[tuple[Any, Any]]:
        """Run ``(key, make_program)`` pairs on the worker's engine; ``(key, value or exception)`` in order."""
        call = _Call(list(programs))
        if not call.programs:
            return []
        if not self.alive:
            raise PromemError("the engine worker is not running")
        self._calls.append(call)
        self._queue.wakeup.set()
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while not call.done.wait(min(1.0, max(deadline - time.monotonic(), 0.0))):
            if not self.alive and not call.done.is_set():  # stopped after the call was queued: no answer will come
                raise PromemError("the engine worker stopped")
            if time.monotonic() >= deadline:
                raise PromemError(f"no answer from the engine within {CALL_TIMEOUT_S:g} s")
        return [(key, outcome) for (key, _), outcome in zip(call.programs, call.outcomes)]

    # ------------------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for key, outcome in self.engine.run(self._source()):
                    self._in_flight -= 1
                    if isinstance(key[0], _Call):
                        self._settle_call(key[0], key[1], outcome)
                    else:
                        self._finish(key[0], outcome)
                    if self._stop.is_set():
                        raise _Stopped
            except _Stopped:  # sessions still in flight stay claimed: the next start runs them again
                self._reset(PromemError("the service is stopping"), requeue=False)
                return
            except Exception as exc:  # a backend gone, the file busy: fail the waiting calls, requeue, go on
                log.exception("the engine stopped; retrying in %.1f s", self._poll_s)
                self._reset(exc)
                self._stop.wait(self._poll_s)

    def _reset(self, exc: BaseException, *, requeue: bool = True) -> None:
        for call in self._running:
            self._fail_call(call, exc)
        self._running.clear()
        while self._calls:  # popped one by one: a call a request thread appends meanwhile is failed too
            self._fail_call(self._calls.popleft(), exc)
        self._in_flight = 0
        self._users.clear()
        self._claimed.clear()
        if not requeue:
            return
        try:
            self._queue.recover()
        except Exception:  # the claimed rows stay running and are put back at the next start
            log.exception("could not put the claimed sessions back in line")

    def _source(self) -> Iterator[Any]:
        from promem_fast.io import session_from_dict
        from promem_fast.pipeline import session_program

        window = self.engine.window()
        while True:
            if self._stop.is_set():
                raise _Stopped  # out of the engine's loop now, not after the sessions in flight finish
            if self._calls:
                call = self._calls.popleft()
                self._running.append(call)
                for index, (_, make) in enumerate(call.programs):
                    self._in_flight += 1
                    yield (call, index), make
                continue
            if not self._claimed:
                self._claimed.extend(self._queue.claim(window - self._in_flight))
            if self._claimed:
                item = self._claimed.popleft()
                try:
                    session = session_from_dict(item.payload)
                except PromemError as exc:  # checked when accepted; a row edited since fails alone
                    self._queue.finish([(item.seq, str(exc))])
                    continue
                self._in_flight += 1
                self._users[(item.tenant, session.user)] += 1
                self._metrics.window_users(len(self._users))
                yield (item,), (lambda ctx, s=session: session_program(s, ctx))
                continue
            if self._in_flight:
                yield IDLE
            elif self._queue.wakeup.wait(self._poll_s):
                self._queue.wakeup.clear()

    def _settle_call(self, call: _Call, index: int, outcome: Any) -> None:
        call.outcomes[index] = outcome
        call.left -= 1
        if call.left == 0:
            self._running.remove(call)
            call.done.set()

    @staticmethod
    def _fail_call(call: _Call, exc: BaseException) -> None:
        call.outcomes = [exc if o is None else o for o in call.outcomes]
        call.done.set()

    def _finish(self, item: Claimed, outcome: Any) -> None:
        user = (item.tenant, str(item.payload.get("user")))
        self._users[user] -= 1
        if self._users[user] <= 0:
            del self._users[user]
        if isinstance(outcome, BaseException):
            log.warning("session %s of job %s failed: %s", item.session_id, item.job, outcome)
            self._queue.finish([(item.seq, f"{type(outcome).__name__}: {outcome}")])
            self._metrics.session_done(None, ok=False)
        else:
            self._stored.put((item, outcome))

    # ------------------------------------------------------------------------------ the writer
    def _write_loop(self) -> None:
        """Store finished graphs as they come, everything waiting at once, one store call per tenant.

        Graphs that finished while the previous batch was being written are written (and judged for
        updates) together: one batch of update-judging programs for many sessions, not one per session.
        """
        while True:
            first = self._stored.get()
            batch = [first]
            while True:
                try:
                    batch.append(self._stored.get_nowait())
                except queues.Empty:
                    break
            done = [entry for entry in batch if entry is not None]
            if done:
                self._flush(done)
            if None in batch:
                return

    def _flush(self, done: list[tuple[Claimed, MemoryGraph]]) -> None:
        by_tenant: dict[str, list[tuple[Claimed, MemoryGraph]]] = {}
        for item, graph in done:
            by_tenant.setdefault(item.tenant, []).append((item, graph))
        for tenant, group in by_tenant.items():
            try:
                self._write(tenant, [graph for _, graph in group])
                results = [(item, graph, None) for item, graph in group]
            except Exception:  # find the session the store refuses; the others are written one by one
                if self._stop.is_set():  # the engine is gone for update judging: leave them claimed
                    log.info("stopping: %d finished sessions are left to the next start", len(group))
                    continue
                log.exception("could not store %d graphs together; storing them one by one", len(group))
                results = [(item, graph, self._write_one(tenant, graph)) for item, graph in group]
            try:
                self._queue.finish([(item.seq, error) for item, _, error in results])
            except Exception:  # the database is away: the sessions go back in line once their lease lapses
                log.exception("could not mark %d sessions finished; they are claimed again later (stored once)",
                              len(results))
                self._queue.release([item.seq for item, _, _ in results])
                continue
            for _, graph, error in results:
                self._metrics.session_done(graph.stats if error is None else None, ok=error is None)

    def _write_one(self, tenant: str, graph: MemoryGraph) -> str | None:
        try:
            self._write(tenant, [graph])
        except Exception as exc:
            log.exception("could not store the graph of session %s", graph.session_id)
            return f"{type(exc).__name__}: {exc}"
        return None


class EngineGate:
    """What the store's ``answer`` is given as its engine: the worker's engine, reached through the worker.

    Request threads must not drive the engine themselves (the worker's loop owns it), so ``run`` hands the
    programs over and waits; QA requests then share rounds with the extraction in flight.
    """

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self.config = worker.engine.config
        self.services = worker.engine.services

    def run(self, programs: Iterable[tuple[Any, Callable[[Any], Any]]]) -> Iterator[tuple[Any, Any]]:
        return iter(self._worker.call(programs))
