"""How the suites measure: alternatives timed side by side, libraries held to the same threads, the machine.

Timings from different machines (or from one noisy shared machine at different moments) cannot be compared,
so every suite measures its alternatives side by side in one run (:func:`side_by_side`) and stores the
rates and ratios in ``extra_info`` (:func:`ratio_info`). :func:`machine_info` says on what hardware and
library versions a figure was taken; every result file carries it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LIBRARIES = ("numpy", "torch", "transformers", "tokenizers", "onnxruntime", "faiss-cpu", "sentence-transformers",
             "pytest-benchmark", "vllm")
"""Distributions whose versions decide the figures (the ones not installed are reported as absent)."""


def side_by_side(candidates: dict[str, Callable[[], Any]], rounds: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each candidate, timed interleaved: every round runs each once, in an order rotated
    per round. On a shared machine the load drifts within seconds; interleaving puts every candidate under
    the same drift, so their ratio holds even when the absolute timings do not."""
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            started = time.perf_counter()
            candidates[name]()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(times) for name, times in samples.items()}


THREADS_ENV = "PROMEM_BENCH_THREADS"
"""Threads per library in the suites (default 1; 0 keeps each library's own default)."""


def bench_threads() -> int:
    return int(os.environ.get(THREADS_ENV, "1"))


@contextlib.contextmanager
def limit_threads(n: int) -> Iterator[None]:
    """Cap numpy's BLAS, FAISS's OpenMP and torch at ``n`` threads inside the block (0: leave them).

    Why: on a shared machine with more runnable processes than cores, a multi-threaded library spends its
    time spin-waiting at barriers (a 100 x 300 product took ten times longer on two threads than on one
    here), so a comparison would measure each runtime's spinning, not its code. One thread each is the
    reproducible basis; set ``PROMEM_BENCH_THREADS`` on an idle machine to compare at full width.
    """
    if n <= 0:
        yield
        return
    import torch
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(previous)


def ort_session(path: Path, threads: int) -> Any:
    """A CPU ONNX Runtime session of ``path`` with ``threads`` intra-op threads (0: ORT's default), built like
    the backends build theirs; ORT's thread pool is not reached by :func:`limit_threads`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads > 0:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def ratio_info(medians: dict[str, float], work: float, unit: str) -> dict[str, Any]:
    """``extra_info`` of a comparison: each candidate's rate (``work`` items per second, in ``unit``), the
    fastest one, and how many times slower each other one is than it."""
    fastest = min(medians, key=medians.__getitem__)
    info: dict[str, Any] = {f"{name}_{unit}": round(work / seconds, 1) for name, seconds in medians.items()}
    info["fastest"] = fastest
    for name, seconds in medians.items():
        if name != fastest:
            info[f"{name}_vs_{fastest}"] = round(seconds / medians[fastest], 2)
    return info


def _cpu_model() -> str:
    """``model name`` of the first processor in /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[str]:
    """GPU names from ``nvidia-smi`` (no torch import needed: the report runs on CPU-only machines too)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, GPUs, Python and the versions of the libraries that matter here."""
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": _gpus(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": versions,
    }


