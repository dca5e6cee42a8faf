#!/usr/bin/env bash
# The GPU throughput check, as one prepared script for an H200 machine that has python3 with torch,
# transformers, sentence-transformers, onnxruntime (CPU build), pybind11 and a C++ compiler, but no vLLM,
# no model weights and no network. Everything it needs is built on the machine:
#   1. the native core (python3 setup.py build_ext --inplace), unless it already imports;
#   2. NLI pairs/s: torch NLI on CUDA (fp16) with a random roberta-large-shaped classifier (24 layers,
#      hidden 1024, 16 heads, intermediate 4096), pairs of at most 256 tokens, batch 64 and 256;
#   3. the throughput harness on the transformers backend: a random model of Llama-3.1-8B's exact shape in
#      bf16 (initialised on the GPU, written once to $WORK, loaded once), 32 sessions, 32 in flight, 32
#      prompts per forward pass, ignore_eos with the harness's per-role reply lengths, TimedReplay replies, a
#      random MiniLM-shaped embedder and the random NLI classifier on the GPU; run under the continuous
#      driver, then the round driver, on the same loaded models, with the GPU's busy fraction sampled;
#   3a. the GPU cost model's inputs (benchmarks/results/gpu_model.json, a projection): prefill tokens/s and
#      decode step times of a random Llama-3.1-8B-shaped model, measured and divided by the assumed ones;
#   4. top-1 cosine search (the cross-reference matrix) on numpy, torch CPU and torch CUDA, side by side
#      (run before the harness, which takes what is left).
# Results land in $OUT (the device tool sets it; default out/gpu_run): gpu_run.log (this script's progress and
# every step's output), env.txt, nli.json, gpu_check.json, throughput.json, similarity.json: six files, within
# what the device tool brings back. Each step has a timeout inside the overall budget, and the harness writes
# what it measured even when stopped (after each driver, and at a stop). A stop waits for the batch on the GPU
# for up to 30 s (the engine joins its backend threads), so the harness's kill comes 50 s after its stop.
#
# Time, estimated: native build 20-30 s; NLI step about 45 s; the cost-model check at most 100 s; the harness
# about 90 s to build, write and load the random 8B, then two runs of 32 sessions; the similarity step at most
# 60 s. BUDGET (default 520 s) caps the whole; the harness gets what the other steps leave.
#
# HaluMem sessions are used when the sample is found (HALUMEM=path, or shared/data/halumem-dev/ inside the
# checkout, or ../shared/ beside it); on a machine without it the harness generates HaluMem-sized sessions.
#
# Usage:  bash benchmarks/gpu_run.sh               on the GPU machine
#         bash benchmarks/gpu_run.sh --cpu-smoke   anywhere: the same steps shrunk to seconds on the CPU
set -uo pipefail

SMOKE=0
case "${1:-}" in
  --cpu-smoke) SMOKE=1 ;;
  "") ;;
  *) echo "usage: $0 [--cpu-smoke]" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export HF_HUB_DISABLE_TELEMETRY=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [[ -z "${PY:-}" ]]; then
  if (( SMOKE )) && [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [[ -z "${OUT:-}" ]]; then
  if (( SMOKE )); then OUT="$(mktemp -d /tmp/promem-gpu-smoke-out.XXXXXX)"; else OUT="$ROOT/out/gpu_run"; fi
fi
if [[ -z "${WORK:-}" ]]; then
  WORK="$(mktemp -d /tmp/promem-gpu-run.XXXXXX)"
  trap 'rm -rf "$WORK"' EXIT   # the random models are rebuilt each run; 16 GB should not outlive it
fi
BUDGET="${BUDGET:-520}"
mkdir -p "$OUT" "$WORK"

log() { printf '[%s +%3ds] %s\n' "$(date +%H:%M:%S)" "$SECONDS" "$*" | tee -a "$OUT/gpu_run.log"; }
left() { echo $(( BUDGET - SECONDS )); }
# Seconds for a step: what the budget leaves minus a reserve, capped, never below 1 (timeout 0 means no limit).
slot() { local t=$(( $(left) - $1 )); (( t > $2 )) && t=$2; (( t < 1 )) && t=1; echo "$t"; }

if (( SMOKE )); then
  DEVICE=cpu
  HARNESS=(--tiny --sessions 2 --max-in-flight 2 --batch-size 8 --drivers continuous round)
  NLI=(--tiny --nli-pairs 64 --nli-batch-sizes 16 64)
else
  DEVICE=cuda
  HARNESS=(--random-llama-8b "$WORK/llama-3.1-8b-shape" --sessions 32 --max-in-flight 32 --batch-size 32
           --drivers continuous round)
  NLI=(--nli-pairs 2048 --nli-batch-sizes 64 256)
fi

SAMPLE=""
for candidate in "${HALUMEM:-}" shared/data/halumem-dev/pilot_slice_user0.jsonl \
                 ../shared/data/halumem-dev/pilot_slice_user0.jsonl; do
  if [[ -n "$candidate" && -f "$candidate" ]]; then SAMPLE="$candidate"; break; fi
done
if [[ -n "$SAMPLE" ]]; then SESSIONS=(--halumem "$SAMPLE"); else SESSIONS=(--synthetic); fi

log "gpu_run: smoke=$SMOKE device=$DEVICE python=$PY out=$OUT work=$WORK budget=${BUDGET}s sessions=${SESSIONS[*]}"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  "$PY" - <<'EOF' 2>&1
import importlib.metadata as md, platform
print("python", platform.python_version())
for name in ("torch", "transformers", "tokenizers", "sentence-transformers", "onnxruntime", "numpy", "faiss-cpu",
             "faiss-gpu-cu12", "vllm"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "absent")
import torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF
} > "$OUT/env.txt"
log "environment written to env.txt"

FAILED=0
if ! "$PY" -c "import promem_fast._native" 2>/dev/null; then
  log "building the native core"
  if ! timeout 180 "$PY" setup.py -q build_ext --inplace >>"$OUT/gpu_run.log" 2>&1; then
    log "FAILED: native build (see gpu_run.log); the engine cannot run without it"
    exit 1
  fi
fi
log "native core imports"

log "step NLI: pairs/s of torch NLI on a random roberta-large-shaped classifier"
timeout -k 15 "$(slot 0 150)" "$PY" -m benchmarks.gpu.throughput --nli-pairs-per-second \
  --random-nli "$WORK/nli" --device "$DEVICE" "${NLI[@]}" "${SESSIONS[@]}" --out "$OUT/nli.json" 2>&1 \
  | tee -a "$OUT/gpu_run.log"
status=${PIPESTATUS[0]}
log "step NLI ended with status $status"
(( status == 0 )) || FAILED=1

log "step cost-model check: prefill tokens/s and decode step times vs benchmarks/results/gpu_model.json"
CHECK=(--gpu H200 --device "$DEVICE")
(( SMOKE )) && CHECK=(--gpu H200 --device cpu --tiny)
timeout -k 15 "$(slot 300 100)" "$PY" -m benchmarks.gpu.gpu_check "${CHECK[@]}" \
  --model-json benchmarks/results/gpu_model.json --out "$OUT/gpu_check.json" 2>&1 | tee -a "$OUT/gpu_run.log"
status=${PIPESTATUS[0]}
log "step cost-model check ended with status $status"
(( status == 0 )) || FAILED=1

log "step similarity: top-1 cosine (cross-reference matrix) on numpy, torch CPU and torch CUDA, side by side"
timeout -k 10 "$(slot 240 60)" "$PY" -m pytest benchmarks/suites/bench_similarity.py --benchmark-only -q -s -p no:cacheprovider \
  -k per_session --benchmark-json "$OUT/similarity.json" 2>&1 | tee -a "$OUT/gpu_run.log"
status=${PIPESTATUS[0]}
log "step similarity ended with status $status"
(( status == 0 )) || FAILED=1

log "step harness: transformers backend, both engine drivers, $(left) s left"
timeout -k 50 "$(slot 10 "$BUDGET")" "$PY" -m benchmarks.gpu.throughput --backend transformers "${HARNESS[@]}" \
  --device "$DEVICE" --random-embedder "$WORK/embedder" --random-nli "$WORK/nli" "${SESSIONS[@]}" \
  --out "$OUT/throughput.json" 2>&1 | tee -a "$OUT/gpu_run.log"
status=${PIPESTATUS[0]}
if (( status == 124 )); then
  log "step harness stopped at the budget; what it measured is in throughput.json (\"finished\": false)"
else
  log "step harness ended with status $status"
fi
(( status == 0 )) || FAILED=1

"$PY" - "$OUT" <<'EOF' 2>&1 | tee -a "$OUT/gpu_run.log"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("nli.json", "gpu_check.json", "throughput.json", "similarity.json"):
    path = out / name
    if not path.is_file():
        print(f"{name}: missing")
        continue
    data = json.loads(path.read_text())
    if name == "gpu_check.json":
        print("cost model check (measured / assumed):", data["ratios"], "comparable:", data["comparable"])
    elif name == "nli.json":
        print("NLI pairs/s by batch size:", {k: v["pairs_per_second"] for k, v in data["batches"].items()},
              f"({data['mean_window_tokens']} tokens per window, {data['device']})")
    elif name == "similarity.json":
        for bench in data["benchmarks"]:
            info = bench["extra_info"]
            print("similarity", bench["param"], {k: v for k, v in info.items() if k.endswith("queries_per_s")})
    else:
        keys = ("finished", "sessions_per_hour", "sessions_per_hour_without_replay", "gpu_busy_fraction",
                "prompt_tokens_per_second", "completion_tokens_per_second", "model_prompt_tokens_per_second",
                "model_completion_tokens_per_second", "engine_overhead_ms_per_session", "wall_seconds")
        for driver, run in data.get("drivers", {"": data}).items():
            print("harness", driver, {k: run.get(k) for k in keys})
EOF
log "done in ${SECONDS}s; results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$FAILED"
