"""A question's pool ranked by the hybrid rule: what the answer program and retrieval evaluation both use.

The pool is every unit of the question's history (one memory, or one turn for NativeRAG), each with its
session and date; its vectors are the stored ones and its lexical ranking comes from the retrieval index's
FTS5 table (:class:`~promem_fast.persistence.lexical.PoolLexicon`). A unit shown twice on one date (LoCoMo's
two per-speaker copies of a memory) is ranked once. The rule itself is :mod:`.ranking`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from promem_fast.config_ranking import RankingConfig
from promem_fast.times import iso_time

from .ranking import Query, collapse, fuse
from .when import said_within, window


@dataclass
class Ranked:
    """A pool's best units, best first, and what says whether any of them is relevant at all."""

    order: list[tuple[int, float]] = field(default_factory=list)
    """(pool position, fused score), near-duplicates left out, at most the depth asked for."""
    cosine: dict[int, float] = field(default_factory=dict)
    """Each ranked position's dense cosine with the question."""
    candidates: int = 0
    """Distinct units the question could be answered from."""
    best_cosine: float | None = None
    lexical_matches: int = 0
    """Units sharing a content word with the question (names and stop words left out)."""

    def relevant(self, floor: float) -> bool:
        """Whether anything in the pool bears on the question: a unit at or above the cosine ``floor``, or a
        unit sharing one of its content words. When not, the answer abstains instead of guessing."""
        return self.lexical_matches > 0 or (self.best_cosine is not None and self.best_cosine >= floor)


def _day(value: str | None) -> date | None:
    iso = iso_time(value) if value else None
    return date.fromisoformat(iso[:10]) if iso else None


def rank_pool(question: str, question_time: str | None, query: Query, vector: np.ndarray,
              pool: Sequence[tuple[str, str, str | None]], keys: np.ndarray, lexical: Sequence[int],
              config: RankingConfig, depth: int, owner_of: Callable[[str], str | None] | None = None) -> Ranked:
    """Rank ``pool`` (``(session_id, shown text, date)`` per unit, ``keys`` its vectors) for ``question``.

    ``vector``: the embedding of ``query.text``; ``lexical``: pool positions by BM25, best first; ``owner_of``:
    a session's owner (for the speaker step)."""
    ranked = Ranked()
    if not len(pool):
        return ranked
    scores = keys @ vector
    dense_all = np.argsort(-scores, kind="stable").tolist()
    first: dict[tuple[str | None, str], int] = {}
    same: dict[int, int] = {}
    for i in dense_all:
        _, body, when = pool[i]
        same[i] = first.setdefault((when, body), i)
    dense = [i for i in dense_all if same[i] == i]
    ranked.candidates = len(dense)
    ranked.best_cosine = float(scores[dense[0]])
    lexed = list(dict.fromkeys(same[i] for i in lexical))
    ranked.lexical_matches = len(lexed)
    timed: list[int] = []
    days = window(question, _day(question_time)) if config.when else None
    if days is not None:
        said = {i: iso_time(pool[i][2]) if pool[i][2] else None for i in dense}
        timed = said_within(dense if config.dense else lexed, said.__getitem__, days)
    owner = None if owner_of is None else (lambda i: owner_of(pool[i][0]))
    order = fuse(dense, lexed, config, timed=timed, owner_of=owner, speaker=query.speaker)
    ranked.order = collapse(order, lambda i: keys[i], config, depth, text_of=lambda i: pool[i][1])
    ranked.cosine = {i: float(scores[i]) for i, _ in ranked.order}
    return ranked
