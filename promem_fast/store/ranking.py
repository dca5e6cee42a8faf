"""The hybrid ranking rule: dense and lexical rankings in, one fused order out (no database in here).

Rule (each step switchable in :class:`~promem_fast.config_ranking.RankingConfig`):

1. **Fusion**: reciprocal rank fusion (Cormack, Clarke and Buettcher 2009). A candidate's score is
   ``sum(1 / (rrf_k + rank))`` over the rankings that hold it (rank 1 = best): the dense ranking (embedder
   cosine), the lexical ranking (BM25) and, when the question names a time, the *timed* ranking (the
   candidates said in that window, in dense order, or lexical order when dense is off). Ranks, not raw scores,
   are fused, so BM25's unbounded scores and cosines in [-1, 1] need no common scale.
2. **Speaker**: when the question names one of the speakers whose memories are searched, every other
   speaker's candidate has its score halved, so the named speaker's memories come first unless another's
   are much better on both sides.
3. **Near-duplicates**: walking the order best first, a candidate whose vector has a cosine of at least
   ``dedup_cosine`` with one already kept, and whose content words are among that one's (or the reverse),
   is left out: a repeat, not a fact that differs by a number or a name.

Ties are broken by the candidate's position in the dense ranking, then its key, so the order is
deterministic. The store (over SQLite FTS5 and its vector index) and the answer program (over a question's
pool of units) both call :func:`fuse`. Fused scores only order; a hit's reported ``score`` stays its cosine
with the question, a figure a reader can compare across questions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from promem_fast.config_ranking import RankingConfig

from promem_fast.persistence.lexical import name_words, terms, words

from .when import without_times

K = TypeVar("K", bound=Hashable)

OTHER_SPEAKER_FACTOR = 0.5
"""What a candidate of a speaker the question does not name keeps of its fused score (step 2)."""


@dataclass(frozen=True)
class Query:
    """A question prepared for ranking: the text to embed, the lexical terms, the named speaker."""

    text: str
    """The question, the owners' names left out when ``names`` is on and its time phrases when ``when`` is on
    (what the dense side embeds)."""
    lexical_text: str
    """The question as the lexical side reads it: its time phrases left out when ``when`` is on (the names
    are left out by ``dropped``)."""
    dropped: frozenset[str]
    """Name words the lexical side leaves out."""
    speaker: str | None
    """The one owner the question names (``speaker`` on), else None."""


def prepare(question: str, owners: Sequence[str], config: RankingConfig) -> Query:
    """The question as each side sees it: ``owners`` are the names of the users whose memories are searched."""
    owners = [o for o in dict.fromkeys(owners) if o]
    named = [o for o in owners if name_words([o]) & set(words(question))]
    speaker = named[0] if config.speaker and len(named) == 1 and len(owners) > 1 else None
    timeless = without_times(question) if config.when else question
    if not config.names:
        return Query(timeless, timeless, frozenset(), speaker)
    drop = name_words(owners)
    kept = [w for w in timeless.split() if not (set(words(w)) - {"s"} and set(words(w)) - {"s"} <= drop)]
    text = " ".join(kept) if kept else timeless
    return Query(text, timeless, frozenset(drop), speaker)


def fuse(dense: Sequence[K], lexical: Sequence[K], config: RankingConfig, *, timed: Sequence[K] = (),
         owner_of: Callable[[K], str | None] | None = None, speaker: str | None = None) -> list[tuple[K, float]]:
    """The candidates of both rankings (best first each) in fused order with their fused scores (steps 1-2)."""
    lists = [ranking for ranking, on in ((dense, config.dense), (lexical, config.lexical), (timed, config.when))
             if on and ranking]
    score: dict[K, float] = {}
    for ranking in lists:
        for rank, key in enumerate(ranking, 1):
            score[key] = score.get(key, 0.0) + 1.0 / (config.rrf_k + rank)
    if speaker is not None and owner_of is not None:
        for key in score:
            if owner_of(key) != speaker:
                score[key] *= OTHER_SPEAKER_FACTOR
    dense_rank = {key: i for i, key in enumerate(dense)}
    last = len(dense_rank)
    return sorted(score.items(), key=lambda item: (-item[1], dense_rank.get(item[0], last), str(item[0])))


def collapse(order: Sequence[tuple[K, float]], vector_of: Mapping[K, np.ndarray] | Callable[[K], np.ndarray | None],
             config: RankingConfig, limit: int, text_of: Callable[[K], str] | None = None) -> list[tuple[K, float]]:
    """The first ``limit`` of ``order`` with near-duplicates of better-ranked candidates left out (step 3).

    With ``text_of``, a near-duplicate must also say nothing the kept one does not: its content words are
    among the kept one's (or the reverse), so "a cook at diner 1" is not taken for "a cook at diner 0"."""
    if not config.dedup:
        return list(order[:limit])
    get = vector_of.get if isinstance(vector_of, Mapping) else vector_of
    kept: list[tuple[K, float]] = []
    vectors: list[np.ndarray] = []
    said: list[frozenset[str]] = []
    for key, value in order:
        vector = get(key)
        content = frozenset(terms(text_of(key))) if text_of is not None else frozenset()
        if vector is not None and vectors:
            close = (np.stack(vectors) @ vector) >= config.dedup_cosine
            if any(c and (text_of is None or content <= w or w <= content) for c, w in zip(close, said, strict=True)):
                continue
        kept.append((key, value))
        if vector is not None:
            vectors.append(np.asarray(vector, np.float32))
            said.append(content)
        if len(kept) >= limit:
            break
    return kept
