"""The compression step's settings (``EngineConfig.compression``): LLMLingua-2 over turns before the prompts that
read them (:mod:`promem_fast.backends.compress_llmlingua`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Speakers = Literal["other", "all"]


@dataclass
class CompressionConfig:
    """LLMLingua-2 token compression of the dialogue the session block shows (off by default)."""

    enabled: bool = False
    rate: float = 0.6
    """Share of tokens kept."""
    model: str | None = None
    """Local folder of the LLMLingua-2 token-classification model."""
    force_tokens: tuple[str, ...] = ()
    """Tokens always kept in addition to names, dates and numbers."""
    speakers: Speakers = "other"
    """Whose messages are compressed. ``other``: every speaker's but the memory owner's, so the owner's own
    words, which memories and details are taken from, stay verbatim, and details (taken from the owner's words
    with ``pipeline.detail_source`` ``speaker``) are read from the session block as without compression; the
    other speaker's lines are context, and in assistant dialogues most of the tokens. ``all``: every message,
    as the paper's Appendix C compresses the raw dialogue; details are then asked from the original turns,
    shown in their own requests."""


def whose_messages(speakers: str | None) -> str:
    """Whose messages ``speakers`` compresses, in words (a record without it, from before the setting, compressed
    every message)."""
    return "the other speaker's" if speakers == "other" else "every speaker's"
