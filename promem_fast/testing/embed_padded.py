"""An embedder whose vectors depend on the texts embedded in the same call, as a real sentence model's do.

A transformer pads every text of a batch to the longest one, and although the padding is masked out, matrix
products of another shape round differently: all-MiniLM-L6-v2 gives a text other float32 values beside other
texts than alone. This stand-in makes that dependence large enough for a small test to see: each text's
hashed vector (:mod:`.embed_hashing`) leans toward one fixed direction by how many words shorter it is than
the longest text of its call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from promem_fast.pipeline.words import content_words

from .embed_hashing import HashingEmbedder

LEAN = 0.01
"""How far a text leans toward the padding direction per word of padding (of a unit vector)."""


class PaddingEmbedder(HashingEmbedder):
    """:class:`.embed_hashing.HashingEmbedder`, with each call's texts padded to its longest (see the module)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = super().embed(texts)
        lengths = np.array([len(content_words(t)) for t in texts], np.float32)
        if not len(lengths):
            return out
        padding = np.zeros(self.dim, np.float32)
        padding[0] = 1.0
        out += LEAN * (lengths.max() - lengths)[:, None] * padding
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
