"""The throughput harness's engine configuration: which LLM, embedder, NLI and similarity backends a run uses,
real or random-weight (replayed), on which device, with a note for the report on each choice."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.gpu.random_models import (
    LLAMA_31_8B,
    MINILM,
    ROBERTA_LARGE,
    TINY_ENCODER,
    TINY_LLAMA,
    prepare_random_embedder,
    prepare_random_llama,
    prepare_random_nli,
)
from benchmarks.gpu.replay import COMPLETION_TOKENS, ReplayEmbedder, ReplayNLI, TimedReplay
from promem_fast import EngineConfig
from promem_fast.backends.base import GenerationRequest, LLMBackend
from promem_fast.config import EmbedderConfig, LLMConfig, NLIConfig, SimilarityConfig

log = logging.getLogger("throughput")


@dataclasses.dataclass
class Setup:
    config: EngineConfig
    llm: LLMBackend | None
    """Injected backend (``TimedReplay`` or a real model); ``None`` = built by the engine from the config."""
    replay: TimedReplay | None
    device: str
    notes: list[str]
    nli: ReplayNLI | None = None
    embedder: ReplayEmbedder | None = None
    """Random-weight aux models, injected with their replays; ``None`` = built by the engine from the config."""


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def configure_aux(setup: Setup, args: argparse.Namespace, texts: Sequence[str], work: Path) -> None:
    """Embedder, NLI and similarity: the scripted profile's on the CPU (``--real-aux``: MiniLM and a torch NLI
    classifier), the GPU profile's on CUDA, with random stand-ins (replayed) where the GPU profile needs
    weights that are not here."""
    from promem_fast.backends import create
    from promem_fast.models import entry

    config, device, notes = setup.config, setup.device, setup.notes
    encoder = TINY_ENCODER if args.tiny else None
    gpu = device == "cuda"
    if args.random_embedder:
        folder = prepare_random_embedder(args.random_embedder, encoder or MINILM, texts, device)
        config.embedder = EmbedderConfig(backend="sentence-transformers", model=str(folder), device=device,
                                         batch_size=256 if gpu else 64)
        setup.embedder = ReplayEmbedder(create("embedder", "sentence-transformers", config.embedder),
                                        create("embedder", "hashing", EmbedderConfig(backend="hashing")))
        notes.append(f"embedder: random {'tiny' if encoder else 'MiniLM'}-shaped BERT on {device}, replayed with "
                     "the hashing embedder's vectors (stands in for the GPU profile's Qwen3-Embedding-0.6B, "
                     "about 25x the compute per token)")
    elif gpu and entry("qwen3-embedding-0.6b").locate() is not None:
        config.embedder = EngineConfig.profile("gpu").embedder
        notes.append("embedder: the GPU profile's Qwen3-Embedding-0.6B")
    elif gpu:
        notes.append("embedder: hashing (Qwen3-Embedding-0.6B is not on this machine; pass --random-embedder)")
    elif args.real_aux:
        config.embedder = EmbedderConfig(backend="sentence-transformers", device="cpu")
        notes.append("embedder: all-MiniLM-L6-v2 (sentence-transformers, CPU)")
    else:
        notes.append("embedder: hashing (scripted profile; --real-aux for MiniLM)")

    if args.random_nli or (args.real_aux and not gpu):
        folder = args.random_nli or work / "nli"
        shape = ROBERTA_LARGE if args.random_nli and not args.tiny else TINY_ENCODER
        prepare_random_nli(folder, shape, texts, device)
        config.nli = NLIConfig(backend="torch", model=str(folder), device=device, batch_size=256 if gpu else 32,
                               max_length=256)
        setup.nli = ReplayNLI(create("nli", "torch", config.nli),
                              create("nli", "lexical", NLIConfig(backend="lexical")))
        notes.append(f"nli: random RoBERTa classifier ({shape['layers']} layers, hidden {shape['hidden']}) on "
                     f"torch/{device}, replayed with the lexical checker's labels")
    elif gpu and entry("roberta-large-mnli-onnx").locate() is not None:
        config.nli = EngineConfig.profile("gpu").nli
        notes.append("nli: the GPU profile's roberta-large-mnli on ONNX Runtime")
    elif gpu:
        notes.append("nli: lexical (roberta-large-mnli-onnx is not on this machine; pass --random-nli)")
    else:
        notes.append("nli: lexical (scripted profile)")
    config.similarity = SimilarityConfig(backend="auto", device=device) if gpu else SimilarityConfig(backend="numpy")
    notes.append(f"similarity: {config.similarity.backend} on {device}")


def configure(args: argparse.Namespace, texts: Sequence[str], work: Path) -> Setup:
    device = "cpu" if args.backend == "scripted" else resolve_device(args.device)
    config = EngineConfig.profile("scripted")
    config.max_in_flight = args.max_in_flight
    config.progress = False
    setup = Setup(config, None, None, device, [])
    if args.backend == "scripted":
        setup.notes.append("llm: scripted (deterministic rules; token counts are its characters/4 estimates): "
                           "measures the engine's own overhead")
        configure_aux(setup, args, texts, work)
        return setup

    random_weights = args.model is None
    if random_weights:
        shape, name = (TINY_LLAMA, "tiny") if args.tiny or not args.random_llama_8b else (LLAMA_31_8B, "8b")
        folder = args.random_llama_8b if name == "8b" else (args.random_llama_8b or work / "tiny-llama")
        dtype = "bfloat16" if device == "cuda" else "float32"
        model_path = str(prepare_random_llama(folder, shape, texts, weights=args.backend == "transformers",
                                              dtype=dtype, device=device))
        setup.notes.append(f"llm: random-weight Llama ({'Llama-3.1-8B shape' if name == '8b' else '2-layer tiny'}) "
                           f"at {model_path}, {args.backend} on {device} ({dtype})")
    else:
        model_path = str(args.model)
        setup.notes.append(f"llm: {model_path} on {args.backend}/{device} with its own replies and stops")
    llm_config = LLMConfig(backend=args.backend, model=model_path, device=device, dtype="auto",
                           batch_size=args.batch_size, ignore_eos=random_weights,
                           context_length=args.context_length if args.backend == "transformers"
                           else (args.context_length or 32768))
    if random_weights and args.backend == "vllm":
        llm_config.options = {"load_format": "dummy"}
    config.llm = llm_config
    if random_weights:
        config.pipeline.max_tokens.update(COMPLETION_TOKENS)
    configure_aux(setup, args, texts, work)

    from promem_fast.backends import create

    log.info("loading the %s backend", args.backend)
    started = time.perf_counter()
    model = create("llm", args.backend, llm_config)
    setup.notes.append(f"llm load: {time.perf_counter() - started:.1f} s")
    model.generate([GenerationRequest(messages=({"role": "user", "content": "warm up"},), schema=None,
                                      max_tokens=4)])
    if not random_weights:
        setup.llm = model
        return setup
    setup.llm = setup.replay = TimedReplay(model, chunk=args.batch_size if args.backend == "transformers" else None)
    setup.notes.append("TimedReplay: every request ran through the random-weight model above (its timings and "
                       "token counts are the ones reported; replies forced to max_tokens with ignore_eos), then "
                       "its reply text was replaced by the scripted backend's reply to the same request so the "
                       "pipeline could proceed. These figures are the model's cost, not its memory quality.")
    return setup
