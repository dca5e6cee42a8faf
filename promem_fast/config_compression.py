"""The compression step's settings (``EngineConfig.compression``): LLMLingua-2 over turns before the prompts that
read them (:mod:`promem_fast.backends.compress_llmlingua`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompressionConfig:
    """LLMLingua-2 token compression of turns before the draft and event prompts (off by default)."""

    enabled: bool = False
    rate: float = 0.6
    """Share of tokens kept."""
    model: str | None = None
    """Local folder of the LLMLingua-2 token-classification model."""
    force_tokens: tuple[str, ...] = ()
    """Tokens always kept in addition to names, dates and numbers."""
