"""Top-1 cosine search (cross-reference matrix, grounding): numpy vs FAISS vs torch, side by side.

Run: ``python -m pytest benchmarks/suites/bench_similarity.py --benchmark-only -s -q``.
Two shapes, dimension 384 (MiniLM): the engine's per-session problems, 256 sessions of 100 events against
300 draft entries in one ``top1`` call (each session has its own keys, as in the completeness check), and
one large 10,000 x 10,000 problem. Each library runs on ``PROMEM_BENCH_THREADS`` threads (default 1, see
:func:`report.limit_threads`). All backends are timed interleaved in the same test
(:func:`report.side_by_side`); pytest-benchmark itself times numpy, which ``similarity.backend = "auto"``
uses wherever FAISS sees no GPU. ``extra_info`` holds each backend's queries/s, the fastest one and the
others' slowdown against it. CUDA variants join when torch or FAISS sees a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from benchmarks.common.measure import bench_threads, limit_threads, ratio_info, side_by_side
from promem_fast.backends.sim_faiss import FaissSimilarity
from promem_fast.backends.sim_numpy import NumpySimilarity
from promem_fast.backends.sim_torch import TorchSimilarity
from promem_fast.config import SimilarityConfig

DIM = 384
SHAPES = {
    "per_session_256x100x300": (256, 100, 300),
    "single_10000x10000": (1, 10_000, 10_000),
}
"""name: (pairs in one call, queries per pair, keys per pair)."""
ROUNDS = {"per_session_256x100x300": 5, "single_10000x10000": 2}
"""Interleaved rounds of the comparison (each round runs every backend once)."""
PEDANTIC_ROUNDS = {"per_session_256x100x300": 3, "single_10000x10000": 1}


def _unit_rows(rng: np.random.Generator, rows: int) -> np.ndarray:
    x = rng.standard_normal((rows, DIM), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _pairs(count: int, m: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(_unit_rows(rng, m), _unit_rows(rng, n)) for _ in range(count)]


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, Any]]:
    import torch

    found: dict[str, Any] = {
        "numpy": NumpySimilarity(),
        "torch": TorchSimilarity(SimilarityConfig(backend="torch", device="cpu")),
    }
    if torch.cuda.is_available():
        found["torch_cuda"] = TorchSimilarity(SimilarityConfig(backend="torch", device="cuda"))
    try:  # a GPU machine may lack FAISS (no wheel travels there): the others are still compared
        import faiss
    except ImportError:
        faiss = None
    if faiss is not None:
        found["faiss"] = FaissSimilarity(SimilarityConfig(backend="faiss", device="cpu"))
        if getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
            found["faiss_gpu"] = FaissSimilarity(SimilarityConfig(backend="faiss", device="cuda"))
    with limit_threads(bench_threads()):
        yield found


@pytest.mark.parametrize("shape", list(SHAPES))
def test_top1_side_by_side(benchmark: Any, backends: dict[str, Any], shape: str) -> None:
    count, m, n = SHAPES[shape]
    pairs = _pairs(count, m, n)
    answers = {name: b.top1(pairs) for name, b in backends.items()}  # agreement check and warm-up
    for name, answer in answers.items():
        # Scores, not indices: FAISS and torch treat keys within 1e-5 of the best as tied (lowest index wins).
        for (_, got), (_, want) in zip(answer, answers["numpy"], strict=True):
            np.testing.assert_allclose(got, want, atol=1e-4, err_msg=name)
    medians = side_by_side({name: (lambda b=b: b.top1(pairs)) for name, b in backends.items()}, ROUNDS[shape],
                           warmup=0)
    info = ratio_info(medians, count * m, "queries_per_s")
    info.update(timed_by_pytest_benchmark="numpy", threads=bench_threads())
    benchmark.extra_info.update(info)
    benchmark.pedantic(backends["numpy"].top1, args=(pairs,), rounds=PEDANTIC_ROUNDS[shape], iterations=1)
    rates = ", ".join(f"{name} {count * m / s:,.0f}" for name, s in medians.items())
    slower = ", ".join(f"{k.removesuffix('_vs_' + info['fastest'])} {v}x" for k, v in info.items() if "_vs_" in k)
    print(f"\n{shape}: queries/s {rates}; fastest {info['fastest']} (others slower: {slower})")
