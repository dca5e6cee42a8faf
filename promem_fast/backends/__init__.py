"""Model services, chosen by name from one registry.

Each entry names the protocol it implements, the module that holds it (imported only when chosen, so a
missing heavy library costs nothing until it is asked for) and the pip extra that provides its libraries.
:data:`BACKENDS` are the product's own. Other packages add theirs through the entry-point group
:data:`PLUGIN_GROUP` (each entry names a sequence of :class:`BackendSpec`), read the first time a name is
not among those known, or by calling :func:`register`: that is how the test stand-ins of
``promem_fast.testing`` (the ``scripted`` profile's backends) come in, so the product names none of them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from promem_fast.backends.base import (
    Completion,
    Compressor,
    Embedder,
    GenerationRequest,
    LLMBackend,
    NLIBackend,
    NLIResult,
    Similarity,
)
from promem_fast.errors import ConfigError

log = logging.getLogger(__name__)

Kind = Literal["llm", "nli", "embedder", "similarity", "compressor"]

PLUGIN_GROUP = "promem_fast.backends"
"""The entry-point group of backend plugins: ``name = "package.module:SPECS"``, a sequence of BackendSpec."""


@dataclass(frozen=True)
class BackendSpec:
    kind: Kind
    name: str
    target: str
    """``module:Class``; the class takes the kind's config section as its only argument."""
    extra: str | None
    """pip extra with the libraries it needs (``None``: nothing beyond the core install)."""
    summary: str


BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec("llm", "llamacpp", "promem_fast.backends.llm_llamacpp:LlamaCppLLM", "cpu",
                "any GGUF on llama.cpp, JSON-schema grammars; default SmolLM2-135M-Instruct"),
    BackendSpec("llm", "transformers", "promem_fast.backends.llm_transformers:TransformersLLM", "cpu",
                "plain torch generation, batched with left padding, bf16 on CUDA"),
    BackendSpec("llm", "vllm", "promem_fast.backends.llm_vllm:VLLMBackend", "gpu",
                "in-process vllm.LLM, requests fed to its engine loop as they come, structured JSON outputs, prefix caching"),
    BackendSpec("llm", "openai", "promem_fast.backends.llm_openai:OpenAICompatLLM", None,
                "any OpenAI-compatible endpoint (vllm serve, llama.cpp server), 256 requests in flight by default"),
    BackendSpec("nli", "onnx", "promem_fast.backends.nli_onnx:OnnxNLI", "cpu",
                "exported sequence-classification NLI model on ONNX Runtime (CUDA EP fp16 / CPU EP)"),
    BackendSpec("nli", "torch", "promem_fast.backends.nli_torch:TorchNLI", "cpu",
                "the same NLI model in plain torch"),
    BackendSpec("embedder", "sentence-transformers", "promem_fast.backends.embed_st:SentenceTransformerEmbedder",
                "cpu", "any sentence-transformers model; default the all-MiniLM-L6-v2 shipped on PyPI"),
    BackendSpec("embedder", "onnx", "promem_fast.backends.embed_onnx:OnnxEmbedder", "cpu",
                "a sentence-transformers model exported to ONNX, mean pooling on ONNX Runtime"),
    BackendSpec("similarity", "numpy", "promem_fast.backends.sim_numpy:NumpySimilarity", None,
                "one matrix product per (queries, keys) pair"),
    BackendSpec("similarity", "faiss", "promem_fast.backends.sim_faiss:FaissSimilarity", "cpu",
                "FAISS inner-product search, on the GPU when FAISS sees one"),
    BackendSpec("similarity", "torch", "promem_fast.backends.sim_torch:TorchSimilarity", "cpu",
                "batched torch matmul, on CUDA when present"),
    BackendSpec("compressor", "llmlingua2", "promem_fast.backends.compress_llmlingua:LLMLingua2Compressor", "cpu",
                "LLMLingua-2 token classification (compression) and encoder attention (LightMem coarse cut)"),
)


_ADDED: dict[tuple[str, str], BackendSpec] = {}
"""Backends registered by other packages (plugins, the test stand-ins), by (kind, name)."""
_plugins_read = False


def register(specs: Iterable[BackendSpec]) -> None:
    """Add backends to the registry; registering the same entry again changes nothing, another entry under
    a name already taken is refused."""
    for entry in specs:
        taken = _known(entry.kind, entry.name)
        if taken is not None and taken != entry:
            raise ConfigError(f"{entry.kind} backend {entry.name!r} is already {taken.target}, not {entry.target}")
        _ADDED[(entry.kind, entry.name)] = entry


def _known(kind: str, name: str) -> BackendSpec | None:
    return next((e for e in BACKENDS if e.kind == kind and e.name == name), None) or _ADDED.get((kind, name))


def _read_plugins() -> None:
    """Register what the installed packages declare under :data:`PLUGIN_GROUP` (once per process)."""
    global _plugins_read
    if _plugins_read:
        return
    _plugins_read = True
    for point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        try:
            register(point.load())
        except Exception as exc:  # one broken plugin must not hide the product's backends
            log.warning("backend plugin %s (%s) not loaded: %s: %s", point.name, point.value, type(exc).__name__, exc)


def spec(kind: Kind, name: str) -> BackendSpec:
    """The registry entry for ``name`` (the plugins are read when it is none of those known); the error
    lists the names there are."""
    found = _known(kind, name)
    if found is None:
        _read_plugins()
        found = _known(kind, name)
    if found is not None:
        return found
    names = ", ".join(e.name for e in (*BACKENDS, *_ADDED.values()) if e.kind == kind)
    raise ConfigError(f"unknown {kind} backend {name!r}; available: {names} (another package's backends come "
                      f"with that package installed, through the {PLUGIN_GROUP!r} entry points)")


def check_names(config: Any) -> None:
    """Every backend an :class:`~promem_fast.config.EngineConfig` names is one the registry has (an installed
    plugin's included); the error names the field and lists the names there are. Run when the services are
    made, before any model loads, so a misspelt name fails at once, not when its model is first wanted."""
    named = [("llm", "llm", config.llm.backend), *(("llm", f"roles.{r}", c.backend) for r, c in config.roles.items()),
             ("nli", "nli", config.nli.backend), ("embedder", "embedder", config.embedder.backend),
             ("similarity", "similarity", config.similarity.backend)]
    for kind, where, name in named:
        if (kind, name) not in (("nli", "llm"), ("similarity", "auto")):  # the chat model; chosen by the host
            try:
                spec(kind, name)
            except ConfigError as exc:
                raise ConfigError(f"{where}.backend: {exc}") from None


def create(kind: Kind, name: str, config: Any) -> Any:
    """Import the backend's module and build it from its config section."""
    entry = spec(kind, name)
    module_name, _, class_name = entry.target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)(config)


__all__ = [
    "BACKENDS", "PLUGIN_GROUP", "BackendSpec", "Completion", "Compressor", "Embedder", "GenerationRequest",
    "LLMBackend", "NLIBackend", "NLIResult", "Similarity", "check_names", "create", "register", "spec",
]
