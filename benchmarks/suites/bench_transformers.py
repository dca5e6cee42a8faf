"""The transformers backend on the CPU: generated tokens per second at batch 1 and batch 8, side by side.

Run: ``python -m pytest benchmarks/suites/bench_transformers.py --benchmark-only -s -q``.
A tiny random Llama (2 layers, hidden 64) with a tokenizer trained on the fly, 8 requests of 32 tokens each
(``ignore_eos``, so every request generates all of them), on ``PROMEM_BENCH_THREADS`` torch threads (default
1). Both batch sizes are timed interleaved (:func:`report.side_by_side`); ``extra_info`` holds each one's
tokens/s and the ratio. It moved here from the unit suite, where a speed comparison on a shared machine
is no pass/fail test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


from benchmarks.common.measure import bench_threads, limit_threads, ratio_info, side_by_side
from promem_fast.backends.base import GenerationRequest
from promem_fast.backends.llm_transformers import TransformersLLM
from promem_fast.config import LLMConfig
from promem_fast.testing.tiny_llama import build_random_llama, train_tokenizer

PROMPTS = ["Maya adopted a beagle named Biscuit last Saturday.", "Hi",
           "I moved to Lisbon in May for a job, and my sister Ana visits me every month since then.",
           "What did I say about running?"]
REQUESTS = 8
TOKENS = 32


def test_generated_tokens_per_second_batch_1_vs_8(benchmark: Any, tmp_path: Path) -> None:
    tokenizer = train_tokenizer(tmp_path, vocab_size=384)
    build_random_llama(tmp_path, layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128,
                       vocab_size=len(tokenizer), rope_theta=10000.0, max_position=256, dtype="float32",
                       init_std=0.2)
    requests = [GenerationRequest(messages=({"role": "system", "content": "Answer in JSON."},
                                            {"role": "user", "content": f"{PROMPTS[i % 4]} ({i})"}),
                                  schema=None, max_tokens=TOKENS) for i in range(REQUESTS)]
    backends = {f"batch_{size}": TransformersLLM(LLMConfig(
        backend="transformers", model=str(tmp_path), device="cpu", batch_size=size, n_threads=max(bench_threads(), 1),
        ignore_eos=True)) for size in (1, 8)}
    with limit_threads(bench_threads()):
        medians = side_by_side({name: (lambda b=b: b.generate(requests)) for name, b in backends.items()}, rounds=3)
        benchmark.pedantic(backends["batch_8"].generate, args=(requests,), rounds=2, iterations=1)
    info = ratio_info(medians, REQUESTS * TOKENS, "tokens_per_s")
    info.update(timed_by_pytest_benchmark="batch_8", threads=bench_threads())
    benchmark.extra_info.update(info)
    print(f"\ntiny Llama on CPU: {info['batch_1_tokens_per_s']} tokens/s at batch 1, "
          f"{info['batch_8_tokens_per_s']} at batch 8 (fastest {info['fastest']})")
