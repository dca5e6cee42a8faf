"""Top-1 cosine search with FAISS brute force, on the GPU when FAISS sees one.

The engine asks for many small, independent (queries, keys) problems per call: one per session in flight
(entries against turns for grounding, events against draft entries for the cross-reference check). Those
shapes are far too small for an ANN index to pay off, so every search here is exact (``faiss.knn`` /
``faiss.knn_gpu``, the same arithmetic as an ``IndexFlatIP`` without building one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from promem_fast.deps import require
from promem_fast.backends.base import TIE_TOLERANCE, prepare_pairs
from promem_fast.config import SimilarityConfig
from promem_fast.errors import ConfigError

log = logging.getLogger(__name__)



FIRST_K = 4
"""Candidates fetched per query on the first pass. Only rows whose every candidate ties with the best one
are searched again with a wider k, so exact ties are broken by index without scanning all keys."""

GPU_MIN_WORK = 1 << 22
"""Multiply-adds (m * n * d) below which a problem stays on the CPU even with a GPU: the host-device copies
and the launch cost more than the product itself for per-session shapes."""

SINGLE_THREAD_WORK = 1 << 24
"""Multiply-adds below which a CPU search runs on one OpenMP thread. Per-session problems take microseconds;
waking a thread team for each costs more than that, and on a busy machine (threads waiting for cores) far
more: 256 searches of 30 x 60 x 384 took 6.4 s with the default team and 0.09 s on one thread here."""

GPU_MAX_K = 2048
"""Largest k FAISS's GPU k-selection accepts; wider tie checks fall back to the CPU."""


def resolve_ties(scores: np.ndarray, ids: np.ndarray, can_widen: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pick the lowest index among the candidates tied with the best score (see :data:`TIE_TOLERANCE`).

    Returns ``(index, best score, open_rows)``; ``open_rows`` are rows where every candidate ties with the
    best, so a key outside the candidate list might tie too (and have a lower index): those need a wider
    search.
    """
    best = scores.max(axis=1)
    tied = (scores >= best[:, None] - TIE_TOLERANCE) & (ids >= 0)
    index = np.where(tied, ids, np.iinfo(np.int64).max).min(axis=1).astype(np.int64)
    open_rows = np.flatnonzero(tied[:, -1]) if can_widen else np.empty(0, dtype=np.int64)
    return index, best.astype(np.float32), open_rows


class FaissSimilarity:
    """Exact inner-product top-1 through FAISS.

    How one call's many small pairs are batched: pairs that pass the *same* key array (many query sets
    against one session's turns) are merged, their queries stacked into one search and the results split
    back. Each distinct key matrix is then one brute-force ``knn`` call straight on the caller's buffers
    (no index object, no copy when the input is float32 C-contiguous); FAISS picks its SIMD loop or a BLAS
    product by the number of queries, and small problems run on one thread (:data:`SINGLE_THREAD_WORK`).
    On a GPU, one ``StandardGpuResources`` lives as long as the backend
    (its allocation is the expensive part) and only problems of at least :data:`GPU_MIN_WORK` multiply-adds
    are sent there.

    Ties: FAISS does not promise an order among equal scores, so a few candidates are fetched and the
    lowest index among those tied with the best (within :data:`TIE_TOLERANCE`) wins; if all of them tie,
    the row is searched again with a wider k until the tie is closed (see :func:`resolve_ties`).
    """

    def __init__(self, config: SimilarityConfig) -> None:
        self._faiss: Any = require("faiss", "cpu", package="faiss-cpu")
        gpus = int(self._faiss.get_num_gpus()) if hasattr(self._faiss, "get_num_gpus") else 0
        if config.device == "cuda" and gpus == 0:
            raise ConfigError(
                "similarity.device = 'cuda' but FAISS sees no GPU; install faiss-gpu-cu12 "
                "(pip install 'promem-fast[gpu]') or set similarity.device to 'auto' or 'cpu'"
            )
        self.device = "cuda" if config.device != "cpu" and gpus > 0 else "cpu"
        self._gpu_resources: Any = self._faiss.StandardGpuResources() if self.device == "cuda" else None
        log.info("FAISS similarity on %s (%d GPU(s) visible)", self.device, gpus)

    def top1(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        results, checked, work = prepare_pairs(pairs)
        groups: dict[int, list[int]] = {}
        for position in work:
            # The caller's key object identifies the group: it stays alive for the whole call.
            groups.setdefault(id(pairs[position][1]), []).append(position)
        for members in groups.values():
            keys = checked[members[0]][1]
            stacked = np.concatenate([checked[p][0] for p in members]) if len(members) > 1 else checked[members[0]][0]
            index, score = self._search(stacked, keys)
            start = 0
            for position in members:
                stop = start + checked[position][0].shape[0]
                results[position] = (index[start:stop], score[start:stop])
                start = stop
        return results

    def _search(self, queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-1 of every query row with ties closed by index."""
        n = keys.shape[0]
        k = min(n, FIRST_K)
        scores, ids = self._knn(queries, keys, k)
        index, score, open_rows = resolve_ties(scores, ids, k < n)
        while open_rows.size:
            k = min(n, k * 16)
            scores, ids = self._knn(np.ascontiguousarray(queries[open_rows]), keys, k)
            wide_index, wide_score, still_open = resolve_ties(scores, ids, k < n)
            index[open_rows] = wide_index
            score[open_rows] = wide_score
            open_rows = open_rows[still_open]
        return index, score

    def _knn(self, queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        faiss = self._faiss
        work = queries.shape[0] * keys.shape[0] * keys.shape[1]
        if self._gpu_resources is not None and work >= GPU_MIN_WORK and k <= GPU_MAX_K:
            scores, ids = faiss.knn_gpu(self._gpu_resources, queries, keys, k, metric=faiss.METRIC_INNER_PRODUCT)
        elif work < SINGLE_THREAD_WORK:
            # The OpenMP thread count is a per-thread setting, so this does not disturb other callers.
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                scores, ids = faiss.knn(queries, keys, k, metric=faiss.METRIC_INNER_PRODUCT)
            finally:
                faiss.omp_set_num_threads(threads)
        else:
            scores, ids = faiss.knn(queries, keys, k, metric=faiss.METRIC_INNER_PRODUCT)
        return np.asarray(scores, dtype=np.float32), np.asarray(ids, dtype=np.int64)
