"""NLI on the CPU: ONNX Runtime vs torch for the same exported model, pairs/s at batch 1, 16 and 64.

Run: ``python -m pytest benchmarks/suites/bench_nli.py --benchmark-only -s -q``.
The model is the tiny random RoBERTa classifier of :func:`promem_fast.testing.tiny_nli.build_tiny_nli`, exported with
:func:`promem_fast.models.export_nli_onnx` into a temporary folder, so both backends run the same weights
(their probabilities are checked to agree). Pairs have the shape of hallucination checks with
``pipeline.premise = "speaker"``: a HaluMem user message as premise and one of its sentences as hypothesis
(whole turns would be cut into about 17 windows each by the tiny model's 128-token limit and 600-entry
vocabulary, so the suite would time windowing rather than batching). Both
run on ``PROMEM_BENCH_THREADS`` threads (default 1; the ONNX session is rebuilt with that many intra-op
threads, since ORT's pool is its own). With a model this small the figures weigh tokenisation, batching
and per-call overhead more than matrix products, where roberta-large would be the other way round.
pytest-benchmark times the ONNX backend; ``extra_info`` holds both rates and the ratio.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from benchmarks.common.measure import bench_threads, limit_threads, ort_session, ratio_info, side_by_side
from benchmarks.common.paths import HALUMEM
from benchmarks.common.workload import load_halumem_sessions, nli_pairs, synthetic_sessions
from promem_fast.backends.nli_onnx import OnnxNLI
from promem_fast.backends.nli_torch import TorchNLI
from promem_fast.config import NLIConfig
from promem_fast.models import export_nli_onnx
from promem_fast.testing.tiny_nli import build_tiny_nli

PAIRS = {1: 48, 16: 192, 64: 256}
"""Pairs per call at each batch size (enough batches that per-call set-up does not dominate)."""


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("nli")
    build_tiny_nli(folder / "torch")
    export_nli_onnx(folder / "torch", folder / "onnx")
    onnx = OnnxNLI(NLIConfig(backend="onnx", model=str(folder / "onnx"), device="cpu", fp16=False))
    torch_nli = TorchNLI(NLIConfig(backend="torch", model=str(folder / "torch"), device="cpu", fp16=False))
    if bench_threads() > 0:
        onnx.session = ort_session(folder / "onnx" / "model.onnx", bench_threads())
    with limit_threads(bench_threads()):
        yield {"onnx": onnx, "torch": torch_nli}


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    sessions = load_halumem_sessions(HALUMEM) if HALUMEM.is_file() else synthetic_sessions(4, 3700)
    return nli_pairs(sessions, max(PAIRS.values()), premise="speaker")


@pytest.mark.parametrize("batch", list(PAIRS))
def test_nli_pairs_per_second(benchmark: Any, backends: dict[str, Any], pairs: list[tuple[str, str]],
                              batch: int) -> None:
    chosen = pairs[: PAIRS[batch]]
    for backend in backends.values():
        backend.batch_size = batch
    got = {name: b.entail(chosen) for name, b in backends.items()}  # agreement check and warm-up
    np.testing.assert_allclose([r.scores for r in got["onnx"]], [r.scores for r in got["torch"]], atol=1e-4)
    windows = len(backends["onnx"].encoder.encode(chosen))
    medians = side_by_side({name: (lambda b=b: b.entail(chosen)) for name, b in backends.items()}, rounds=5,
                           warmup=0)
    info = ratio_info(medians, len(chosen), "pairs_per_s")
    info.update(windows_per_pair=round(windows / len(chosen), 2), threads=bench_threads(),
                timed_by_pytest_benchmark="onnx")
    benchmark.extra_info.update(info)
    benchmark.pedantic(backends["onnx"].entail, args=(chosen,), rounds=3, iterations=1)
    slower = next(k for k in info if "_vs_" in k)
    print(f"\nNLI batch {batch}: onnx {info['onnx_pairs_per_s']} pairs/s, torch {info['torch_pairs_per_s']} pairs/s "
          f"({windows / len(chosen):.1f} windows per pair); {slower} = {info[slower]}")
