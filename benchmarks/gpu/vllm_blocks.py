"""vLLM ≥ 0.12's (v1 engine's) KV block pool and scheduler step, as :mod:`gpu_model` replays a request stream on it.

What is modelled, as vLLM v1 does it (``vllm/v1/core``: ``KVCacheManager``, ``BlockPool``, ``Scheduler``):

- **Shared, pinned prefix blocks.** A full 16-token block is named by its chained hash once it is scheduled;
  a later request whose prompt starts with the same blocks takes them (reference count + 1) instead of
  computing them, also while their first owner is still running. A block with a reference is never evicted.
- **Admission reserves only what is not cached.** A waiting request is admitted when the pool can give it
  the blocks of its prompt beyond its cached leading run, plus its reply; cached blocks of no running request
  (reference count 0) are evicted least recently freed first to make room. (vLLM allocates a request's
  blocks chunk by chunk and preempts when out of room; reserving the rest at once, as here, never needs
  preemption and admits a little later than vLLM would.)
- **Freed in reverse.** A finished request's blocks go to the free queue tail first and head last, so a
  session block shared by every prompt outlives the prompts' own tails.
- **Running first, then waiting.** Each step gives every running sequence its decode token or next prefill
  chunk, and admits waiting requests (first come, first served) while the token budget
  (``max_num_batched_tokens``) and ``max_num_seqs`` leave room.

The step's seconds are its linear layers' time plus its attention's time plus a fixed overhead, each part
bound by the slower of its reads and its FLOPs (:meth:`Costs.kernels`); the constants are in :mod:`gpu_model`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Protocol

BLOCK = 16


class Request(Protocol):
    prompt: int
    completion: int
    hashes: list[int]


@dataclass(frozen=True)
class Costs:
    """What a step costs: bytes/s and FLOP/s reached, the model's shape, the fixed overhead per step."""

    bandwidth: float
    flops: float
    weight_bytes: float
    params: float
    kv_bytes_per_token: float
    attention_flops_per_token_context: float
    """4 x layers x hidden: the attention FLOPs of one query token against one context token."""
    step_overhead_s: float

    def parts(self, tokens: float, kv_tokens: float, attention_flops: float
              ) -> tuple[tuple[float, float], tuple[float, float]]:
        """Seconds of reads and of FLOPs of a step's linear layers over ``tokens`` (the weights read once, 2 x
        parameters FLOPs a token), then of its attention (``kv_tokens`` tokens of KV read, ``attention_flops``)."""
        return ((self.weight_bytes / self.bandwidth, 2 * self.params * tokens / self.flops),
                (kv_tokens * self.kv_bytes_per_token / self.bandwidth, attention_flops / self.flops))

    def kernels(self, tokens: float, kv_tokens: float, attention_flops: float) -> tuple[float, float]:
        """Seconds of a step's two kinds of kernel (:meth:`parts`), each bound by the slower of its reads and
        its FLOPs. The two are added, not overlapped, since a layer runs its matmuls and its attention one
        after the other: a step of large prefill chunks does not hide its decode tokens' KV reads behind its
        matmuls."""
        linear, attention = self.parts(tokens, kv_tokens, attention_flops)
        return max(linear), max(attention)


class BlockPool:
    """Hashed blocks with reference counts, the free queue of cached unreferenced blocks, private blocks."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.refs: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()
        self.private = 0
        """Blocks held by running requests under no shared hash (partial blocks, replies, duplicates)."""
        self.evicted = 0

    @property
    def pinned(self) -> int:
        return len(self.refs) + self.private

    def cached_run(self, hashes: list[int], prompt: int) -> int:
        """The leading blocks of a prompt that are cached (vLLM computes at least the last token)."""
        usable = min(len(hashes), max(prompt - 1, 0) // BLOCK)
        hit = 0
        while hit < usable and (hashes[hit] in self.refs or hashes[hit] in self.free):
            hit += 1
        return hit

    def take(self, hashes: list[int]) -> None:
        for h in hashes:
            if h in self.free:
                del self.free[h]
            self.refs[h] = self.refs.get(h, 0) + 1

    def reserve(self, blocks: int) -> bool:
        """Hold ``blocks`` new blocks, evicting unreferenced cached ones as needed; False if they do not fit."""
        if self.pinned + blocks > self.capacity:
            return False
        while self.pinned + len(self.free) + blocks > self.capacity:
            self.free.popitem(last=False)
            self.evicted += 1
        self.private += blocks
        return True

    def register(self, h: int) -> bool:
        """A private block of a running request now holds the block named ``h``: shared from now on, unless
        that block is cached already (then this copy stays private, as vLLM keeps the first one)."""
        if h in self.refs or h in self.free:
            return False
        self.private -= 1
        self.refs[h] = 1
        return True

    def release(self, shared: list[int], private: int) -> None:
        self.private -= private
        for h in reversed(shared):
            n = self.refs[h] - 1
            if n:
                self.refs[h] = n
            else:
                del self.refs[h]
                self.free[h] = None


@dataclass
class Seq:
    req: Any
    key: Any
    prefill: int
    decode: int
    context: int
    shared: list[int]
    """Hashes this sequence holds a reference to, in prompt order."""
    private: int
    registered: int
    """Leading blocks of the prompt already named in the pool (taken or registered)."""


class Scheduler:
    """Continuous batching with chunked prefill on a :class:`BlockPool`, one step at a time."""

    def __init__(self, capacity_blocks: int, costs: Costs, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.pool = BlockPool(capacity_blocks)
        self.costs = costs
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.waiting: deque[tuple[Any, Any]] = deque()
        self.running: list[Seq] = []
        self.prefilled = self.cached = 0
        self.refused = 0
        """Steps in which the head of the queue waited for blocks (not for the token budget or seats)."""
        self.memory_bound_s = self.kv_read_s = self.compute_bound_s = 0.0
        """Where the steps' seconds went: kernels bound by memory (of which attention reading KV), kernels
        bound by FLOPs (:meth:`Costs.kernels`)."""

    def add(self, req: Any, key: Any) -> None:
        self.waiting.append((req, key))

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _admit(self) -> Seq | None:
        req, key = self.waiting[0]
        hit = self.pool.cached_run(req.hashes, req.prompt)
        total = -(-(req.prompt + req.completion) // BLOCK)
        if not self.pool.reserve(total - hit):
            return None
        self.waiting.popleft()
        self.pool.take(req.hashes[:hit])
        self.cached += hit * BLOCK
        self.prefilled += req.prompt - hit * BLOCK
        seq = Seq(req, key, req.prompt - hit * BLOCK, req.completion, hit * BLOCK, list(req.hashes[:hit]),
                  total - hit, hit)
        self.running.append(seq)
        return seq

    def _register(self, s: Seq, tokens: int) -> None:
        """Name the prompt's full blocks up to ``tokens`` in the pool, as vLLM v1 does when it schedules them
        (a request admitted later in the same step already shares them: within the forward pass each layer
        writes the step's KV before it attends)."""
        full = min(len(s.req.hashes), tokens // BLOCK)
        while s.registered < full:
            h = s.req.hashes[s.registered]
            if self.pool.register(h):
                s.shared.append(h)
                s.private -= 1
            s.registered += 1

    def step(self) -> tuple[float, list[Any], int]:
        """One step: its seconds, the keys of the requests that finished, and the sequences it ran."""
        c = self.costs
        budget = self.budget
        attention_flops = kv_read = 0.0
        tokens = 0
        done: list[Seq] = []
        chunked: list[tuple[Seq, int]] = []
        for s in self.running:
            if s.prefill == 0:
                tokens += 1
                budget -= 1
                kv_read += s.context
                attention_flops += c.attention_flops_per_token_context * s.context
                s.context += 1
                s.decode -= 1
                if s.decode <= 0:
                    done.append(s)
            elif budget > 0:
                chunk = min(s.prefill, budget)
                budget -= chunk
                chunked.append((s, chunk))
                self._register(s, s.context + chunk)
        blocked = False
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            s = self._admit()
            if s is None:
                blocked = True
                break
            chunk = min(s.prefill, budget)
            budget -= chunk
            chunked.append((s, chunk))
            self._register(s, s.context + chunk)
        self.refused += blocked
        for s, chunk in chunked:
            tokens += chunk
            attention_flops += c.attention_flops_per_token_context * chunk * (s.context + chunk / 2)
            kv_read += s.context
            s.context += chunk
            s.prefill -= chunk
        (weights_s, matmuls_s), (kv_s, attention_s) = c.parts(tokens, kv_read, attention_flops)
        linear, attention = max(weights_s, matmuls_s), max(kv_s, attention_s)  # they add (Costs.kernels)
        if weights_s >= matmuls_s:
            self.memory_bound_s += linear
        else:
            self.compute_bound_s += linear
        if kv_s >= attention_s:
            self.memory_bound_s += attention
            self.kv_read_s += attention
        else:
            self.compute_bound_s += attention
        n = len(self.running)
        for s in done:
            self.running.remove(s)
            self.pool.release(s.shared, s.private)
        return linear + attention + c.step_overhead_s, [s.key for s in done], n


__all__ = ["BLOCK", "BlockPool", "Costs", "Scheduler", "Seq"]
