"""Sentence embeddings on the CPU: sentence-transformers vs ONNX Runtime on the shipped all-MiniLM-L6-v2.

Run: ``python -m pytest benchmarks/suites/bench_embed.py --benchmark-only -s -q``.
Texts/s at batch 64 on what the engine embeds: whole HaluMem turns (topic segmentation, grounding) and
short statements (memory entries, events), half each. The ONNX backend's export is cached under
``models/onnx-cache/`` (the first run pays for it outside the timings). Both run on ``PROMEM_BENCH_THREADS``
threads (default 1; the ONNX session is rebuilt with that many intra-op threads). The vectors are checked
to agree. pytest-benchmark times sentence-transformers, the CPU profile's embedder; ``extra_info`` holds
both rates and the ratio.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from benchmarks.common.measure import bench_threads, limit_threads, ort_session, ratio_info, side_by_side
from benchmarks.common.paths import HALUMEM
from benchmarks.common.workload import load_halumem_sessions, nli_pairs, synthetic_sessions
from promem_fast.backends.embed_onnx import OnnxEmbedder, cache_folder
from promem_fast.backends.embed_st import SentenceTransformerEmbedder
from promem_fast.config import EmbedderConfig

BATCH = 64
TEXTS = 64
"""One batch: half whole turns, half short statements."""


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, Any]]:
    st = SentenceTransformerEmbedder(EmbedderConfig(backend="sentence-transformers", device="cpu", batch_size=BATCH))
    onnx = OnnxEmbedder(EmbedderConfig(backend="onnx", device="cpu", batch_size=BATCH))
    if bench_threads() > 0:
        onnx.session = ort_session(cache_folder(onnx.layout.transformer) / "model.onnx", bench_threads())
    with limit_threads(bench_threads()):
        yield {"sentence_transformers": st, "onnx": onnx}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    sessions = load_halumem_sessions(HALUMEM) if HALUMEM.is_file() else synthetic_sessions(4, 3700)
    pairs = nli_pairs(sessions, TEXTS // 2)
    return [turn for turn, _ in pairs] + [statement for _, statement in pairs]


def test_embed_texts_per_second(benchmark: Any, backends: dict[str, Any], texts: list[str]) -> None:
    # Agreement check and warm-up on a few texts of both kinds (a full pass costs seconds on one thread).
    sample = texts[:4] + texts[-4:]
    vectors = {name: b.embed(sample) for name, b in backends.items()}
    cosines = np.sum(vectors["onnx"] * vectors["sentence_transformers"], axis=1)
    assert cosines.min() > 0.9999
    medians = side_by_side({name: (lambda b=b: b.embed(texts)) for name, b in backends.items()}, rounds=2, warmup=0)
    info = ratio_info(medians, len(texts), "texts_per_s")
    info.update(batch=BATCH, threads=bench_threads(), timed_by_pytest_benchmark="sentence_transformers")
    benchmark.extra_info.update(info)
    benchmark.pedantic(backends["sentence_transformers"].embed, args=(texts,), rounds=1, iterations=1)
    slower = next(k for k in info if "_vs_" in k)
    print(f"\nMiniLM batch {BATCH}: sentence-transformers {info['sentence_transformers_texts_per_s']} texts/s, "
          f"onnx {info['onnx_texts_per_s']} texts/s; {slower} = {info[slower]}")
