"""How memories are ranked for a question: the switches of the hybrid ranking (``EngineConfig.ranking``).

Each part can be turned off alone (``--set ranking.lexical=false``), so its gain is measured by itself
(``promem eval KIND --retrieval`` reports the ranking with each part left out). The rule that joins them is
in :mod:`promem_fast.store.ranking`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RankingConfig:
    """The parts of the hybrid ranking; every part on by default."""

    dense: bool = True
    """Rank by the embedder's cosine between question and memory."""
    lexical: bool = True
    """Rank by BM25 over the memory's text and details (SQLite FTS5; PostgreSQL's ``ts_rank``), fused with the
    dense ranks."""
    source: bool = True
    """The lexical side also reads each memory's source, the owner's words in the turns it was taken from
    (weighing half its own text): a question asks in the words that were said at least as often as in the
    memory's rewording of them."""
    exchange: bool = True
    """The lexical side also reads the other speaker's words around each memory's turns (what they said in
    the turn, or the message the owner answered and the reply to it), weighing half its own text: "How was
    the pottery class?" names what a question about the bowl the owner made there will name."""
    rrf_k: int = 60
    """Reciprocal rank fusion's constant: a memory scores ``sum(1 / (rrf_k + rank))`` over the rankings it is in
    (Cormack et al. 2009); a larger value flattens the difference between the first ranks."""
    names: bool = True
    """Leave the memory owners' names out of the question on both sides: they are in nearly every memory, so
    they would pull every memory that repeats them (and push the question's embedding toward the name)."""
    speaker: bool = True
    """When the question names one of the speakers whose memories are searched, that speaker's memories rank
    first (a two-speaker conversation keeps one memory home per speaker)."""
    dedup: bool = True
    """Collapse near-duplicates: a memory within ``dedup_cosine`` of a better-ranked one is left out."""
    dedup_cosine: float = 0.97
    """Cosine at and above which two memories count as saying the same thing."""
    when: bool = True
    """Read dates and relative times in the question ("last May", "in 2023", "two weeks ago") as a window
    relative to the question's time; memories said in it are ranked up (a third ranking in the fusion), and
    the time phrase itself is left out of what the dense and lexical sides read."""
    relevance_floor: float = 0.2
    """An answer abstains ("memory holds nothing on it") when no memory reaches this cosine with the
    question (as embedded, names left out) and none shares a content word with it. The cosine is the
    configured embedder's: with all-MiniLM-L6-v2 an unrelated question sits near 0.1 from every memory,
    while "Where does work?" sits at 0.23 from "… took a job as a charge nurse …"."""

    def problems(self) -> list[str]:
        """What is out of range, as messages naming the field (empty when all is well)."""
        checks = [
            (self.rrf_k >= 1, "ranking.rrf_k must be >= 1"),
            (0.0 < self.dedup_cosine <= 1.0, "ranking.dedup_cosine must lie in (0, 1]"),
            (-1.0 <= self.relevance_floor <= 1.0, "ranking.relevance_floor must lie in [-1, 1]"),
            (self.dense or self.lexical, "ranking: at least one of dense and lexical must be on"),
        ]
        return [message for ok, message in checks if not ok]
