"""The word overlap the stand-ins' rules share: how much of one text's content words another text holds."""

from __future__ import annotations

from promem_fast.pipeline.words import content_set, content_words


def coverage(text: str, reference: str) -> float:
    """Share of ``text``'s content words found in ``reference`` (0 when ``text`` has none)."""
    words = content_words(text)
    have = content_set(reference)
    return sum(w in have for w in words) / len(words) if words else 0.0
