"""A deterministic embedder: hashed bag of stemmed content words, L2-normalised.

Texts sharing words get a high cosine, unrelated texts a cosine near zero, identically in every process
(hashing with CRC32, not Python's salted ``hash``). For tests and dry runs of the control flow.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from promem_fast.pipeline.words import content_words
from promem_fast.config import EmbedderConfig


class HashingEmbedder:
    def __init__(self, config: EmbedderConfig | None = None) -> None:
        self.config = config or EmbedderConfig(backend="hashing")
        self.dim = int(self.config.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in content_words(text):
                h = zlib.crc32(word.encode("utf-8"))
                out[row, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)
