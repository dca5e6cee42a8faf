"""Uncached prefill: the prompt tokens a vLLM-style prefix cache would not serve.

vLLM's automatic prefix caching keeps the KV cache of whole blocks of ``block_size`` tokens (16 by
default), each named by a hash chained on its parent block's, so two prompts share a block only when they
agree from their first token to the block's last. A new prompt reuses its longest leading run of cached
blocks and computes the rest; vLLM always computes at least the last token (it needs its logits), so a
prompt cached to its end still prefills its last block. Freed blocks wait in vLLM's free-block queue and
the least recently used is evicted first when memory is needed, a request's tail blocks before its head.

:class:`PrefixCacheModel` replays that on token ids: ``admit`` returns the tokens a prompt would prefill
and then caches its blocks as most recently used, the leading ones last (so a shared head outlives the
tails), evicting the least recently used beyond ``capacity_tokens``. Blocks of a prompt are evictable as
soon as it is admitted (vLLM pins a running request's blocks until it finishes): the model counts reuse,
not scheduling. The engine keeps one model per session (:mod:`promem_fast.driver.kinds`), so a session's
count is its own, the same whatever ran beside it; ``benchmarks/request_stream.py`` and
``benchmarks/gpu_model.py`` use the same hashing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK_TOKENS = 16
"""vLLM's default KV block size: the unit prefix caching hashes and reuses."""

DEFAULT_CAPACITY_TOKENS = 32_768
"""The gpu profile's context window: a session's cache holds at least its longest possible prompt. With
the window of sessions sized to the KV cache (``max_in_flight: 0``, auto) each session has about its
working set resident, so its own blocks are not evicted by other sessions; a HaluMem session's distinct
blocks (its block of about 4K tokens and its prompts' own parts) stay well below this."""


def block_hashes(ids: Sequence[int], block_tokens: int = BLOCK_TOKENS) -> list[int]:
    """Chained hashes of the whole ``block_tokens``-token blocks of ``ids`` (a block's hash covers every
    token before it; a partial last block has none: vLLM caches only full blocks). Hashes of integer
    tuples do not depend on ``PYTHONHASHSEED``, so they are the same in every process."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(ids) - len(ids) % block_tokens, block_tokens):
        parent = hash((parent, tuple(ids[start:start + block_tokens])))
        out.append(parent)
    return out


class PrefixCacheModel:
    """An LRU set of block hashes of at most ``capacity_tokens // block_tokens`` blocks."""

    def __init__(self, capacity_tokens: int = DEFAULT_CAPACITY_TOKENS, block_tokens: int = BLOCK_TOKENS) -> None:
        if block_tokens < 1 or capacity_tokens < 0:
            raise ValueError("a prefix cache needs block_tokens >= 1 and capacity_tokens >= 0")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_tokens // block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def admit(self, hashes: Sequence[int], n_tokens: int) -> int:
        """The uncached prefill tokens of a prompt of ``n_tokens`` tokens whose whole blocks hash to
        ``hashes`` (:func:`block_hashes`); its blocks are then cached."""
        usable = min(len(hashes), max(n_tokens - 1, 0) // self.block_tokens)
        hit = 0
        while hit < usable and hashes[hit] in self._blocks:
            hit += 1
        for h in reversed(hashes):
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return n_tokens - hit * self.block_tokens

    def __len__(self) -> int:
        return len(self._blocks)


__all__ = ["BLOCK_TOKENS", "DEFAULT_CAPACITY_TOKENS", "PrefixCacheModel", "block_hashes"]
