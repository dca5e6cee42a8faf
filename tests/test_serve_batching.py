"""Concurrent searches of the service share their query embedding (serve/batching.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from promem_fast.serve.batching import BatchedQueries


class SlowEmbedder:
    """Embeds a text as (its length, its number of words), taking 50 ms per call whatever the batch size, and
    records each call's batch (as a model's forward pass costs about the same for a few short queries)."""

    dim = 2

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.fail = fail

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.05)
        self.batches.append(list(texts))
        if self.fail:
            raise RuntimeError("model gone")
        return np.array([[len(t), len(t.split())] for t in texts], np.float32)


def _concurrently(fn, args: list) -> list:
    out: list = [None] * len(args)
    start = threading.Barrier(len(args))

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = fn(args[i])
        except Exception as exc:  # noqa: BLE001 - the test looks at what each thread got
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def test_sixteen_concurrent_queries_are_embedded_in_few_calls_each_getting_its_own_row() -> None:
    inner = SlowEmbedder()
    batched = BatchedQueries(inner)
    queries = [("word " * (i + 1)).strip() for i in range(16)]
    started = time.perf_counter()
    rows = _concurrently(lambda q: batched.embed_queries([q]), queries)
    seconds = time.perf_counter() - started
    for q, row in zip(queries, rows, strict=True):
        assert row.shape == (1, 2) and row[0].tolist() == [len(q), len(q.split())]
    assert sorted(q for batch in inner.batches for q in batch) == sorted(queries)  # each embedded once
    assert len(inner.batches) <= 3  # one after another, sixteen calls would take 0.8 s
    assert seconds < 0.5
    assert batched.dim == 2  # the rest of the embedder as it is


def test_a_lone_query_is_embedded_at_once_and_an_embedder_error_reaches_every_waiting_search() -> None:
    inner = SlowEmbedder()
    batched = BatchedQueries(inner)
    assert batched.embed_queries(["just one"])[0].tolist() == [8, 2] and inner.batches == [["just one"]]
    failing = BatchedQueries(SlowEmbedder(fail=True))
    got = _concurrently(lambda q: failing.embed_queries([q]), ["a", "b c", "d e f", "g"])
    assert all(isinstance(g, RuntimeError) and str(g) == "model gone" for g in got)
    with pytest.raises(RuntimeError):  # and the next search is not left waiting
        failing.embed_queries(["again"])
