"""Topic segmentation of the turns (§3.2): our embedding similarity cut, and LightMem's attention cut.

The paper follows LightMem for topic clustering; LightMem's cut needs its compression encoder, so the
default is our own similarity cut alone, and :func:`coarse_boundaries` + :func:`combine_boundaries` add
LightMem's cut on top when ``pipeline.segmenter`` asks for it (``lightmem``, or ``auto`` with the model).

A boundary goes between turns i and i+1 where cos(turn_i, turn_{i+1}) < theta. theta starts low and is
raised step by step until at least one boundary appears, so a session always splits where its topic
shifts most, however similar its turns are overall. Segments are then capped in tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def fine_boundaries(vectors: np.ndarray, theta_start: float, theta_step: float, theta_max: float) -> list[int]:
    """Indices i (1 <= i < n) where a new segment starts; empty when no threshold up to theta_max cuts."""
    if len(vectors) < 2:
        return []
    sims = np.einsum("ij,ij->i", vectors[:-1], vectors[1:])
    steps = int(round((theta_max - theta_start) / theta_step)) + 1
    for k in range(max(steps, 1)):
        theta = theta_start + k * theta_step
        cuts = [i + 1 for i in np.flatnonzero(sims < theta - 1e-9).tolist()]
        if cuts:
            return cuts
    return []


def segments_from_boundaries(n: int, boundaries: Sequence[int]) -> list[list[int]]:
    starts = [0, *boundaries]
    ends = [*boundaries, n]
    return [list(range(a, b)) for a, b in zip(starts, ends) if b > a]


def cap_tokens(segments: list[list[int]], tokens: Callable[[int], int], max_tokens: int) -> list[list[int]]:
    """Split segments greedily at turn boundaries so each stays within ``max_tokens`` (a single turn over
    the cap stays alone; the event stage windows it)."""
    out: list[list[int]] = []
    for segment in segments:
        current: list[int] = []
        used = 0
        for index in segment:
            t = tokens(index)
            if current and used + t > max_tokens:
                out.append(current)
                current, used = [], 0
            current.append(index)
            used += t
        if current:
            out.append(current)
    return out


def coarse_boundaries(attention: np.ndarray) -> list[int]:
    """LightMem's coarse cut: turn i starts a segment where its attention to turn i-1 is a local maximum.

    ``attention`` is the row-normalised turn-to-turn attention of the compression encoder; the score of
    turn i (1 <= i < n) is ``attention[i, i-1]`` and a candidate is a strict local maximum of that score
    sequence (an end of the sequence counts when it beats its one neighbour).
    """
    n = len(attention)
    if n < 3:
        return []
    score = np.array([attention[i, i - 1] for i in range(1, n)], np.float64)
    cuts = []
    for k, value in enumerate(score):
        left = score[k - 1] if k > 0 else -np.inf
        right = score[k + 1] if k + 1 < len(score) else -np.inf
        if value > left and value > right:
            cuts.append(k + 1)
    return cuts


def combine_boundaries(fine: Sequence[int], coarse: Sequence[int], within: int = 3) -> list[int]:
    """Fine boundaries that lie within ``within`` turns of a coarse one; all fine ones when there is no
    coarse boundary or none of the fine ones is near one (the coarse cut only ever narrows the fine one)."""
    if not coarse:
        return list(fine)
    kept = [b for b in fine if any(abs(b - c) <= within for c in coarse)]
    return kept or list(fine)
