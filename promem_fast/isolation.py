"""Calling a model backend with fault isolation: one bad request fails alone, a dead backend ends the run.

A batch that raises is halved down to the request that fails on its own, so a single malformed prompt
costs one failed request instead of a whole round of every session in flight. A backend that fails every
request of ``max_failed_batches`` batches in a row, those requests coming from more than one session, is
gone, and :class:`BackendUnavailable` stops the run (the sessions finished so far are already written).
Why more than one session: the continuous driver sends a session's requests as soon as they are posted,
often in a call of their own, so one session with a poisoned prompt could otherwise fail three calls in a
row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Hashable
from typing import Any

from promem_fast.errors import BackendUnavailable, PromemError
from promem_fast.run_summary import RunSummary

log = logging.getLogger(__name__)


class FaultIsolation:
    """Chunks, halves and counts the backend calls of one engine."""

    def __init__(self, max_batch_size: int, max_failed_batches: int) -> None:
        self.max_batch_size = max_batch_size
        self.max_failed_batches = max_failed_batches
        self.failed_batches = 0
        """Batches in a row in which every request failed."""
        self.owners: Collection[Hashable] = ()
        """The sessions the next calls serve (set by the driver); empty: unknown."""
        self._failed_owners: set[Hashable] = set()

    def call(self, kind: str, fn: Callable[[list[Any]], list[Any]], items: list[Any], summary: RunSummary
             ) -> tuple[list[Any], float]:
        """``fn`` over ``items`` in chunks of ``max_batch_size``; a chunk that raises is halved down to the
        failing item. Returns one outcome per item (the result, or the exception that item raised alone) and
        the seconds spent, which are added to ``summary`` with the number of backend calls made."""
        started = time.perf_counter()
        outcomes: list[Any] = []
        step = self.max_batch_size
        for lo in range(0, len(items), step):
            outcomes.extend(self._isolate(kind, fn, items[lo:lo + step], summary))
        failed = sum(isinstance(o, BaseException) for o in outcomes)
        if items and failed == len(items):
            self.failed_batches += 1
            self._failed_owners.update(self.owners)
            if self.failed_batches >= self.max_failed_batches and len(self._failed_owners) != 1:
                raise BackendUnavailable(
                    f"the {kind} backend failed {self.failed_batches} batches in a row; last error: "
                    f"{outcomes[-1]!r}") from outcomes[-1]
        else:
            self.failed_batches = 0
            self._failed_owners.clear()
        seconds = time.perf_counter() - started
        summary.backend_seconds[kind] = summary.backend_seconds.get(kind, 0.0) + seconds
        return outcomes, seconds

    def _isolate(self, kind: str, fn: Callable[[list[Any]], list[Any]], items: list[Any],
                 summary: RunSummary) -> list[Any]:
        summary.backend_calls[kind] = summary.backend_calls.get(kind, 0) + 1
        try:
            out = fn(items)
            if len(out) != len(items):
                raise PromemError(f"{kind} backend returned {len(out)} results for {len(items)} requests")
            return list(out)
        except BackendUnavailable:
            raise
        except Exception as exc:
            if len(items) == 1:
                log.warning("%s request failed: %r", kind, exc)
                return [exc]
            mid = len(items) // 2
            log.info("%s batch of %d failed (%r); splitting", kind, len(items), exc)
            return (self._isolate(kind, fn, items[:mid], summary)
                    + self._isolate(kind, fn, items[mid:], summary))
