"""Top-1 cosine with numpy: one matrix product per (queries, keys) pair.

For the shapes of one session (tens to hundreds of rows) this beats building any index; see
benchmarks/README.md for the measured crossover against FAISS. Small products run with the BLAS pool
limited to one thread: on a busy 2-core machine a multi-threaded BLAS spends far longer waking its
threads than computing a 30 x 60 product (measured 76 ms vs 5.6 s for 256 such pairs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from promem_fast.backends.base import TIE_TOLERANCE, no_match, prepare_pairs
from promem_fast.config import SimilarityConfig

SMALL_PRODUCT = 1 << 24
"""Multiply-adds under which a product runs single-threaded."""


class NumpySimilarity:
    def __init__(self, config: SimilarityConfig | None = None) -> None:
        self.config = config or SimilarityConfig(backend="numpy")

    def top1(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        from threadpoolctl import threadpool_limits

        results, checked, work = prepare_pairs(pairs)
        small = {i for i in work if checked[i][0].shape[0] * checked[i][1].shape[0] * checked[i][0].shape[1]
                 < SMALL_PRODUCT}
        with threadpool_limits(limits=1, user_api="blas"):
            for i in small:
                results[i] = top1_numpy(*checked[i])
        for i in work:
            if i not in small:
                results[i] = top1_numpy(*checked[i])
        return results


def top1_numpy(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best key per query (lowest index among those within TIE_TOLERANCE); -1 / -inf without keys."""
    m = len(queries)
    if len(keys) == 0 or m == 0:
        return no_match(m)
    scores = queries @ keys.T
    top = scores.max(axis=1)
    best = np.argmax(scores >= (top - TIE_TOLERANCE)[:, None], axis=1).astype(np.int64)
    return best, scores[np.arange(m), best].astype(np.float32)
