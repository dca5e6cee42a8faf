"""A PROJECTION, not a measurement: sessions/hour of the engine on one GPU under a model of vLLM's scheduler.

    python -m benchmarks.gpu.gpu_model [--sessions 1000] [--out benchmarks/results/gpu_model.json]

It replays the engine's own LLM request stream (:mod:`request_stream`: per session, waves of requests whose
replies the next wave needs) for HaluMem-sized sessions (the 29 sample sessions cycled, each copy with its
own cache salt so copies share no prefix) on a discrete-step model of vLLM v1's scheduler and KV block pool
(:mod:`vllm_blocks`: continuous batching with chunked prefill, prefix blocks shared between running
requests and pinned while referenced, admission reserving only the blocks not cached, unreferenced cached
blocks evicted least recently freed first), with a step time of its linear layers' time plus its attention's
time plus a fixed overhead (:meth:`vllm_blocks.Costs.kernels`): the linear layers take the longer of reading
the bf16 weights once and 2 x parameters FLOPs per token; attention the longer of reading the KV of every
token attended and its FLOPs. The two add: a layer runs its matmuls, then its attention. The figures of the accelerators and of Llama-3.1-8B are the
published ones in the project's perf-facts; the efficiency factors and step overhead below are assumptions,
written to the results file for a real GPU to check.

Beside it, a second formulation by another method, :mod:`roofline` (closed form over a session's tokens, no
replay), and the compute floor: the necessary tokens at 790 TFLOP/s, what no schedule beats. Each figure is
given as a share of that floor.

Gains are attributed apart: the **driver** (``round``: every round sends each session's current wave and
waits for the slowest reply, the engine's CPU work of the round in between; ``continuous``: each session
posts its next wave as soon as its own replies are in) at the same window, then the **window** alone (the
continuous driver at the window sized from the KV cache over the working set measured on this stream, as
the engine does with ``max_in_flight: 0``, against the fixed 5,000-token estimate and against 512). Two
settings are projected apart, neither the gpu profile's: a small chunked-prefill budget (which spreads prefill
over the decoding steps: no gain once a step's matmuls and attention add), and an FP8 KV cache (half the bytes
each reply token reads, twice the tokens in the same memory, so a window twice as wide).
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import HALUMEM
from benchmarks.gpu import roofline
from benchmarks.gpu.request_stream import BLOCK_TOKENS, Req, commit, record, smollm2_tokenizer
from benchmarks.gpu.vllm_blocks import Costs, Scheduler
from benchmarks.tools import figures
from promem_fast.driver.window import WORKING_SET_TOKENS, auto_window, step_working_set


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
KV_VALUES_PER_TOKEN = 2 * 32 * 8 * 128
"""Llama-3.1-8B (perf-facts.md): K and V of 32 layers, 8 KV heads of 128 per token (128 KiB in bf16)."""


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
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    """None: what vLLM picks for the card when the engine leaves it unset (:func:`vllm_batch_defaults`)."""
    max_batch_size: int = 4096
    """The round driver's cap on requests per blocking call (EngineConfig.max_batch_size)."""
    window: int = 512
    """The fixed window the sized one is set against (the gpu profile's before it became auto)."""
    kv_bytes: int = 2
    """Bytes per KV value: 2 for vLLM's ``kv_cache_dtype="auto"`` (the model's bf16, the gpu profile's), 1 for
    ``"fp8"`` (the ``continuous_kv_fp8`` row; set through ``llm.options``)."""

    @property
    def kv_bytes_per_token(self) -> int:
        return KV_VALUES_PER_TOKEN * self.kv_bytes


def vllm_batch_defaults(gpu: GPU) -> dict[str, int]:
    """vLLM's own batch limits for an ``LLM`` object that leaves them unset, as the vllm backend does
    (``EngineArgs.get_batch_defaults``, vLLM >= 0.9): 1,024 sequences and a 16,384-token chunk budget on a
    card of at least 70 GiB that is not an A100, else 256 and 8,192."""
    if gpu.memory >= 70 * 2**30 and "A100" not in gpu.name:
        return {"max_num_seqs": 1024, "max_num_batched_tokens": 16384}
    return {"max_num_seqs": 256, "max_num_batched_tokens": 8192}


def for_card(gpu: GPU, a: Assumed) -> Assumed:
    """The assumptions with the batch limits vLLM applies on ``gpu`` where none were given."""
    picked = vllm_batch_defaults(gpu)
    return replace(a, max_num_seqs=a.max_num_seqs or picked["max_num_seqs"],
                   max_num_batched_tokens=a.max_num_batched_tokens or picked["max_num_batched_tokens"])


SMALL_CHUNK = 1024
"""The chunked-prefill budget of the ``continuous_chunk_budget_small`` row (vLLM's ``max_num_batched_tokens``)."""

WINDOW_OVER = (125, 150, 200)
"""Windows past the sized one, in percent of it (the ``continuous_window_over`` rows): the margin the sizing
leaves before sessions evict each other's cached blocks."""


ONE_AT_A_TIME_SESSIONS = 50
"""Sessions of the ``continuous_one_session_at_a_time`` row (a window of one: ``Memory.add`` after ``Memory.add``;
its rate is steady from the first session, so fewer sessions replay it in less time)."""


FLOOR_SHARES = {"scheduler_model": "continuous", "scheduler_model_small_chunk_budget": "continuous_chunk_budget_small",
                "roofline": "roofline", "scheduler_model_kv_fp8": "continuous_kv_fp8",
                "roofline_kv_fp8": "roofline_kv_fp8", "scheduler_model_overhead_hidden": "continuous_overhead_hidden",
                "roofline_overhead_hidden": "roofline_overhead_hidden"}
"""Each ``floor_share`` figure of a card and the row whose sessions/h it sets against the compute floor."""
SHARE_AIMED = 0.6
"""The share of the compute floor the projection aims at, for :func:`share_bound`."""


def costs_on(gpu: GPU, a: Assumed) -> Costs:
    """What a step costs on ``gpu`` at the assumed shares of its bandwidth and FLOP/s."""
    return Costs(gpu.bandwidth * a.bandwidth_efficiency, gpu.flops * a.compute_efficiency, WEIGHT_BYTES, PARAMS,
                 a.kv_bytes_per_token, 4 * LAYERS * HIDDEN, a.step_overhead_s)


def scheduler(gpu: GPU, a: Assumed) -> Scheduler:
    """vLLM v1's scheduler and block pool (:mod:`vllm_blocks`) on ``gpu``'s KV cache, at the assumed shares."""
    return Scheduler(kv_tokens(gpu, a) // BLOCK_TOKENS, costs_on(gpu, a), a.max_num_seqs, a.max_num_batched_tokens)


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
    sched = scheduler(gpu, a)
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
            "uncached_prefill_per_session": round(sched.prefilled / n),
            "steps_waiting_for_blocks": sched.refused, "cached_blocks_evicted": sched.pool.evicted,
            "memory_bound_s": round(sched.memory_bound_s, 1), "kv_read_s": round(sched.kv_read_s, 1),
            "compute_bound_s": round(sched.compute_bound_s, 1)}


def kv_tokens(gpu: GPU, a: Assumed) -> int:
    """The KV cache in tokens: the memory vLLM takes at the profile's utilisation, less the weights."""
    return int((gpu.memory * a.gpu_memory_utilization - WEIGHT_BYTES) / a.kv_bytes_per_token)


def measured_working_set(base: list[list[list[Req]]]) -> float:
    """What the engine measures per session (:func:`~promem_fast.driver.window.step_working_set` of each
    wave, its peak), averaged over the sample: the working set the auto window divides the KV cache by."""
    return sum(max(step_working_set((r.hashes, r.prompt, r.completion) for r in wave) for wave in b)
               for b in base) / len(base)


def inputs(gpu: GPU, a: Assumed) -> dict[str, Any]:
    """What a real GPU run can check: prefill tokens/s and decode step times the model implies."""
    prefill_tps = a.max_num_batched_tokens / (2 * PARAMS * a.max_num_batched_tokens / (gpu.flops * a.compute_efficiency)
                                              + a.step_overhead_s)
    decode = {}
    costs = costs_on(gpu, a)
    for batch, ctx in ((1, 2048), (64, 4096), (256, 4096)):
        linear, attention = costs.kernels(batch, batch * ctx, 4 * LAYERS * HIDDEN * ctx * batch)
        decode[f"batch{batch}_ctx{ctx}_ms"] = round((linear + attention + a.step_overhead_s) * 1e3, 2)
    return {"prefill_tokens_per_s": round(prefill_tps), "decode_step_ms": decode}


def analytic(gpu: GPU, a: Assumed, tokens: dict[str, float], window: int) -> dict[str, Any]:
    """The second formulation (:func:`roofline.project`) at the same assumptions and window."""
    return roofline.project(tokens, bandwidth=gpu.bandwidth * a.bandwidth_efficiency,
                            flops=gpu.flops * a.compute_efficiency, weight_bytes=WEIGHT_BYTES, params=PARAMS,
                            kv_bytes_per_token=a.kv_bytes_per_token, attention=4 * LAYERS * HIDDEN,
                            overhead_s=a.step_overhead_s, max_num_seqs=a.max_num_seqs,
                            max_num_batched_tokens=a.max_num_batched_tokens, kv_cache_tokens=kv_tokens(gpu, a),
                            window=window)


def card(gpu: GPU, a: Assumed, waves: list[list[list[Req]]], cpu_s: float, n: int, working_set: float,
         floor: int, tokens: dict[str, float]) -> dict[str, Any]:
    """One card's rows: the window sizing, both drivers at the same window, the window alone, both models."""
    a = for_card(gpu, a)
    kv = kv_tokens(gpu, a)
    sized, estimated = auto_window(kv, working_set), auto_window(kv)
    row: dict[str, Any] = {"spec": asdict(gpu), "inputs_to_check": inputs(gpu, a),
                           "vllm_batch": {"max_num_seqs": a.max_num_seqs,
                                          "max_num_batched_tokens": a.max_num_batched_tokens},
                           "window": {"kv_cache_tokens": kv, "kv_cache_blocks": kv // BLOCK_TOKENS,
                                      "working_set_measured": round(working_set), "sized": sized,
                                      "from_5000_token_estimate": estimated, "fixed": a.window}}
    row["round"] = run(gpu, replace(a, window=sized), waves, n, "round", cpu_s)
    # the same without its CPU phases (the engine's CPU per request is measured on this shared machine)
    row["round_without_cpu"] = run(gpu, replace(a, window=sized), waves, n, "round", 0.0)
    row["continuous"] = run(gpu, replace(a, window=sized), waves, n, "continuous", cpu_s)
    row["continuous_5000_token_window"] = run(gpu, replace(a, window=estimated), waves, n, "continuous", cpu_s)
    row["continuous_fixed_window"] = run(gpu, a, waves, n, "continuous", cpu_s)
    # one session at a time, as a program calling Memory.add once per conversation runs the engine (add_many and
    # promem extract give it the whole list: the sized window)
    row["continuous_one_session_at_a_time"] = run(gpu, replace(a, window=1), waves, min(n, ONE_AT_A_TIME_SESSIONS),
                                                  "continuous", cpu_s)
    # the margin: how many more sessions than the sized window fit before cached session blocks are evicted
    # between their waves and prefilled again (the rate then falls fast)
    row["continuous_window_over"] = {str(percent): {"window": sized * percent // 100, **run(
        gpu, replace(a, window=sized * percent // 100), waves, n, "continuous", cpu_s)} for percent in WINDOW_OVER}
    # a lever to check on a GPU, not the profile's setting: a smaller chunked-prefill budget spreads prefill
    # over the steps that decode anyway (each step reads the weights and every running sequence's KV)
    small = replace(a, window=sized, max_num_batched_tokens=SMALL_CHUNK)
    row["continuous_chunk_budget_small"] = {"max_num_batched_tokens": SMALL_CHUNK, **run(
        gpu, small, waves, n, "continuous", cpu_s)}
    row["roofline"] = analytic(gpu, a, tokens, sized)
    # a lever to check on a GPU, not the profile's setting: an FP8 KV cache holds twice the tokens, so the
    # engine's auto window (sized from the blocks vLLM reports) doubles and more sequences decode per step
    fp8 = replace(a, kv_bytes=1)
    fp8_window = auto_window(kv_tokens(gpu, fp8), working_set)
    row["continuous_kv_fp8"] = {"window": fp8_window, **run(gpu, replace(fp8, window=fp8_window), waves, n,
                                                              "continuous", cpu_s)}
    row["roofline_kv_fp8"] = analytic(gpu, fp8, tokens, fp8_window)
    # a bound, not a setting: no step overhead at all, as if vLLM's async scheduling (on by default since
    # 0.14) hid every step's scheduling, sampling and structured-output work under the GPU's previous step
    hidden = replace(a, window=sized, step_overhead_s=0.0)
    row["continuous_overhead_hidden"] = run(gpu, hidden, waves, n, "continuous", cpu_s)
    row["roofline_overhead_hidden"] = analytic(gpu, hidden, tokens, sized)
    fig = row["continuous"]["sessions_per_hour"]
    row["driver_gain_same_window"] = round(fig / row["round"]["sessions_per_hour"], 2)
    row["driver_gain_same_window_gpu_only"] = round(fig / row["round_without_cpu"]["sessions_per_hour"], 2)
    row["window_gain_over_5000_token_estimate"] = round(
        fig / row["continuous_5000_token_window"]["sessions_per_hour"], 2)
    row["window_gain_over_fixed"] = round(fig / row["continuous_fixed_window"]["sessions_per_hour"], 2)
    row["window_gain_over_one_session"] = round(fig / row["continuous_one_session_at_a_time"]["sessions_per_hour"], 2)
    row["floor_share"] = {share: round(row[key]["sessions_per_hour"] / floor, 3) for share, key in FLOOR_SHARES.items()}
    row["floor_share_bound"] = share_bound(gpu, a, row["roofline"], floor, tokens)
    return row


def share_bound(gpu: GPU, a: Assumed, roof: dict[str, Any], floor: int, tokens: dict[str, float]) -> dict[str, Any]:
    """What bounds the roofline's share of the floor at these assumptions: the share its linear layers alone
    would reach (no attention, no step overhead: the assumed matmul rate against the floor's), and the KV
    tokens the replies of a session could read for the share to reach :data:`SHARE_AIMED` (attention then
    memory-bound, steps as they are), beside the KV tokens they read now."""
    floor_s = 3600 / floor
    budget = floor_s / SHARE_AIMED - roof["linear_s_per_session"] - roof["steps_per_session"] * a.step_overhead_s
    allowed = max(budget, 0.0) * gpu.bandwidth * a.bandwidth_efficiency / a.kv_bytes_per_token
    return {"linear_layers_alone": round(floor_s / roof["linear_s_per_session"], 3),
            "share_aimed": SHARE_AIMED, "kv_reads_per_session": round(tokens["decode_kv_reads"]),
            "kv_reads_per_session_at_share_aimed": round(allowed)}


def summarise(out: dict[str, Any]) -> None:
    """The projection table the README quotes, from ``out`` alone: both models, driver and window apart,
    each figure's share of the compute floor."""
    rows = []
    for name, row in out["gpus"].items():
        fig, w = row["continuous"], row["window"]
        rows.append([name, f"{row['round']['sessions_per_hour']:,}/h; "
                           f"{row['round_without_cpu']['sessions_per_hour']:,}/h without its CPU phases",
                     f"{fig['sessions_per_hour']:,}/h ({row['driver_gain_same_window']:.2f}x; "
                     f"{row['driver_gain_same_window_gpu_only']:.2f}x)",
                     f"{row['continuous_fixed_window']['sessions_per_hour']:,}/h at {w['fixed']}, "
                     f"{row['continuous_5000_token_window']['sessions_per_hour']:,}/h at {w['from_5000_token_estimate']} "
                     f"→ {w['sized']} ({row['window_gain_over_fixed']:.2f}x, "
                     f"{row['window_gain_over_5000_token_estimate']:.2f}x)",
                     f"{fig['sessions_per_hour']:,}/h ({row['floor_share']['scheduler_model']:.0%}); "
                     f"{row['continuous_chunk_budget_small']['sessions_per_hour']:,}/h "
                     f"({row['floor_share']['scheduler_model_small_chunk_budget']:.0%}) at a {SMALL_CHUNK:,}-token "
                     "chunk budget",
                     f"{row['roofline']['sessions_per_hour']:,}/h ({row['floor_share']['roofline']:.0%}, "
                     f"{row['roofline']['bound']}-bound)",
                     f"window {row['continuous_kv_fp8']['window']}: "
                     f"{row['continuous_kv_fp8']['sessions_per_hour']:,}/h "
                     f"({row['floor_share']['scheduler_model_kv_fp8']:.0%}); roofline "
                     f"{row['roofline_kv_fp8']['sessions_per_hour']:,}/h ({row['floor_share']['roofline_kv_fp8']:.0%})",
                     f"{out['floor_sessions_per_hour']:,}/h"])
    out.setdefault("tables", {})["projection"] = {
        "columns": ["GPU", "round driver, sized window", "continuous driver, same window (driver gain)",
                    "window alone: fixed, 5,000-token estimate → sized (gain)",
                    "scheduler model (share of floor)", "roofline model (share of floor)",
                    "FP8 KV cache: sized window, scheduler and roofline models (share of floor)",
                    "compute floor (the H200's 790 TFLOP/s)"],
        "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--halumem", type=Path, default=HALUMEM)
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--window", type=int, default=Assumed.window, help="the fixed window the sized one is set against")
    p.add_argument("--gpus", nargs="*", default=[g.name for g in GPUS], choices=[g.name for g in GPUS])
    p.add_argument("--compute-efficiency", type=float, default=Assumed.compute_efficiency,
                   help="share of spec bf16 FLOP/s reached (e.g. as a GPU run measured the model's prefill)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not args.halumem.is_file():
        print(f"{args.halumem}: not found (pass --halumem PATH)", file=sys.stderr)
        return 2
    stream, samples, cpu_s = record(args.halumem, smollm2_tokenizer())
    waves = waves_of(stream)
    a = Assumed(window=args.window, compute_efficiency=args.compute_efficiency)
    tokens = roofline.session_tokens(waves)
    floor = roofline.floor(tokens, PARAMS)
    working_set = measured_working_set(waves)
    out: dict[str, Any] = {
        "label": "PROJECTION from two models (a scheduler replay and an analytic roofline), not a measurement on "
                 "a GPU",
        "sessions": args.sessions, "source": args.halumem.name, "assumed": asdict(a),
        "stream": {"requests_per_session": round(len(stream) / len(waves), 2),
                   "engine_cpu_ms_per_request_measured_here": round(cpu_s * 1e3, 3),
                   "necessary_tokens_per_session": {k: round(v) for k, v in tokens.items()
                                                    if k in ("prefill", "decode")}},
        "floor_sessions_per_hour": floor,
        "floor": f"necessary tokens x 2 x {PARAMS:.3g} FLOPs at {roofline.FLOOR_FLOPS / 1e12:.0f} TFLOP/s "
                 "(the H200's measured bf16 matmul rate, perf-facts.md)",
        "working_set_tokens": {"engine_estimate_before_measuring": WORKING_SET_TOKENS,
                               "measured_on_this_stream": round(working_set)},
        "gpus": {}}
    for gpu in GPUS:
        if gpu.name not in args.gpus:
            continue
        row = card(gpu, a, waves, cpu_s, args.sessions, working_set, floor, tokens)
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
