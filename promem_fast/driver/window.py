"""How many sessions to keep in flight when ``max_in_flight`` is 0 (auto): as many as the KV cache holds.

A session's prompts all start with its block (the dialogue, 3-4K tokens for a HaluMem session), which a
prefix cache serves to every role, but only while the block stays cached. With more sessions in flight
than the KV cache holds, sessions evict each other's blocks between their waves and each block is
prefilled again and again (the GPU cost model, ``benchmarks/gpu_model.py``, projects the loss:
``results/gpu_model.json``). So the auto window is the backend's KV cache in tokens divided by a session's
working set, clamped.

The working set is an estimate, :data:`WORKING_SET_TOKENS`: a session's longest prompt (its block plus
one role's instructions and item) with a quarter more for the replies and the prompt parts of the requests
it has in flight at once. For the HaluMem sample on SmolLM2's tokenizer a session's longest prompt with
its reply averages about 3,900 tokens (the stream ``benchmarks/request_stream.py`` records; the cost
model writes the measured figure beside this one, ``working_set_tokens``), so 5,000 tokens. Backends that do not say how large their KV
cache is (``kv_cache_tokens``: vLLM does once its engine has started) get :data:`AUTO_DEFAULT`.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

WORKING_SET_TOKENS = 5_000
"""Estimated KV tokens one session in flight keeps live (longest prompt + 25%)."""

AUTO_DEFAULT = 64
"""The auto window of a backend that states no KV cache size (the cpu profile's fixed window)."""

MIN_WINDOW, MAX_WINDOW = 8, 1024
"""Clamp of the auto window: a small cache still runs a few sessions at once (vLLM then schedules what
fits, the rest waits); a huge one does not hold thousands of session programs in memory."""


def auto_window(kv_cache_tokens: int | None, working_set: int = WORKING_SET_TOKENS) -> int:
    """Sessions in flight for a KV cache of ``kv_cache_tokens`` (None: unknown → :data:`AUTO_DEFAULT`)."""
    if not kv_cache_tokens or kv_cache_tokens <= 0:
        return AUTO_DEFAULT
    return max(MIN_WINDOW, min(MAX_WINDOW, kv_cache_tokens // working_set))


def resolve_window(max_in_flight: int, llm: Any) -> int:
    """``max_in_flight`` as configured, or (0) the auto window of ``llm``, the generation backend."""
    if max_in_flight > 0:
        return max_in_flight
    tokens = getattr(llm, "kv_cache_tokens", None)
    window = auto_window(tokens)
    log.info("max_in_flight auto: %d sessions (%s)", window,
             f"KV cache of {tokens:,} tokens / {WORKING_SET_TOKENS:,} per session" if tokens
             else "the backend states no KV cache size")
    return window


__all__ = ["AUTO_DEFAULT", "MAX_WINDOW", "MIN_WINDOW", "WORKING_SET_TOKENS", "auto_window", "resolve_window"]
