"""The model services of one engine: backends built lazily from the config, and the token budget of each role.

Kept apart from the driver so that session programs (through :class:`~promem_fast.context.RunContext`) and
the engine depend on it without depending on each other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from promem_fast.backends import Kind, check_names, create
from promem_fast.backends.base import Compressor, Embedder, LLMBackend, NLIBackend, Similarity
from promem_fast.config import EngineConfig
from promem_fast.errors import PromemError

log = logging.getLogger(__name__)

ANSWER_ROLES = frozenset({"qa", "judge"})
"""Roles of answering and evaluation only: their models are loaded when first asked, not before extraction."""


class Services:
    """The model services of one engine, created lazily from the config (or injected, for tests).

    LLM backends are shared between roles that have the same configuration, so a per-role override
    loads a second model only for the roles that ask for it.
    """

    def __init__(self, config: EngineConfig, *, llm: LLMBackend | None = None, nli: NLIBackend | None = None,
                 embedder: Embedder | None = None, similarity: Similarity | None = None,
                 compressor: Compressor | None = None) -> None:
        check_names(config)
        self.config = config
        self._llms: dict[str, LLMBackend] = {}
        self._by_role: dict[str, LLMBackend] = {}
        self.load_seconds = 0.0
        """Seconds spent building backends (loading models)."""
        self._llm_override = llm
        self._nli = nli
        self._embedder = embedder
        self._similarity = similarity
        self._compressor = compressor
        self._overhead: dict[int, int] = {}
        self._token_cache: dict[tuple[int, str], int] = {}

    def _load(self, kind: Kind, name: str, config: Any) -> Any:
        """Build a backend, timing the model load (kept apart from the engine's own time)."""
        started = time.perf_counter()
        backend = create(kind, name, config)
        self.load_seconds += time.perf_counter() - started
        return backend

    def llm(self, role: str) -> LLMBackend:
        backend = self._by_role.get(role)
        if backend is None:
            cfg = self.config.llm_for(role)
            key = repr(cfg)
            if key not in self._llms:
                if self._llm_override is not None and cfg is self.config.llm:
                    self._llms[key] = self._llm_override
                else:
                    log.info("loading %s LLM backend (model %s)", cfg.backend, cfg.model or "default")
                    self._llms[key] = self._load("llm", cfg.backend, cfg)
            backend = self._by_role[role] = self._llms[key]
        return backend

    @property
    def nli(self) -> NLIBackend:
        if self._nli is None:
            cfg = self.config.nli
            if cfg.backend == "llm":
                raise PromemError("nli.backend = 'llm' is answered by the chat model, not an NLI backend")
            self._nli = self._load("nli", cfg.backend, cfg)
        return self._nli

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._load("embedder", self.config.embedder.backend, self.config.embedder)
        return self._embedder

    @property
    def similarity(self) -> Similarity:
        if self._similarity is None:
            cfg = self.config.similarity
            name = cfg.backend
            if name == "auto":
                name = "faiss" if _faiss_has_gpu() and cfg.device != "cpu" else "numpy"
            self._similarity = self._load("similarity", name, cfg)
        return self._similarity

    @property
    def compressor(self) -> Compressor:
        if self._compressor is None:
            self._compressor = self._load("compressor", "llmlingua2", self.config.compression)
        return self._compressor

    def preload(self) -> None:
        """Build every backend extraction uses now (the chat model of each extraction role, the embedder, the
        NLI model), so a missing library or model stops the run before its first session with the pip command
        that fixes it, instead of failing every session one by one."""
        from promem_fast.config import ROLES
        from promem_fast.errors import BackendUnavailable

        parts: list[tuple[str, Any]] = [(f"{self.config.llm_for(role).backend} chat model", lambda r=role: self.llm(r))
                                        for role in ROLES if role not in ANSWER_ROLES]
        parts.append((f"{self.config.embedder.backend} embedder", lambda: self.embedder))
        if self.config.nli.backend != "llm":
            parts.append((f"{self.config.nli.backend} NLI model", lambda: self.nli))
        for what, build in parts:
            try:
                build()
            except Exception as exc:  # any failure to build is the same news: this backend cannot run here
                raise BackendUnavailable(f"the {what} cannot start: {exc}") from exc

    # -------------------------------------------------------------------------------- token budget
    def context_length(self, role: str) -> int:
        return self.llm(role).context_length

    def count_tokens(self, role: str, messages: Sequence[Any]) -> int:
        return self.llm(role).count_tokens(messages)

    def text_tokens(self, role: str, text: str) -> int:
        """Tokens ``text`` adds to a prompt of ``role`` (the chat template's own tokens subtracted).

        Cached per backend: a session's turns are measured by the detail, event and draft stages alike.
        """
        backend = self.llm(role)
        key = (id(backend), text)
        found = self._token_cache.get(key)
        if found is None:
            ident = id(backend)
            if ident not in self._overhead:
                self._overhead[ident] = backend.count_tokens([{"role": "user", "content": ""}])
            found = max(backend.count_tokens([{"role": "user", "content": text}]) - self._overhead[ident], 0)
            if len(self._token_cache) >= 8192:
                self._token_cache.clear()
            self._token_cache[key] = found
        return found

    def close(self) -> None:
        for backend in [*self._llms.values(), self._nli, self._embedder, self._similarity, self._compressor]:
            closer = getattr(backend, "close", None)
            if callable(closer):
                closer()


def _faiss_has_gpu() -> bool:
    try:
        import faiss  # noqa: F401 - probing only
    except ImportError:
        return False
    return bool(getattr(faiss, "get_num_gpus", lambda: 0)())


