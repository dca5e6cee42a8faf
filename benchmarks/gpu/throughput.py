"""Throughput harness: sessions/hour, tokens/s, seconds per stage and engine overhead of one backend.

    python -m benchmarks.gpu.throughput --backend scripted --sessions 200            # the engine's own overhead
    python -m benchmarks.gpu.throughput --backend transformers --tiny --sessions 8   # a 2-layer random Llama, CPU
    python -m benchmarks.gpu.throughput --backend transformers --random-llama-8b /tmp/llama8b \\
        --sessions 64 --max-in-flight 64 --batch-size 64 --random-embedder /tmp/emb --random-nli /tmp/nli
    python -m benchmarks.gpu.throughput --nli-pairs-per-second --random-nli /tmp/nli  # NLI pairs/s only

Sessions are the real HaluMem-Medium sample's, cycled with fresh ids (``--synthetic`` generates sessions of
``--session-tokens`` instead). ``--random-llama-8b`` builds, once, a randomly initialised model of exactly
Llama-3.1-8B's shape; ``--tiny`` a 2-layer one. Random weights write unparseable text, so the model is wrapped
in :class:`replay.TimedReplay`: every request really runs through the model (its timings and token counts are
the ones reported) and then the reply *text* is replaced by the scripted backend's reply to the same request,
so the pipeline takes realistic branches. With ``ignore_eos`` every reply runs to its role's ``max_tokens``
from :data:`replay.COMPLETION_TOKENS`. ``--model PATH`` runs real weights with real replies instead.

The tokenizer of the random models is trained here on the run's own dialogue text and prompt templates
(byte-level BPE with the special tokens and chat template of ``tiny_models``). A tokenizer trained on
``tiny_models``' generated sentences splits real dialogue into about 2.0 characters a token, against 5.8
for SmolLM2's 49K-entry vocabulary on the same HaluMem text, which would double every prompt; trained on the
dialogue it gives about 5.4 (measured on held-out HaluMem sessions), close to a production tokenizer.

The harness's parts: ``workload`` (the sessions), ``random_models`` (random stand-ins built once),
``replay`` (their cost with working answers), ``throughput_setup`` (the engine configuration) and
``throughput_report`` (the figures); this module runs them from the command line.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import pstats
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.common.measure import limit_threads, machine_info
from benchmarks.common.paths import HALUMEM
from benchmarks.common.workload import (
    HALUMEM_SESSION_TOKENS,
    corpus,
    cycle,
    load_halumem_sessions,
    nli_pairs,
    synthetic_sessions,
)
from benchmarks.gpu.random_models import ROBERTA_LARGE, TINY_ENCODER, prepare_random_nli
from benchmarks.gpu.throughput_report import render, summarize, token_stats
from benchmarks.gpu.throughput_setup import Setup, configure, resolve_device
from promem_fast import Engine
from promem_fast.config import NLIConfig
from promem_fast.types import Session

log = logging.getLogger("throughput")


class Interrupted(BaseException):
    """SIGTERM (a ``timeout`` wrapper): stop the run and still write what was measured. Not an ``Exception``,
    so the engine's fault isolation (which retries failing batches) lets it through."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


class GPUBusy:
    """The GPU's busy fraction over a run, sampled from NVML (``torch.cuda.utilization``: the share of the last
    sample period in which a kernel ran) on a background thread. Absent on the CPU or without NVML."""

    def __init__(self, device: str, period: float = 0.2) -> None:
        self.samples: list[int] = []
        self._period = period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if device == "cuda":
            try:
                import torch

                torch.cuda.utilization()
                self._read = torch.cuda.utilization
                self._thread = threading.Thread(target=self._loop, name="gpu-busy", daemon=True)
            except Exception as exc:  # noqa: BLE001 - NVML missing: the figure is reported absent, not guessed
                log.warning("GPU utilisation not readable (%s): no busy fraction", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self.samples.append(int(self._read()))

    def __enter__(self) -> GPUBusy:
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def fraction(self) -> float | None:
        return round(sum(self.samples) / len(self.samples) / 100, 3) if self.samples else None


def run(setup: Setup, sessions: list[Session], profile_to: Path | None) -> tuple[Engine, bool, pstats.Stats | None]:
    """Extract every session; returns the engine, whether it finished, and the profile if one was asked."""
    engine = Engine(setup.config, llm=setup.llm, nli=setup.nli, embedder=setup.embedder)
    step = max(1, len(sessions) // 10)
    profiler = cProfile.Profile() if profile_to else None
    finished = False
    started = time.perf_counter()
    try:
        if profiler:
            profiler.enable()
        for done, _ in enumerate(engine.extract_stream(sessions), 1):
            if done % step == 0 or done == len(sessions):
                log.info("%d/%d sessions done, %.1f s, %d rounds", done, len(sessions),
                         time.perf_counter() - started, engine.summary.rounds)
        finished = True
    except Interrupted as exc:
        log.warning("interrupted (%s) after %.1f s: writing partial figures", exc, time.perf_counter() - started)
    finally:
        if profiler:
            profiler.disable()
    stats = None
    if profiler and profile_to:
        profiler.dump_stats(str(profile_to))
        stats = pstats.Stats(profiler)
    return engine, finished, stats


def measure_nli(args: argparse.Namespace, sessions: Sequence[Session], texts: Sequence[str], work: Path
                ) -> dict[str, Any]:
    """Pairs/s of the torch NLI backend on a random roberta-large-shaped classifier at several batch sizes."""
    from promem_fast.backends.nli_torch import TorchNLI

    device = resolve_device(args.device)
    shape = TINY_ENCODER if args.tiny else ROBERTA_LARGE
    folder = prepare_random_nli(args.random_nli or work / "nli", shape, texts, device)
    backend = TorchNLI(NLIConfig(backend="torch", model=str(folder), device=device, max_length=256))
    pairs = nli_pairs(sessions, args.nli_pairs)
    windows = backend.encoder.encode(pairs)
    mean_len = sum(len(w.input_ids) for w in windows) / len(windows)
    sizes = args.nli_batch_sizes or ([64, 256] if device == "cuda" else [1, 16, 64])
    result: dict[str, Any] = {"device": device, "shape": shape, "pairs": len(pairs), "windows": len(windows),
                              "mean_window_tokens": round(mean_len, 1), "max_length": 256,
                              "fp16": device == "cuda", "batches": {}, "machine": machine_info()}
    backend.batch_size = max(sizes)
    backend.entail(pairs[: max(sizes)])
    for size in sizes:
        backend.batch_size = size
        if device == "cuda":
            import torch

            torch.cuda.synchronize()
        started = time.perf_counter()
        backend.entail(pairs)
        seconds = time.perf_counter() - started
        result["batches"][str(size)] = {"seconds": round(seconds, 3),
                                        "pairs_per_second": round(len(pairs) / seconds, 1)}
        log.info("NLI batch %d: %.1f pairs/s (%d pairs, %d windows of %.0f tokens on average, %.2f s)", size,
                 len(pairs) / seconds, len(pairs), len(windows), mean_len, seconds)
    return result


def run_driver(setup: Setup, driver: str, sessions: list[Session], args: argparse.Namespace, source: str,
               sizes: dict[str, Any], last: bool) -> dict[str, Any]:
    """One engine run under ``driver`` on the already loaded models, with tallies of its own. The engine closes
    the backends it was handed, so only the last run closes it."""
    setup.config.driver = driver
    for replay in (setup.replay, setup.nli, setup.embedder):
        if replay is not None:
            replay.reset()
    log.info("driver %s: %d sessions", driver, len(sessions))
    with GPUBusy(setup.device) as busy:
        engine, finished, profile = run(setup, sessions, args.cprofile)
    result = summarize(engine, setup, args, source, sizes, finished)
    result["driver"] = driver
    result["gpu_busy_fraction"] = busy.fraction()
    result["gpu_busy_samples"] = len(busy.samples)
    print(render(result))
    if profile is not None:
        profile.sort_stats("tottime").print_stats(15)
    if last or not finished:
        engine.close()
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("scripted", "transformers", "vllm"), default="scripted")
    p.add_argument("--sessions", type=int, default=64, help="sessions to extract (input cycled with fresh ids)")
    p.add_argument("--model", type=Path, help="real model folder or hub id (real replies, no replay)")
    p.add_argument("--random-llama-8b", type=Path, metavar="DIR",
                   help="build once in DIR and run a random-weight model of Llama-3.1-8B's shape")
    p.add_argument("--tiny", action="store_true", help="2-layer random Llama (and tiny random aux models)")
    p.add_argument("--max-in-flight", type=int, default=64)
    p.add_argument("--drivers", nargs="+", choices=("continuous", "round"), default=["continuous"],
                   help="engine drivers to run one after the other on the same loaded models (several: the "
                        "JSON holds one result per driver under 'drivers')")
    p.add_argument("--batch-size", type=int, default=16, help="transformers: prompts per forward pass")
    p.add_argument("--context-length", type=int, help="model window (vllm default 32768; transformers: the model's)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=int, help="CPU threads for torch and BLAS (default: 1 with --tiny, whose "
                   "matrices are too small to split, else the libraries' own; 0 = theirs)")
    p.add_argument("--halumem", type=Path, default=HALUMEM, help="HaluMem JSONL whose sessions are cycled")
    p.add_argument("--synthetic", action="store_true", help="generated HaluMem-shaped sessions instead")
    p.add_argument("--session-tokens", type=int, default=HALUMEM_SESSION_TOKENS,
                   help="synthetic dialogue length in characters/4 (default: the HaluMem sample's mean)")
    p.add_argument("--real-aux", action="store_true", help="CPU: MiniLM embedder and a torch NLI classifier")
    p.add_argument("--random-embedder", type=Path, metavar="DIR", help="build once and use a random MiniLM-shaped "
                   "sentence-transformers model (GPU stand-in for Qwen3-Embedding)")
    p.add_argument("--random-nli", type=Path, metavar="DIR", help="build once and use a random roberta-large-shaped "
                   "NLI classifier on torch")
    p.add_argument("--nli-pairs-per-second", action="store_true", help="only measure NLI pairs/s (--random-nli)")
    p.add_argument("--nli-pairs", type=int, default=2048)
    p.add_argument("--nli-batch-sizes", type=int, nargs="+")
    p.add_argument("--work-dir", type=Path, help="where unnamed random models go (default: a temporary folder)")
    p.add_argument("--cprofile", type=Path, metavar="FILE", help="profile the engine run into FILE (pstats)")
    p.add_argument("--out", type=Path, metavar="FILE.json")
    args = p.parse_args(argv)
    if args.model and (args.random_llama_8b or args.tiny):
        p.error("--model runs real weights; it excludes --random-llama-8b and --tiny")
    if args.backend == "scripted" and (args.model or args.random_llama_8b):
        p.error("--backend scripted takes no model")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("promem_fast").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _on_sigterm)
    with ExitStack() as stack:
        stack.enter_context(limit_threads(args.threads if args.threads is not None else int(args.tiny)))
        work = args.work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="promem-throughput-")))
        if args.synthetic:
            base = synthetic_sessions(min(args.sessions, 64), args.session_tokens)
            source = f"synthetic, {args.session_tokens} tokens (characters/4) asked per session"
        else:
            if not args.halumem.is_file():
                log.error("%s not found: pass --halumem PATH or --synthetic", args.halumem)
                return 2
            base = load_halumem_sessions(args.halumem)
            source = f"HaluMem sample {args.halumem.name}, {len(base)} sessions cycled"
        texts = corpus(base)
        if args.nli_pairs_per_second:
            result = measure_nli(args, base, texts, work)
            print(json.dumps(result["batches"], indent=2))
        else:
            setup = configure(args, texts, work)
            sessions = cycle(base, args.sessions)
            sizes = token_stats(base, setup.llm)
            results: dict[str, Any] = {}
            for driver in args.drivers:
                results[driver] = run_driver(setup, driver, sessions, args, source, sizes,
                                             last=driver == args.drivers[-1])
                result = results[driver] if len(args.drivers) == 1 else {
                    "finished": all(r["finished"] for r in results.values()) and len(results) == len(args.drivers),
                    "drivers": results}
                write(args.out, result)  # after each driver: a run stopped in the next keeps this one's figures
                if not results[driver]["finished"]:
                    break
            return 0 if result["finished"] else 1
        write(args.out, result)
    return 0


def write(path: Path | None, result: dict[str, Any]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        log.info("wrote %s", path)


if __name__ == "__main__":
    raise SystemExit(main())
