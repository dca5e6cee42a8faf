"""How many sessions to keep in flight when ``max_in_flight`` is 0 (auto): as many as the KV cache holds.

A session's prompts all start with its block (the dialogue, 3-4K tokens for a HaluMem session), which a
prefix cache serves to every role, but only while the block stays cached. With more sessions in flight
than the KV cache holds, sessions evict each other's blocks between their waves and each block is
prefilled again and again (the GPU cost model, ``benchmarks/gpu_model.py``, projects the loss:
``results/gpu_model.json``). So the auto window is the backend's KV cache in tokens divided by a session's
working set, clamped.

The working set is measured on the run (:class:`WindowSizer`): what one step of a session holds in a vLLM
KV cache (:func:`step_working_set`: the distinct full blocks of the step's prompts, which vLLM shares
between them, plus each prompt's own partial block and each reply), its peak per session, averaged over
the sessions seen so far. Until :data:`MEASURED_SESSIONS` sessions have been seen the estimate
:data:`WORKING_SET_TOKENS` stands in (a HaluMem session's longest prompt with its reply, plus a quarter).
Backends that do not say how large their KV cache is (``kv_cache_tokens``: vLLM does once its engine has
started) get the window they state (``sessions_in_flight``) or else :data:`AUTO_DEFAULT`.

llama.cpp in the process states 1. It decodes one request after another, so sessions side by side gain nothing
there, and they cost: a prompt of another session than the last starts from a kept state or from scratch
instead of the previous prompt's prefix, and the engine's threads (prompts tokenized ahead, replies parsed) run
beside its decoding loop. Measured on the demo's four sessions (one ``Memory.add_many``, SmolLM2-135M, 2-core
machine, medians of three rounds): 7,716 of 29,920 prompt tokens evaluated and 1 kept state restored with one
session in flight, 10,069 and 11 with all four, 89 s against 107 s (``results/bench_add_many.json``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from promem_fast.prefix_cache import BLOCK_TOKENS

log = logging.getLogger(__name__)

WORKING_SET_TOKENS = 5_000
"""The working set assumed before any session is measured (longest prompt + 25%)."""

MEASURED_SESSIONS = 8
"""Sessions measured before their mean replaces :data:`WORKING_SET_TOKENS`."""

REMEMBERED_SESSIONS = 512
"""The most recent sessions the mean is taken over (the stream's sessions may change in size)."""

AUTO_DEFAULT = 64
"""The auto window of a backend that states no KV cache size (the cpu profile's fixed window)."""

MIN_WINDOW, MAX_WINDOW = 8, 1024
"""Clamp of the auto window: a small cache still runs a few sessions at once (vLLM then schedules what
fits, the rest waits); a huge one does not hold thousands of session programs in memory."""


def auto_window(kv_cache_tokens: int | None, working_set: float = WORKING_SET_TOKENS) -> int:
    """Sessions in flight for a KV cache of ``kv_cache_tokens`` (None: unknown → :data:`AUTO_DEFAULT`)."""
    if not kv_cache_tokens or kv_cache_tokens <= 0:
        return AUTO_DEFAULT
    return max(MIN_WINDOW, min(MAX_WINDOW, int(kv_cache_tokens // max(working_set, 1))))


def step_working_set(prompts: Iterable[tuple[Sequence[int] | None, int, int]]) -> int:
    """KV tokens one step of a session holds while its requests run: ``(block hashes or None, prompt tokens,
    reply tokens)`` per request. Full blocks with the same hash are held once (vLLM shares them); a prompt
    without ids counts whole."""
    blocks: set[int] = set()
    own = 0
    for hashes, n_tokens, reply in prompts:
        if hashes is None:
            own += n_tokens + reply
            continue
        blocks.update(hashes)
        own += n_tokens - BLOCK_TOKENS * len(hashes) + reply
    return BLOCK_TOKENS * len(blocks) + own


class WindowSizer:
    """The auto window of a KV cache of ``kv_cache_tokens``, from the working sets measured so far."""

    def __init__(self, kv_cache_tokens: int) -> None:
        self.kv_cache_tokens = kv_cache_tokens
        self._peaks: OrderedDict[Hashable, int] = OrderedDict()
        self._window = auto_window(kv_cache_tokens)

    @property
    def working_set(self) -> float:
        if len(self._peaks) < MEASURED_SESSIONS:
            return WORKING_SET_TOKENS
        return sum(self._peaks.values()) / len(self._peaks)

    def window(self) -> int:
        return self._window

    def observe(self, session: Hashable, tokens: int) -> None:
        """One step of ``session`` held ``tokens`` (:func:`step_working_set`)."""
        self._peaks[session] = max(tokens, self._peaks.get(session, 0))
        self._peaks.move_to_end(session)
        while len(self._peaks) > REMEMBERED_SESSIONS:
            self._peaks.popitem(last=False)
        window = auto_window(self.kv_cache_tokens, self.working_set)
        if window != self._window:
            log.debug("auto window %d → %d sessions (%.0f KV tokens per session measured)", self._window, window,
                      self.working_set)
            self._window = window


def resolve_window(max_in_flight: int, llm: Any) -> tuple[int, WindowSizer | None]:
    """``max_in_flight`` as configured, or (0) the auto window of ``llm``, the generation backend, with the
    sizer that keeps it fitted to the working sets measured (None where the window stays as it is)."""
    if max_in_flight > 0:
        return max_in_flight, None
    stated = getattr(llm, "sessions_in_flight", None)
    if stated:
        log.info("max_in_flight auto: %d session(s) at a time, as the %s backend states", stated,
                 type(llm).__name__)
        return int(stated), None
    tokens = getattr(llm, "kv_cache_tokens", None)
    if not tokens or tokens <= 0:
        log.info("max_in_flight auto: %d sessions (the backend states no KV cache size)", AUTO_DEFAULT)
        return AUTO_DEFAULT, None
    sizer = WindowSizer(tokens)
    log.info("max_in_flight auto: %d sessions to start (KV cache of %s tokens / %s per session until %d sessions "
             "are measured)", sizer.window(), f"{tokens:,}", f"{WORKING_SET_TOKENS:,}", MEASURED_SESSIONS)
    return sizer.window(), sizer


__all__ = ["AUTO_DEFAULT", "MAX_WINDOW", "MEASURED_SESSIONS", "MIN_WINDOW", "WORKING_SET_TOKENS", "WindowSizer",
           "auto_window", "resolve_window", "step_working_set"]
