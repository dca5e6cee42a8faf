"""A PROJECTION, not a measurement: sessions/hour of the engine on one GPU under a vLLM-like scheduler model.

    python -m benchmarks.gpu.gpu_model [--sessions 1000] [--out benchmarks/results/gpu_model.json]

It replays the engine's own LLM request stream (:mod:`request_stream`: per session, waves of requests whose
replies the next wave needs) for HaluMem-sized sessions (the 29 sample sessions cycled, each copy with its
own cache salt so copies share no prefix) on a discrete-step model of vLLM's scheduler: continuous batching
with chunked prefill (``max_num_batched_tokens`` per step, at most ``max_num_seqs`` sequences), a KV cache of
the GPU's capacity with automatic prefix caching (16-token chained block hashes, LRU eviction), and a step
time of max(memory time, compute time) plus a fixed overhead: memory time reads the bf16 weights once and
the KV of every token attended; compute time is 2 x parameters FLOPs per token plus attention. The figures
of the accelerators and of Llama-3.1-8B are the published ones in the project's perf-facts; the efficiency
factors and step overhead below are assumptions, written to the results file for a real GPU to check.

Two drivers, fed the same stream: ``round`` (today's engine: every round sends each session's current wave,
cut into blocking calls of at most ``max_batch_size`` requests, and waits for the slowest reply; the CPU work
of the round, the engine's seconds per request as measured here, runs while the GPU waits; a variant
without those CPU phases isolates what the barriers and the stream cost) and ``continuous`` (each
session posts its next wave as soon as its own replies are in; CPU work overlaps the GPU), the latter with
a fixed window of ``Assumed.window`` sessions and with the engine's auto window (``max_in_flight: 0``, the
gpu profile's: :func:`promem_fast.driver.window.auto_window` of the card's KV cache).
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import json
import sys
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import HALUMEM
from benchmarks.gpu.request_stream import BLOCK_TOKENS, Req, commit, load, record, smollm2_tokenizer
from benchmarks.tools import figures
from promem_fast.driver.window import WORKING_SET_TOKENS, auto_window


@dataclass(frozen=True)
class GPU:
    name: str
    bandwidth: float
    """HBM bytes/s (spec)."""
    flops: float
    """Dense bf16 FLOP/s (spec)."""
    memory: float
    """Bytes of HBM."""


GPUS = (GPU("H200", 4.8e12, 989e12, 141e9), GPU("H100", 3.35e12, 989e12, 80e9), GPU("A800", 2.0e12, 312e12, 80e9))
"""perf-facts.md: spec figures (H200 SXM, H100 SXM, A800 80GB)."""

PARAMS = 8.03e9
WEIGHT_BYTES = 2 * PARAMS
LAYERS, HIDDEN = 32, 4096
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
"""Llama-3.1-8B in bf16 (perf-facts.md): 128 KiB of K and V per token."""


@dataclass(frozen=True)
class Assumed:
    """The model's assumptions (not published figures): what a real GPU run should check."""

    bandwidth_efficiency: float = 0.85
    """Share of spec bandwidth a decode step reaches (the H200's device copy moved about 4.3 of 4.8 TB/s)."""
    compute_efficiency: float = 0.6
    """Share of spec bf16 FLOP/s a mixed prefill step reaches (an 8192^3 matmul reached 0.78-0.81)."""
    step_overhead_s: float = 0.003
    """Scheduler, sampling and structured-output work per step."""
    gpu_memory_utilization: float = 0.80
    """The gpu profile's share of memory for weights and KV (the rest for NLI and embedding models)."""
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_batch_size: int = 4096
    """The round driver's cap on requests per blocking call (EngineConfig.max_batch_size)."""
    window: int = 512
    """Sessions in flight of the ``continuous`` row: a fixed window (the gpu profile's before it became auto);
    the ``continuous_auto_window`` row uses the engine's own auto window."""


@dataclass
class _Seq:
    req: Req
    key: Any
    prefill: int
    decode: int
    context: int


class Scheduler:
    """vLLM-like continuous batching with chunked prefill and a prefix cache, one step at a time."""

    def __init__(self, gpu: GPU, a: Assumed) -> None:
        self.gpu, self.a = gpu, a
        kv_tokens = (gpu.memory * a.gpu_memory_utilization - WEIGHT_BYTES) / KV_BYTES_PER_TOKEN
        self.capacity = int(kv_tokens // BLOCK_TOKENS)
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.waiting: deque[tuple[Req, Any]] = deque()
        self.running: list[_Seq] = []
        self.held = 0
        self.prefilled = self.cached = 0

    def add(self, req: Req, key: Any) -> None:
        self.waiting.append((req, key))

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.a.max_num_seqs:
            req, key = self.waiting[0]
            need = -(-(req.prompt + req.completion) // BLOCK_TOKENS)
            if self.held + need > self.capacity:
                break
            self.waiting.popleft()
            hit = 0
            for h in req.hashes:
                if h not in self.cache:
                    break
                hit += 1
            for h in req.hashes:
                self.cache[h] = None
                self.cache.move_to_end(h)
            while len(self.cache) > self.capacity:
                self.cache.popitem(last=False)
            self.held += need
            self.cached += hit * BLOCK_TOKENS
            self.prefilled += req.prompt - hit * BLOCK_TOKENS
            self.running.append(_Seq(req, key, req.prompt - hit * BLOCK_TOKENS, req.completion, hit * BLOCK_TOKENS))

    def step(self) -> tuple[float, list[Any], int]:
        """One step: its seconds, the keys of the requests that finished, and the sequences it ran."""
        self._admit()
        budget = self.a.max_num_batched_tokens
        flops = 0.0
        kv_read = 0.0
        done: list[_Seq] = []
        tokens = 0
        for s in self.running:
            if s.prefill == 0:
                tokens += 1
                budget -= 1
                kv_read += s.context * KV_BYTES_PER_TOKEN
                flops += 4 * LAYERS * HIDDEN * s.context
                s.context += 1
                s.decode -= 1
                if s.decode <= 0:
                    done.append(s)
        for s in self.running:
            if s.prefill > 0 and budget > 0:
                chunk = min(s.prefill, budget)
                budget -= chunk
                tokens += chunk
                flops += 4 * LAYERS * HIDDEN * chunk * (s.context + chunk / 2)
                kv_read += s.context * KV_BYTES_PER_TOKEN
                s.context += chunk
                s.prefill -= chunk
        flops += 2 * PARAMS * tokens
        memory_s = (WEIGHT_BYTES + kv_read) / (self.gpu.bandwidth * self.a.bandwidth_efficiency)
        compute_s = flops / (self.gpu.flops * self.a.compute_efficiency)
        n = len(self.running)
        for s in done:
            self.running.remove(s)
            self.held -= -(-(s.req.prompt + s.req.completion) // BLOCK_TOKENS)
        return max(memory_s, compute_s) + self.a.step_overhead_s, [s.key for s in done], n


def waves_of(stream: list[Req]) -> list[list[list[Req]]]:
    """Per sample session, its waves of requests in order."""
    sessions: dict[int, dict[int, list[Req]]] = {}
    for r in stream:
        sessions.setdefault(r.session, {}).setdefault(r.wave, []).append(r)
    return [[w[k] for k in sorted(w)] for _, w in sorted(sessions.items())]


def common_blocks(base: list[list[list[Req]]]) -> frozenset[int]:
    """Blocks that occur in more than one sample session (text every session's prompts start with alike)."""
    owners: dict[int, int] = {}
    shared: set[int] = set()
    for index, waves in enumerate(base):
        for wave in waves:
            for r in wave:
                for h in r.hashes:
                    if owners.setdefault(h, index) != index:
                        shared.add(h)
    return frozenset(shared)


def salted(wave: list[Req], copy: int, common: frozenset[int]) -> list[Req]:
    """A copy's requests: its own blocks salted by the copy (cycled copies of a sample session share nothing
    a real different session would not), blocks common to several sample sessions left shared."""
    return [Req(copy, r.wave, r.role, r.prompt, r.completion, [h if h in common else hash((copy, h))
                                                               for h in r.hashes]) for r in wave]


def run(gpu: GPU, a: Assumed, base: list[list[list[Req]]], n: int, driver: str, cpu_s_per_request: float
        ) -> dict[str, Any]:
    """Projected wall seconds, GPU-busy seconds and tail seconds of ``n`` sessions under ``driver``."""
    sched = Scheduler(gpu, a)
    programs = [base[i % len(base)] for i in range(n)]
    common = common_blocks(base)
    next_session = 0
    wall = busy = tail = cpu_wait = 0.0
    position: dict[int, int] = {}
    outstanding: dict[int, int] = {}
    ready: list[tuple[float, int]] = []  # continuous: (time the session's next wave is posted, session)

    def start(sid: int, now: float) -> None:
        position[sid] = 0
        heapq.heappush(ready, (now, sid))

    def post(sid: int) -> None:
        wave = salted(programs[sid][position[sid]], sid, common)
        outstanding[sid] = len(wave)
        for r in wave:
            sched.add(r, sid)

    if driver == "continuous":
        while next_session < min(a.window, n):
            start(next_session, 0.0)
            next_session += 1
        while ready or not sched.idle:
            while ready and ready[0][0] <= wall:
                post(heapq.heappop(ready)[1])
            if sched.idle:
                wall = ready[0][0]
                continue
            seconds, finished, seqs = sched.step()
            wall += seconds
            busy += seconds
            tail += seconds if seqs < a.max_num_seqs // 8 and not sched.waiting else 0.0
            for sid in finished:
                outstanding[sid] -= 1
                if outstanding[sid] == 0:
                    position[sid] += 1
                    later = wall + cpu_s_per_request * len(programs[sid][position[sid] - 1])
                    if position[sid] < len(programs[sid]):
                        heapq.heappush(ready, (later, sid))
                    elif next_session < n:
                        start(next_session, later)
                        next_session += 1
    else:
        active = list(range(min(a.window, n)))
        next_session = len(active)
        for sid in active:
            position[sid] = 0
        while active:
            requests = [(r, sid) for sid in active for r in salted(programs[sid][position[sid]], sid, common)]
            for start_at in range(0, len(requests), a.max_batch_size):
                for r, sid in requests[start_at:start_at + a.max_batch_size]:
                    sched.add(r, sid)
                while not sched.idle:
                    seconds, _, seqs = sched.step()
                    wall += seconds
                    busy += seconds
                    tail += seconds if seqs < a.max_num_seqs // 8 and not sched.waiting else 0.0
            cpu = cpu_s_per_request * len(requests)
            wall += cpu
            cpu_wait += cpu
            still = []
            for sid in active:
                position[sid] += 1
                if position[sid] < len(programs[sid]):
                    still.append(sid)
                elif next_session < n:
                    position[next_session] = 0
                    still.append(next_session)
                    next_session += 1
            active = still
    # tail: time the GPU runs fewer than max_num_seqs / 8 sequences with nothing waiting (a draining batch)
    return {"sessions_per_hour": round(n / wall * 3600), "wall_s": round(wall, 1),
            "gpu_busy_fraction": round(busy / wall, 4), "tail_fraction": round(tail / wall, 4),
            "cpu_wait_fraction": round(cpu_wait / wall, 4),
            "prefix_cache_hit": round(sched.cached / max(sched.cached + sched.prefilled, 1), 4),
            "uncached_prefill_per_session": round(sched.prefilled / n)}


def kv_tokens(gpu: GPU, a: Assumed) -> int:
    """The KV cache in tokens: the memory vLLM takes at the profile's utilisation, less the weights."""
    return int((gpu.memory * a.gpu_memory_utilization - WEIGHT_BYTES) / KV_BYTES_PER_TOKEN)


def measured_working_set(base: list[list[list[Req]]]) -> float:
    """The stream's mean longest prompt + reply per session, plus a quarter: what the engine's fixed
    :data:`~promem_fast.driver.window.WORKING_SET_TOKENS` estimates, for comparison."""
    return 1.25 * sum(max(r.prompt + r.completion for w in b for r in w) for b in base) / len(base)


def inputs(gpu: GPU, a: Assumed) -> dict[str, Any]:
    """What a real GPU run can check: prefill tokens/s and decode step times the model implies."""
    prefill_tps = a.max_num_batched_tokens / (2 * PARAMS * a.max_num_batched_tokens / (gpu.flops * a.compute_efficiency)
                                              + a.step_overhead_s)
    decode = {}
    for batch, ctx in ((1, 2048), (64, 4096), (256, 4096)):
        mem = (WEIGHT_BYTES + batch * ctx * KV_BYTES_PER_TOKEN) / (gpu.bandwidth * a.bandwidth_efficiency)
        comp = (2 * PARAMS * batch + 4 * LAYERS * HIDDEN * ctx * batch) / (gpu.flops * a.compute_efficiency)
        decode[f"batch{batch}_ctx{ctx}_ms"] = round((max(mem, comp) + a.step_overhead_s) * 1e3, 2)
    return {"prefill_tokens_per_s": round(prefill_tps), "decode_step_ms": decode}


def summarise(out: dict[str, Any]) -> None:
    """Add to ``out`` what the README quotes of each card: the continuous driver's gain over the round
    driver without its CPU phases (the GPU-only bound) and the side-by-side table, both from ``out`` alone."""
    rows = []
    for name, row in out["gpus"].items():
        if "round_baseline_without_cpu" not in row:
            continue
        row["continuous_over_round_baseline_without_cpu"] = round(
            row["continuous_auto_window"]["sessions_per_hour"] / row["round_baseline_without_cpu"]["sessions_per_hour"],
            2)
        base, fit = row["round_baseline"], row["continuous_auto_window"]
        rows.append([name, f"{base['sessions_per_hour']:,}/h, GPU busy {base['gpu_busy_fraction']:.0%}",
                     f"{row['round_baseline_without_cpu']['sessions_per_hour']:,}/h",
                     f"{fit['sessions_per_hour']:,}/h (window {fit['window']}), busy {fit['gpu_busy_fraction']:.2%}, "
                     f"tail {fit['tail_fraction']:.1%}", f"{row['continuous_over_reference_round']:.2f}x"])
    if rows:
        out.setdefault("tables", {})["drivers"] = {
            "columns": ["GPU", "today's round driver, baseline stream", "same, its CPU phases left out",
                        "continuous driver, this stream, auto window (KV cache / working set)",
                        "ratio to the first"],
            "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--halumem", type=Path, default=HALUMEM)
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--window", type=int, default=Assumed.window)
    p.add_argument("--baseline-stream", type=Path, metavar="FILE.json",
                   help="today's engine's stream (request_stream.py --dump-stream on the baseline commit), replayed "
                        "on the round driver as the reference")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not args.halumem.is_file():
        print(f"{args.halumem}: not found (pass --halumem PATH)", file=sys.stderr)
        return 2
    stream, samples, cpu_s = record(args.halumem, smollm2_tokenizer())
    runs = {"this branch": (waves_of(stream), cpu_s)}
    if args.baseline_stream:
        old, old_cpu = load(args.baseline_stream)
        runs["baseline"] = (waves_of(old), old_cpu)
    a = Assumed(window=args.window)
    out: dict[str, Any] = {
        "label": "PROJECTION from a scheduler model, not a measurement on a GPU",
        "sessions": args.sessions, "source": args.halumem.name, "assumed": asdict(a),
        "streams": {name: {"requests_per_session": round(sum(map(len, (r for w in b for r in w))) / len(b), 2),
                           "engine_cpu_ms_per_request_measured_here": round(c * 1e3, 3)}
                    for name, (b, c) in runs.items()},
        "working_set_tokens": {"engine_estimate": WORKING_SET_TOKENS,
                               "this_stream": round(measured_working_set(runs["this branch"][0]))},
        "gpus": {}}
    for gpu in GPUS:
        row: dict[str, Any] = {"spec": asdict(gpu), "inputs_to_check": inputs(gpu, a)}
        auto = replace(a, window=auto_window(kv_tokens(gpu, a)))  # the engine's own rule, max_in_flight: 0
        if "baseline" in runs:
            row["round_baseline"] = run(gpu, a, runs["baseline"][0], args.sessions, "round", runs["baseline"][1])
            # the same without its CPU phases: what the round barriers and the stream alone cost
            row["round_baseline_without_cpu"] = run(gpu, a, runs["baseline"][0], args.sessions, "round", 0.0)
        row["round"] = run(gpu, a, runs["this branch"][0], args.sessions, "round", cpu_s)
        row["continuous"] = run(gpu, a, runs["this branch"][0], args.sessions, "continuous", cpu_s)
        row["continuous_auto_window"] = {"window": auto.window, "kv_cache_tokens": kv_tokens(gpu, a),
                                         **run(gpu, auto, runs["this branch"][0], args.sessions, "continuous",
                                               cpu_s)}
        reference = row.get("round_baseline", row["round"])["sessions_per_hour"]
        row["continuous_over_reference_round"] = round(
            row["continuous_auto_window"]["sessions_per_hour"] / reference, 2)
        row["auto_over_fixed_window"] = round(
            row["continuous_auto_window"]["sessions_per_hour"] / row["continuous"]["sessions_per_hour"], 2)
        out["gpus"][gpu.name] = row
        print(gpu.name, json.dumps({k: v for k, v in row.items() if k not in ("spec", "inputs_to_check")}))
    summarise(out)
    command = "python -m benchmarks.gpu.gpu_model " + " ".join(argv or sys.argv[1:])
    out.update(commit=commit(), date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               command=command, machine=machine_info(), projection=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        figures.adopt(args.out.resolve(), command)  # a result file, quoted with "(projection)"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
