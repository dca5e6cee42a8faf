"""A second, independent PROJECTION of sessions/hour: an analytic roofline of a session's tokens, no replay.

:mod:`gpu_model` replays the request stream step by step on a model of vLLM's scheduler and block pool. This
module asks instead what the GPU must do per session in total and how fast it can at best do it, in closed
form, so the two can be compared (two methods that agree are stronger than one):

- **Necessary tokens** of a session: its prompt tokens not served by a prefix cache that keeps the session's
  own blocks (``request_stream.per_session``: its first prompt computes the session block, later prompts
  only what follows their shared leading run) plus its reply tokens.
- **Compute** per session: 2 x parameters FLOPs per necessary token, plus attention (each computed token
  against the context before it), at the assumed share of the card's FLOP/s.
- **Memory** per session: each reply token reads the KV of its whole context (prompt and reply so far); each
  step reads the weights once, and a session needs ``steps`` = its reply tokens over the decode tokens a step
  carries (``max_num_seqs``, or fewer if the KV cache cannot hold that many sequences' contexts) or its
  tokens over the step's token budget, whichever is more.
- A session's GPU seconds = its linear layers' time + its attention's time + steps x the fixed overhead,
  each part a roofline of its own: the linear layers take max(their FLOPs, the weights read once a step),
  attention max(its FLOPs, the KV its reply tokens read). The two parts add, since a layer runs its matmuls
  and then its attention: the decode tokens' KV reads are not hidden behind the prefill chunks' matmuls
  (they do overlap with other work of the attention kernels, hence the max within the part).

The **compute floor** is the necessary tokens at the rate an 8192^3 bf16 matmul reached on the H200
(perf-facts.md: 769-798 TFLOP/s; 790 taken), nothing else counted: what no schedule can beat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from promem_fast.prefix_cache import PrefixCacheModel

FLOOR_FLOPS = 790e12
"""perf-facts.md: an 8192^3 bf16 matmul on the H200 ran at 769-798 TFLOP/s."""


def session_tokens(waves: Sequence[Sequence[Sequence[Any]]]) -> dict[str, float]:
    """Per session (means over the sample): necessary prefill, reply tokens, KV tokens read by reply tokens,
    attention context of the prefill tokens, requests in flight per wave."""
    prefill = decode = decode_reads = prefill_context = 0.0
    requests = waves_n = 0
    for session in waves:
        cache = PrefixCacheModel()  # the session's own blocks, never evicted (the engine's run statistics' count)
        for wave in session:
            waves_n += 1
            for r in wave:
                requests += 1
                new = cache.admit(r.hashes, r.prompt)
                prefill += new
                prefill_context += new * (r.prompt - new / 2)
                decode += r.completion
                decode_reads += r.completion * (r.prompt + r.completion / 2)
    n = len(waves)
    return {"prefill": prefill / n, "decode": decode / n, "decode_kv_reads": decode_reads / n,
            "prefill_attention_context": prefill_context / n, "requests_per_wave": requests / max(waves_n, 1)}


def floor(tokens: dict[str, float], params: float) -> int:
    """Sessions/hour if every necessary token cost only its 2 x parameters FLOPs at :data:`FLOOR_FLOPS`."""
    return round(3600 * FLOOR_FLOPS / (2 * params * (tokens["prefill"] + tokens["decode"])))


def project(tokens: dict[str, float], *, bandwidth: float, flops: float, weight_bytes: float, params: float,
            kv_bytes_per_token: float, attention: float, overhead_s: float, max_num_seqs: int,
            max_num_batched_tokens: int, kv_cache_tokens: int, window: int) -> dict[str, Any]:
    """Sessions/hour of the roofline (see the module's docstring); ``bandwidth`` and ``flops`` are the
    shares reached, ``attention`` the FLOPs of one token against one context token."""
    p, d = tokens["prefill"], tokens["decode"]
    mean_context = tokens["decode_kv_reads"] / max(d, 1)
    # sequences decoding at once: the seats, the KV cache's room for their contexts, the window's requests
    seqs = max(1.0, min(max_num_seqs, kv_cache_tokens / max(mean_context, 1), window * tokens["requests_per_wave"]))
    steps = max(d / seqs, (p + d) / max_num_batched_tokens)
    linear_compute, linear_memory = 2 * params * (p + d) / flops, steps * weight_bytes / bandwidth
    attention_compute = attention * (tokens["prefill_attention_context"] + tokens["decode_kv_reads"]) / flops
    attention_memory = tokens["decode_kv_reads"] * kv_bytes_per_token / bandwidth
    linear, attended = max(linear_compute, linear_memory), max(attention_compute, attention_memory)
    seconds = linear + attended + steps * overhead_s
    bound = ("compute" if linear_compute >= linear_memory else "memory") + "/" + (
        "compute" if attention_compute >= attention_memory else "memory")
    return {"sessions_per_hour": round(3600 / seconds), "bound": bound,
            "linear_s_per_session": round(linear, 4), "attention_s_per_session": round(attended, 4),
            "compute_s_per_session": round(linear_compute + attention_compute, 4),
            "memory_s_per_session": round(linear_memory + attention_memory, 4),
            "steps_per_session": round(steps, 2), "decoding_sequences": round(seqs, 1)}


__all__ = ["FLOOR_FLOPS", "floor", "project", "session_tokens"]
