"""Query embedding shared by concurrent searches: the queries waiting at one moment go to the model in one call.

A search embeds its query first. Under many clients, one query at a time through the embedder makes each
search wait for every query before it, each a forward pass of its own; a batch of sixteen short queries
costs little more than one. :class:`BatchedQueries` wraps the server's embedder: the first search to ask
embeds what is waiting (its own query and any that arrive meanwhile, up to :data:`MAX_BATCH`), the others
wait for their row. No thread of its own and no timer: a lone query is embedded at once, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

MAX_BATCH = 64
"""Queries embedded in one call at most."""


class BatchedQueries:
    """An embedder whose single-query ``embed_queries`` calls from concurrent threads are batched."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._embed = getattr(embedder, "embed_queries", None) or embedder.embed
        self._ready = threading.Condition()
        self._waiting: list[tuple[str, Future[np.ndarray]]] = []
        self._running = False
        self.calls = 0
        """Calls made to the wrapped embedder (for tests and the benchmark)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != 1:  # a batch already: as it is
            with self._ready:
                self.calls += 1
            return np.asarray(self._embed(list(texts)), np.float32)
        row: Future[np.ndarray] = Future()
        with self._ready:
            self._waiting.append((texts[0], row))
        while not row.done():
            with self._ready:
                # wait while another thread embeds a batch (this query may be in it); lead when none does
                self._ready.wait_for(lambda: row.done() or not self._running)
                if row.done():
                    break
                self._running = True
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                self.calls += 1
            self._run(batch)
        return row.result()[None, :]

    def _run(self, batch: list[tuple[str, Future[np.ndarray]]]) -> None:
        """Embed one batch and hand each waiting search its row (or the embedder's error); then let the next
        waiting thread lead."""
        try:
            vectors = np.asarray(self._embed([text for text, _ in batch]), np.float32)
            for (_, row), vector in zip(batch, vectors, strict=True):
                row.set_result(vector)
        except BaseException as exc:
            for _, row in batch:
                if not row.done():
                    row.set_exception(exc)
        finally:
            with self._ready:
                self._running = False
                self._ready.notify_all()


__all__ = ["MAX_BATCH", "BatchedQueries"]
