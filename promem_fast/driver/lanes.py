"""Executors: one thread per backend, each taking requests as they come and handing answers back as they finish.

A lane serves one target (one LLM backend, or one of the other request kinds), so generation, NLI and
embedding never wait for each other, and a backend is only ever called from its own lane's thread (the
engine's backends need not be thread-safe). A lane takes everything queued when it is free (at most
``max_batch_size`` per call), calls the backend, and posts the outcomes to the queue of the run that asked;
whatever arrived meanwhile goes in the next call at once, so no call waits for another call's results.

Generation lanes drive a :class:`~promem_fast.backends.base.GenerationStream`: the backend's own
(``open_stream()``: vLLM's engine loop, an HTTP client with hundreds of requests in flight) or
:class:`BatchStream`, which runs the batch ``generate`` of any other backend. Prompts are rendered and
tokenized on the lane's thread as they are submitted, while the backend works on earlier ones.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from promem_fast.backends.base import Completion, GenerationRequest, LLMBackend
from promem_fast.driver.calls import call, prepare_job
from promem_fast.driver.kinds import Job, Kinds
from promem_fast.isolation import FaultIsolation
from promem_fast.run_summary import RunSummary

log = logging.getLogger(__name__)

POLL_S = 0.01
"""How long a generation lane waits in ``complete`` before looking for newly posted requests (streams whose
backend runs on its own, like an HTTP pool, return early when a request finishes)."""


@dataclass
class Delivery:
    """What a lane hands back to a run: outcomes of some of its jobs, or the error that ended the backend."""

    jobs: list[Job]
    outcomes: list[Any]
    seconds: float = 0.0
    calls: dict[str, int] = field(default_factory=dict)
    backend_seconds: dict[str, float] = field(default_factory=dict)
    fatal: BaseException | None = None



class Inbox:
    """Jobs posted to a lane: many producers (the drivers), one consumer (the lane's thread)."""

    def __init__(self) -> None:
        self._items: deque[tuple[Job, Any]] = deque()
        self._cv = threading.Condition()
        self._closed = False

    def put(self, items: list[tuple[Job, Any]]) -> None:
        with self._cv:
            self._items.extend(items)
            self._cv.notify()

    def take(self, limit: int | None, block: bool) -> list[tuple[Job, Any]] | None:
        """Up to ``limit`` jobs (all with None); waits for the first when ``block``. None once closed."""
        with self._cv:
            while block and not self._items and not self._closed:
                self._cv.wait()
            if self._closed:
                return None
            n = len(self._items) if limit is None else min(limit, len(self._items))
            return [self._items.popleft() for _ in range(n)]

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()


class BatchStream:
    """The submit/complete interface over a backend that only has batch ``generate``: each ``complete``
    sends everything submitted so far (at most ``max_batch_size``) as one call, halving on faults."""

    def __init__(self, backend: LLMBackend, isolation: FaultIsolation, owner: Callable[[int], Hashable]) -> None:
        self._backend = backend
        self._isolation = isolation
        self._owner = owner
        """The session a key belongs to (a dead backend is told from one bad session by the sessions failing)."""
        self._pending: list[tuple[int, GenerationRequest]] = []
        self._counts = RunSummary()

    def submit(self, key: int, request: GenerationRequest) -> None:
        self._pending.append((key, request))

    def pending(self) -> int:
        return len(self._pending)

    def complete(self, timeout: float | None) -> list[tuple[int, Completion | BaseException]]:
        step = self._isolation.max_batch_size
        chunk, self._pending = self._pending[:step], self._pending[step:]
        if not chunk:
            return []
        self._isolation.owners = {self._owner(key) for key, _ in chunk}
        outcomes = self._isolation.call("generate", self._backend.generate, [r for _, r in chunk], self._counts)[0]
        return [(key, out) for (key, _), out in zip(chunk, outcomes)]

    def close(self) -> None:
        self._pending.clear()


class Lane:
    """One executor thread for one target."""

    def __init__(self, target: Hashable, kinds: Kinds) -> None:
        self.target = target
        self.kinds = kinds
        self.inbox = Inbox()
        config = kinds.config
        self._isolation = FaultIsolation(config.max_batch_size, config.max_failed_batches)
        self._thread = threading.Thread(target=self._loop, name=f"promem-lane-{target[0]}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.inbox.close()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        try:
            if self.target[0] == "generate":
                self._generate_loop()
            else:
                self._batch_loop()
        except Exception:  # a bug here must not leave runs waiting forever without a word
            log.exception("executor %s stopped", self.target)

    # -------------------------------------------------------------------------- non-generation kinds
    def _batch_loop(self) -> None:
        kind = self.target[0]
        while True:
            taken = self.inbox.take(self._isolation.max_batch_size, block=True)
            if taken is None:
                return
            scratch = RunSummary()
            started = time.perf_counter()
            jobs = [job for job, _ in taken]
            try:
                outcomes = call(self.kinds.services, kind, jobs, self._isolation, scratch)
            except Exception as exc:  # the backend is gone (BackendUnavailable) or the call itself broke
                _deliver_fatal(taken, exc)
                continue
            _deliver(taken, outcomes, time.perf_counter() - started, scratch)

    # -------------------------------------------------------------------------- generation
    def _generate_loop(self) -> None:
        stream: Any = None
        backend: LLMBackend | None = None
        keys = itertools.count()
        waiting: dict[int, tuple[Job, Any]] = {}
        while True:
            taken = self.inbox.take(None, block=not waiting)
            if taken is None:
                if stream is not None:
                    stream.close()
                return
            early: list[tuple[tuple[Job, Any], Any]] = []
            for item in taken:
                job = item[0]
                if backend is None:
                    backend = self.kinds.services.llm(job.run.pending[job.slot].role)  # type: ignore[union-attr]
                if stream is None:
                    opener = getattr(backend, "open_stream", None)
                    stream = opener() if callable(opener) else None
                    if stream is None:  # no stream of its own (or not in this version): its batch generate
                        stream = BatchStream(backend, self._isolation, lambda key: id(waiting[key][0].run))
                try:
                    request = prepare_job(backend, job)
                except Exception as exc:  # too long, or a prompt the tokenizer refuses: this request alone
                    early.append((item, exc))
                    continue
                key = next(keys)
                waiting[key] = item
                stream.submit(key, request)
            if early:
                _deliver([i for i, _ in early], [o for _, o in early], 0.0, RunSummary())
            if not waiting:
                continue
            started = time.perf_counter()
            try:
                finished = stream.complete(POLL_S)
            except Exception as exc:  # the backend died: every request in it fails; a new stream next time
                _deliver_fatal(list(waiting.values()), exc)
                waiting.clear()
                stream.close()
                stream = None
                continue
            if not finished:
                continue
            seconds = time.perf_counter() - started
            scratch = RunSummary(backend_calls={"generate": 1}, backend_seconds={"generate": seconds})
            _deliver([waiting.pop(key) for key, _ in finished], [out for _, out in finished], seconds, scratch)


def _deliver(items: list[tuple[Job, Any]], outcomes: list[Any], seconds: float, scratch: RunSummary) -> None:
    """Post outcomes to the runs that asked, one delivery per run (the call's counters go with the first)."""
    by_reply: dict[int, tuple[Any, Delivery]] = {}
    first = True
    for (job, reply), outcome in zip(items, outcomes):
        entry = by_reply.get(id(reply))
        if entry is None:
            entry = by_reply[id(reply)] = (reply, Delivery([], [], seconds))
            if first:
                entry[1].calls, entry[1].backend_seconds = scratch.backend_calls, scratch.backend_seconds
                first = False
        entry[1].jobs.append(job)
        entry[1].outcomes.append(outcome)
    for reply, delivery in by_reply.values():
        reply.put(delivery)


def _deliver_fatal(items: list[tuple[Job, Any]], exc: BaseException) -> None:
    replies = {id(reply): reply for _, reply in items}
    for reply in replies.values():
        reply.put(Delivery([], [], fatal=exc))


class Lanes:
    """The lanes of one engine, started when a continuous run begins and stopped when the last one ends
    (runs may nest: the store judges updates with an engine run while an extraction run is suspended)."""

    def __init__(self, kinds: Kinds) -> None:
        self.kinds = kinds
        self._lanes: dict[Hashable, Lane] = {}
        self._users = 0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.stop()

    def post(self, target: Hashable, items: list[tuple[Job, Any]]) -> None:
        lane = self._lanes.get(target)
        if lane is None:
            with self._lock:
                lane = self._lanes.get(target)
                if lane is None:
                    lane = self._lanes[target] = Lane(target, self.kinds)
        lane.inbox.put(items)
