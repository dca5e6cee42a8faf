"""Top-1 cosine with numpy: one matrix product per (queries, keys) pair.

For the shapes of one session (tens to hundreds of rows) this beats building any index; see
benchmarks/README.md for the measured crossover against FAISS.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from promem_fast.config import SimilarityConfig


class NumpySimilarity:
    def __init__(self, config: SimilarityConfig | None = None) -> None:
        self.config = config or SimilarityConfig(backend="numpy")

    def top1(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [top1_numpy(q, k) for q, k in pairs]


def top1_numpy(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best key per query (lowest index on ties); -1 / -inf when there are no keys."""
    m = len(queries)
    if len(keys) == 0 or m == 0:
        return np.full(m, -1, np.int64), np.full(m, -np.inf, np.float32)
    scores = np.asarray(queries, np.float32) @ np.asarray(keys, np.float32).T
    best = np.argmax(scores, axis=1).astype(np.int64)
    return best, scores[np.arange(m), best].astype(np.float32)
