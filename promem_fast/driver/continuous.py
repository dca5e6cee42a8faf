"""The continuous driver: each session posts its next requests as soon as its own replies are in.

The scheduler (this module) runs on the caller's thread and owns every session's state; execution runs on
the engine's lanes (:mod:`.lanes`), one thread per backend. :meth:`Scheduler.step` waits for whatever the
lanes finished, settles it (parsing and checking replies while generation goes on), resumes the sessions
whose step is complete and posts their next requests at once, and hands back the sessions that finished;
:meth:`Scheduler.admit` lets new sessions in between steps. Nothing waits for a round: a session never
waits for another session's replies, and no kind of request waits for another kind.

Window and order. ``max_in_flight`` counts sessions in progress. A session that finishes before an
earlier one has been written waits in a reorder buffer; while ``max_reorder`` sessions wait there (0:
``max_in_flight``), no new session is admitted. So output stays in input order, and at most
``max_in_flight + max_reorder`` sessions (programs, their state, finished graphs) are held at any time,
however slow the first of them is.

Determinism. A session's program sees only its own answers, each answer depends only on its request (the
backend contract), and retries reseed by attempt number, so the graphs are the same whatever the timing,
window or batch sizes; only the seconds per stage vary.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from promem_fast.context import RunContext
from promem_fast.driver.accounting import share
from promem_fast.driver.kinds import Job, Kinds
from promem_fast.driver.lanes import Delivery, Lanes
from promem_fast.driver.settle import Settler
from promem_fast.driver.state import END, IDLE, SessionRun, advance, pull, start
from promem_fast.requests import Program
from promem_fast.run_summary import RunSummary

IDLE_WAIT_S = 0.05
"""While the source has nothing new (it yielded IDLE), how long a step waits for answers before the source
is asked again."""


class Scheduler:
    """Sessions in progress and the reorder buffer of one run."""

    def __init__(self, kinds: Kinds, lanes: Lanes, summary: RunSummary) -> None:
        self.kinds = kinds
        self.lanes = lanes
        self.summary = summary
        config = kinds.config
        self.settler = Settler(config, kinds.services, kinds.observe)
        self.max_reorder = config.max_reorder
        self.order: deque[SessionRun] = deque()
        """Admitted sessions not yet handed out, in input order (in progress and finished alike)."""
        self.running = 0
        self.waiting = 0
        """Finished sessions in :attr:`order` (the reorder buffer)."""
        self._reply: queue.SimpleQueue[Delivery] = queue.SimpleQueue()

    @property
    def has_room(self) -> bool:
        window = self.kinds.window()  # the auto window follows the working sets measured as sessions run
        return self.running < window and self.waiting < (self.max_reorder or window)

    def admit(self, key: Any, make: Callable[[RunContext], Program[Any]]) -> None:
        run = start(key, make, self.kinds.services)
        self.order.append(run)
        if run.done:
            self.waiting += 1
        else:
            self.running += 1
            self._post(run, range(len(run.pending)))

    def finished(self) -> Iterator[SessionRun]:
        """Sessions ready to hand out: the finished head of the input order."""
        while self.order and self.order[0].done:
            self.waiting -= 1
            yield self.order.popleft()

    def step(self, timeout: float | None) -> None:
        """Wait (up to ``timeout``; None: until something comes) for answers, then settle all that came."""
        try:
            delivery = self._reply.get(timeout=timeout)
        except queue.Empty:
            return
        self.summary.rounds += 1
        while True:
            self._settle(delivery)
            try:
                delivery = self._reply.get_nowait()
            except queue.Empty:
                return

    def _settle(self, delivery: Delivery) -> None:
        if delivery.fatal is not None:
            raise delivery.fatal
        for kind, n in delivery.calls.items():
            self.summary.backend_calls[kind] = self.summary.backend_calls.get(kind, 0) + n
        for kind, seconds in delivery.backend_seconds.items():
            self.summary.backend_seconds[kind] = self.summary.backend_seconds.get(kind, 0.0) + seconds
        share(delivery.jobs, delivery.outcomes, delivery.seconds)
        retry: dict[int, tuple[SessionRun, list[int]]] = {}
        for job, outcome in zip(delivery.jobs, delivery.outcomes):
            run = job.run
            if not self.settler.settle(job, outcome):
                retry.setdefault(id(run), (run, []))[1].append(job.slot)
            elif run.ready:
                advance(run)
                if run.done:
                    self.running -= 1
                    self.waiting += 1
                else:
                    self._post(run, range(len(run.pending)))
        for run, slots in retry.values():
            self._post(run, slots)

    def _post(self, run: SessionRun, slots: Iterable[int]) -> None:
        """Send the given slots of ``run``'s current step to their lanes."""
        by_target: dict[Hashable, list[tuple[Job, Any]]] = {}
        for slot in slots:
            by_target.setdefault(self.kinds.target(run.pending[slot]), []).append(
                (self.kinds.job(run, slot), self._reply))
        for target, items in by_target.items():
            self.lanes.post(target, items)


class ContinuousDriver:
    """Runs ``(key, make_program)`` pairs on the lanes; ``(key, value or exception)`` out in input order."""

    def __init__(self, kinds: Kinds, lanes: Lanes, summary: RunSummary) -> None:
        self.kinds = kinds
        self.lanes = lanes
        self.summary = summary

    def run(self, programs: Iterable[tuple[Any, Callable[[RunContext], Program[Any]]]]
            ) -> Iterator[tuple[Any, Any]]:
        self.lanes.acquire()
        try:
            yield from self._run(programs)
        finally:
            self.lanes.release()

    def _run(self, programs: Iterable[tuple[Any, Callable[[RunContext], Program[Any]]]]
             ) -> Iterator[tuple[Any, Any]]:
        sched = Scheduler(self.kinds, self.lanes, self.summary)
        source = iter(programs)
        exhausted = False
        while True:
            idle = False
            while not exhausted and sched.has_room:
                item = pull(source)
                exhausted, idle = item is END, item is IDLE
                if exhausted or idle:
                    break
                sched.admit(*item)
            for run in sched.finished():
                yield run.key, run.outcome
            if not sched.running:
                if exhausted and not sched.order:
                    return
                continue
            sched.step(IDLE_WAIT_S if idle else None)
