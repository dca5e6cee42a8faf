"""The GPU cost model's step time, worked out by hand on round numbers: a step's matmuls and its attention add.

A card of 100 bytes/s and 1,000 FLOP/s runs a model of 10 parameters whose weights are 50 bytes and whose KV
is 1 byte a token (attention FLOPs left at 0, the step overhead at 0), so each figure below is arithmetic.
"""

from __future__ import annotations

from collections import namedtuple

import pytest

from benchmarks.gpu import roofline
from benchmarks.gpu.vllm_blocks import Costs, Scheduler

COSTS = Costs(bandwidth=100.0, flops=1000.0, weight_bytes=50.0, params=10.0, kv_bytes_per_token=1.0,
              attention_flops_per_token_context=0.0, step_overhead_s=0.0)
Req = namedtuple("Req", "hashes prompt completion")


def test_a_prefill_chunk_does_not_hide_the_decode_tokens_kv_reads() -> None:
    sched = Scheduler(capacity_blocks=100, costs=COSTS, max_num_seqs=8, max_num_batched_tokens=1000)
    sched.add(Req([1], 16, 3), "a")
    seconds, _, _ = sched.step()  # a's 16 prompt tokens: the weights' read (0.5 s) outlasts 320 FLOPs
    assert seconds == pytest.approx(0.5)
    sched.add(Req(list(range(100, 110)), 160, 1), "b")
    seconds, _, _ = sched.step()
    # a decodes (reading its 16 tokens of KV: 0.16 s) while b prefills 160 tokens: the matmuls over 161 tokens
    # take 2 x 10 x 161 / 1,000 = 3.22 s, then attention its 0.16 s; overlapped, the step would take 3.22 s
    assert seconds == pytest.approx(3.38)
    assert (sched.compute_bound_s, sched.memory_bound_s, sched.kv_read_s) == pytest.approx((3.22, 0.66, 0.16))


def test_the_roofline_adds_a_sessions_matmuls_and_its_attention() -> None:
    tokens = {"prefill": 100.0, "decode": 10.0, "decode_kv_reads": 1000.0, "prefill_attention_context": 0.0,
              "requests_per_wave": 1.0}
    out = roofline.project(tokens, bandwidth=100.0, flops=1000.0, weight_bytes=50.0, params=10.0,
                           kv_bytes_per_token=1.0, attention=0.0, overhead_s=0.0, max_num_seqs=10,
                           max_num_batched_tokens=1000, kv_cache_tokens=10**6, window=10)
    # ten sequences decode at once, so one step: matmuls 2 x 10 x 110 / 1,000 = 2.2 s (the weights' one read,
    # 0.5 s, is shorter), attention 1,000 KV tokens at 100 bytes/s = 10 s; 12.2 s a session
    assert (out["linear_s_per_session"], out["attention_s_per_session"]) == pytest.approx((2.2, 10.0))
    assert out["sessions_per_hour"] == round(3600 / 12.2) and out["bound"] == "compute/memory"


def test_the_share_bound_says_what_the_replies_could_read_for_60_percent_of_the_floor() -> None:
    from benchmarks.gpu.gpu_model import GPU, KV_VALUES_PER_TOKEN, Assumed, share_bound

    kv_bytes = 2 * KV_VALUES_PER_TOKEN  # bf16
    gpu = GPU("T", bandwidth=100.0 * kv_bytes, flops=1000.0, memory=1e12)
    a = Assumed(bandwidth_efficiency=1.0, compute_efficiency=1.0, step_overhead_s=0.5)
    roof = {"linear_s_per_session": 2.0, "steps_per_session": 2.0}
    # the floor, 1,200 sessions/h, is 3 s a session: at 60% a session may take 5 s, of which the matmuls take 2
    # and two steps' overhead 1, leaving 2 s of KV reads at 100 tokens/s
    out = share_bound(gpu, a, roof, 1200, {"decode_kv_reads": 450.0})
    assert out == {"linear_layers_alone": 1.5, "share_aimed": 0.6, "kv_reads_per_session": 450,
                   "kv_reads_per_session_at_share_aimed": 200}
