"""Model services, chosen by name from one registry.

Each entry names the protocol it implements, the module that holds it (imported only when chosen, so a
missing heavy library costs nothing until it is asked for) and the pip extra that provides its libraries.
"""

from __future__ import annotations

import importlib
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

Kind = Literal["llm", "nli", "embedder", "similarity", "compressor"]


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
    BackendSpec("llm", "scripted", "promem_fast.testing.llm_scripted:ScriptedLLM", None,
                "deterministic rule-based replies for tests and dry runs of the control flow"),
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
    BackendSpec("nli", "lexical", "promem_fast.testing.nli_lexical:LexicalNLI", None,
                "deterministic content-word overlap checker (tests, dry runs)"),
    BackendSpec("embedder", "sentence-transformers", "promem_fast.backends.embed_st:SentenceTransformerEmbedder",
                "cpu", "any sentence-transformers model; default the all-MiniLM-L6-v2 shipped on PyPI"),
    BackendSpec("embedder", "onnx", "promem_fast.backends.embed_onnx:OnnxEmbedder", "cpu",
                "a sentence-transformers model exported to ONNX, mean pooling on ONNX Runtime"),
    BackendSpec("embedder", "hashing", "promem_fast.testing.embed_hashing:HashingEmbedder", None,
                "deterministic hashed bag of words (tests, dry runs)"),
    BackendSpec("similarity", "numpy", "promem_fast.backends.sim_numpy:NumpySimilarity", None,
                "one matrix product per (queries, keys) pair"),
    BackendSpec("similarity", "faiss", "promem_fast.backends.sim_faiss:FaissSimilarity", "cpu",
                "FAISS inner-product search, on the GPU when FAISS sees one"),
    BackendSpec("similarity", "torch", "promem_fast.backends.sim_torch:TorchSimilarity", "cpu",
                "batched torch matmul, on CUDA when present"),
    BackendSpec("compressor", "llmlingua2", "promem_fast.backends.compress_llmlingua:LLMLingua2Compressor", "cpu",
                "LLMLingua-2 token classification (compression) and encoder attention (LightMem coarse cut)"),
)


def spec(kind: Kind, name: str) -> BackendSpec:
    """The registry entry for ``name``; the error lists the names there are."""
    for entry in BACKENDS:
        if entry.kind == kind and entry.name == name:
            return entry
    names = ", ".join(e.name for e in BACKENDS if e.kind == kind)
    raise ConfigError(f"unknown {kind} backend {name!r}; available: {names}")


def create(kind: Kind, name: str, config: Any) -> Any:
    """Import the backend's module and build it from its config section."""
    entry = spec(kind, name)
    module_name, _, class_name = entry.target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)(config)


__all__ = [
    "BACKENDS", "BackendSpec", "Completion", "Compressor", "Embedder", "GenerationRequest", "LLMBackend", "NLIBackend",
    "NLIResult", "Similarity", "create", "spec",
]
