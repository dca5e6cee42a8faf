"""The round driver: every session in flight advances in lockstep, one backend call per request kind per round.

Each round gathers the unanswered requests of all sessions in flight, sends each kind to its backend as one
batch (chunked at ``max_batch_size``), kinds one after another, and resumes the programs whose requests are
all answered. Backend calls grow with the number of pipeline steps, not with the number of sessions; but a
round lasts as long as its slowest reply, so a GPU idles in each round's tail. Kept (``driver: round``) as
the baseline the continuous driver and the cost model compare against.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from promem_fast.context import RunContext
from promem_fast.driver import calls
from promem_fast.driver.accounting import share
from promem_fast.driver.kinds import KIND_NAMES, Job, Kinds
from promem_fast.driver.settle import Settler
from promem_fast.driver.state import END, IDLE, UNSET, SessionRun, advance, pull, start
from promem_fast.isolation import FaultIsolation
from promem_fast.requests import Program
from promem_fast.run_summary import RunSummary


class RoundDriver:
    """Runs ``(key, make_program)`` pairs round by round; ``(key, value or exception)`` out in input order."""

    def __init__(self, kinds: Kinds, summary: RunSummary) -> None:
        self.kinds = kinds
        self.summary = summary
        config = kinds.config
        self._settler = Settler(config, kinds.services, kinds.observe)
        self._isolation = FaultIsolation(config.max_batch_size, config.max_failed_batches)

    def run(self, programs: Iterable[tuple[Any, Callable[[RunContext], Program[Any]]]]
            ) -> Iterator[tuple[Any, Any]]:
        source = iter(programs)
        order: deque[SessionRun] = deque()
        active: list[SessionRun] = []
        exhausted = False
        while True:
            while not exhausted and len(order) < self.kinds.window():
                item = pull(source)
                exhausted = item is END
                if exhausted or item is IDLE:
                    break
                run = start(item[0], item[1], self.kinds.services)
                order.append(run)
                if not run.done:
                    active.append(run)
            while order and order[0].done:
                done = order.popleft()
                yield done.key, done.outcome
            if not active:
                if exhausted and not order:
                    return
                continue
            self._round(active)
            self.summary.rounds += 1
            still: list[SessionRun] = []
            for run in active:
                if run.ready:
                    advance(run)
                if not run.done:
                    still.append(run)
            active = still

    def _round(self, active: list[SessionRun]) -> None:
        """One call per kind (per LLM backend for generation) over every unanswered request."""
        by_target: dict[Any, list[Job]] = {}
        for run in active:
            for slot, request in enumerate(run.pending):
                if run.results[slot] is UNSET:
                    by_target.setdefault(self.kinds.target(request), []).append(self.kinds.job(run, slot))
        order = list(KIND_NAMES.values())
        for target in sorted(by_target, key=lambda t: order.index(t[0])):
            jobs = by_target[target]
            calls_before = sum(self.summary.backend_seconds.values())
            outcomes = calls.call(self.kinds.services, target[0], jobs, self._isolation, self.summary)
            share(jobs, outcomes, sum(self.summary.backend_seconds.values()) - calls_before)
            for job, outcome in zip(jobs, outcomes):
                self._settler.settle(job, outcome)
