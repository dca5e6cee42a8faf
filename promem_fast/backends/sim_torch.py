"""Top-1 cosine search as torch matrix products, on CUDA when torch sees it.

Per-session problems are small (tens to a few hundred rows), so on a GPU one kernel per pair would be
all launch overhead. Pairs of similar shape are therefore padded into one batched product (``bmm``);
padded keys are masked to ``-inf`` so they can never win, padded query rows are dropped afterwards.
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

PAD_WASTE = {"cpu": 1.25, "cuda": 4.0}
"""Largest ratio of padded to real multiply-adds a bucket may reach. On the CPU every padded product is paid
in full, so only near-equal shapes share a ``bmm``; on a GPU the saved launches are worth far more padding."""

MAX_BUCKET_ELEMENTS = 1 << 26
"""Cap on the padded score tensor of one bucket (floats), which bounds its memory (256 MiB)."""


def buckets(shapes: Sequence[tuple[int, int, int]], waste: float) -> list[list[int]]:
    """Group pair positions so each group pads into one ``bmm`` within the waste budget.

    ``shapes`` are ``(m, n, d)`` per pair. Pairs are visited by (d, n, m) so that neighbours have close
    shapes, and a group grows greedily while ``count * max_m * max_n`` stays within ``waste`` times the
    real ``sum(m * n)`` and under :data:`MAX_BUCKET_ELEMENTS`. Pairs of different ``d`` never share a group.
    """
    order = sorted(range(len(shapes)), key=lambda i: (shapes[i][2], shapes[i][1], shapes[i][0]))
    groups: list[list[int]] = []
    current: list[int] = []
    real = max_m = max_n = 0
    for i in order:
        m, n, d = shapes[i]
        if current:
            new_m, new_n = max(max_m, m), max(max_n, n)
            padded = (len(current) + 1) * new_m * new_n
            same_d = shapes[current[0]][2] == d
            if same_d and padded <= waste * (real + m * n) and padded <= MAX_BUCKET_ELEMENTS:
                current.append(i)
                real, max_m, max_n = real + m * n, new_m, new_n
                continue
            groups.append(current)
        current, real, max_m, max_n = [i], m * n, m, n
    if current:
        groups.append(current)
    return groups


class TorchSimilarity:
    """Exact inner-product top-1 via ``torch.mm`` / padded ``torch.bmm``; lowest index wins ties.

    Ties are closed explicitly (the smallest column index within
    :data:`~promem_fast.backends.base.TIE_TOLERANCE` of the row maximum) rather than trusting
    ``max``'s index: its choice among equal values is not promised on every device, and ``mm`` and a padded
    ``bmm`` round the same product differently.
    """

    def __init__(self, config: SimilarityConfig) -> None:
        self._torch: Any = require("torch", "cpu", package="torch==2.13.0")
        cuda = bool(self._torch.cuda.is_available())
        if config.device == "cuda" and not cuda:
            raise ConfigError("similarity.device = 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
        self.device = "cuda" if config.device != "cpu" and cuda else "cpu"
        self._waste = PAD_WASTE[self.device]
        log.info("torch similarity on %s", self.device)

    def top1(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        results, checked, work = prepare_pairs(pairs)
        shapes = [(checked[p][0].shape[0], checked[p][1].shape[0], checked[p][1].shape[1]) for p in work]
        with self._torch.inference_mode():
            for group in buckets(shapes, self._waste):
                members = [work[i] for i in group]
                if len(members) == 1:
                    answers = [self._single(*checked[members[0]])]
                else:
                    answers = self._padded([checked[p] for p in members])
                for position, answer in zip(members, answers, strict=True):
                    results[position] = answer
        return results

    def _first_max(self, scores: Any) -> tuple[Any, Any]:
        """Row maximum and the smallest column index tied with it (last axis)."""
        torch = self._torch
        best = scores.amax(dim=-1)
        columns = torch.arange(scores.shape[-1], device=scores.device)
        tied = scores >= (best - TIE_TOLERANCE).unsqueeze(-1)
        index = torch.where(tied, columns, scores.shape[-1]).amin(dim=-1)
        return index, best

    def _single(self, queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        torch = self._torch
        q = torch.from_numpy(queries).to(self.device)
        k = torch.from_numpy(keys).to(self.device)
        index, best = self._first_max(q @ k.T)
        return index.cpu().numpy().astype(np.int64), best.cpu().numpy().astype(np.float32)

    def _padded(self, members: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """One ``bmm`` over the group: zero-padded rows, padded key columns masked to ``-inf``."""
        torch = self._torch
        count = len(members)
        d = members[0][1].shape[1]
        max_m = max(q.shape[0] for q, _ in members)
        max_n = max(k.shape[0] for _, k in members)
        q_pad = np.zeros((count, max_m, d), dtype=np.float32)
        k_pad = np.zeros((count, max_n, d), dtype=np.float32)
        key_counts = np.empty(count, dtype=np.int64)
        for slot, (q, k) in enumerate(members):
            q_pad[slot, : q.shape[0]] = q
            k_pad[slot, : k.shape[0]] = k
            key_counts[slot] = k.shape[0]
        q_t = torch.from_numpy(q_pad).to(self.device)
        k_t = torch.from_numpy(k_pad).to(self.device)
        scores = torch.bmm(q_t, k_t.transpose(1, 2))
        padding = torch.arange(max_n, device=self.device) >= torch.from_numpy(key_counts).to(self.device)[:, None]
        scores.masked_fill_(padding[:, None, :], float("-inf"))
        index, best = self._first_max(scores)
        index_np = index.cpu().numpy().astype(np.int64)
        best_np = best.cpu().numpy().astype(np.float32)
        return [(index_np[slot, : q.shape[0]].copy(), best_np[slot, : q.shape[0]].copy())
                for slot, (q, _) in enumerate(members)]
