"""The H200 result file, from what ``gpu_run.sh`` and ``generate_probe.py`` brought back from the device.

    python -m benchmarks.gpu.gpu_results            # benchmarks/results/gpu_run-h200/ -> results/gpu_run-h200.json

The device's raw outputs are kept as they came back in ``benchmarks/results/gpu_run-h200/`` (the script's log,
env.txt and each step's JSON); this module reads them and writes one result file whose figures the READMEs
quote. The harness's batches are read from its log lines (``generate batch N: R requests, P prompt + C
completion tokens, S s model``), so a harness stopped before its JSON was written still counts its batches.

Beside each harness batch stands the time the GPU cost model (``gpu_model.py``) assumes for the same tokens:
its prefill rate for the prompt tokens plus, for the batch's decode steps, its decode step time interpolated
between the batch sizes it lists. That column is the model's assumption (for vLLM), not a measurement, and
the measured/assumed ratio says how far plain transformers ``generate`` is from it.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from benchmarks.common.paths import RESULTS
from benchmarks.tools.figures import _leaves, write_result

RAW = RESULTS / "gpu_run-h200"
RUN_COMMIT = "c44fe6f"
"""The commit whose gpu_run.sh ran on the device (the generate probe ran on it as an uncommitted file)."""
BATCH_LINE = re.compile(r"generate batch (\d+): (\d+) requests, (\d+) prompt \+ (\d+) completion tokens, "
                        r"([\d.]+) s model")


def _read(name: str) -> dict[str, Any]:
    return json.loads((RAW / name).read_text(encoding="utf-8"))


def assumed_step_ms(assumed: dict[str, float], batch: int) -> float:
    """The cost model's decode step at ``batch`` rows, linear between the batch sizes it lists."""
    points = sorted((int(re.findall(r"\d+", k)[0]), v) for k, v in assumed.items())
    for (b0, v0), (b1, v1) in zip(points, points[1:]):
        if batch <= b1:
            return v0 + (v1 - v0) * (max(batch, b0) - b0) / (b1 - b0)
    return points[-1][1]


def harness_batches(log: str, check: dict[str, Any]) -> list[dict[str, Any]]:
    prefill = check["measured"]["prefill_tokens_per_s"]
    assumed = check["assumed"]
    rows = []
    for match in BATCH_LINE.finditer(log):
        n, requests, prompt, completion, seconds = (int(match[1]), int(match[2]), int(match[3]), int(match[4]),
                                                    float(match[5]))
        steps = completion / requests  # ignore_eos: every row of a batch runs its role's max_tokens
        model_s = prompt / assumed["prefill_tokens_per_s"] + steps * assumed_step_ms(
            assumed["decode_step_ms"], requests) / 1e3
        rows.append({"batch": n, "requests": requests, "prompt_tokens": prompt, "completion_tokens": completion,
                     "seconds": seconds, "tokens_per_s": round((prompt + completion) / seconds),
                     "decode_step_ms": round((seconds - prompt / prefill) / steps * 1e3, 1),
                     "cost_model_seconds": round(model_s, 2), "measured_over_cost_model": round(seconds / model_s, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n", 1)[0]).parse_args(argv)
    check, nli, similarity = _read("gpu_check.json"), _read("nli.json"), _read("similarity.json")
    probes = {**_read("generate_probe.json")["decode_step_ms"], **{
        f"{k}_run2": v for k, v in _read("generate_probe2.json")["decode_step_ms"].items()}}
    batches = harness_batches((RAW / "gpu_run.log").read_text(encoding="utf-8"), check)
    decode = [b for b in batches if b["completion_tokens"] > 100 * b["requests"]]  # long replies, not verdicts
    sim = next(b["extra_info"] for b in similarity["benchmarks"] if "per_session" in b["param"])
    figures: dict[str, Any] = {
        "nli_pairs_per_s": {k: v["pairs_per_second"] for k, v in nli["batches"].items()},
        "nli_mean_window_tokens": nli["mean_window_tokens"],
        "prefill_tokens_per_s": check["measured"]["prefill_tokens_per_s"],
        "prefill_assumed_tokens_per_s": check["assumed"]["prefill_tokens_per_s"],
        "decode_step_ms": check["measured"]["decode_step_ms"],
        "decode_step_assumed_ms": check["assumed"]["decode_step_ms"],
        "measured_over_assumed": check["ratios"],
        "similarity_queries_per_s": {k.removesuffix("_queries_per_s"): v for k, v in sim.items()
                                     if k.endswith("_queries_per_s")},
        "generate_decode_step_ms": probes,
        "backend_over_plain_generate_batch2": round(probes["backend_batch2"] / probes["plain_batch2"], 2),
        "harness_finished": False,
        "harness_batches_done": len(batches),
        "harness_decode_batch_tokens_per_s": {b["batch"]: b["tokens_per_s"] for b in decode},
        "harness_prefill_batch_tokens_per_s": {b["batch"]: b["tokens_per_s"] for b in batches
                                               if b not in decode and b["requests"] >= 30},
        "harness_decode_step_ms": {b["batch"]: b["decode_step_ms"] for b in decode},
        "harness_measured_over_cost_model": {b["batch"]: b["measured_over_cost_model"] for b in batches},
    }
    figures = _leaves(figures)
    columns = list(batches[0]) if batches else []
    tables = {"harness_batches": {"columns": columns, "rows": [[b[c] for c in columns] for b in batches]}}
    note = ("One NVIDIA H200 lent by the device tool; torch 2.11.0, transformers 5.17.0, random-weight models of "
            "the real shapes (weights do not change the cost). The harness (transformers backend, continuous "
            "driver, 32 HaluMem sessions) did not finish inside the 520 s budget: it was stopped after 8 "
            "generate batches in 5.4 minutes and killed before writing its JSON, so no sessions/hour and no "
            "round-driver run exist; its batches are read from the log. Decode through the backend's generate "
            "cost 120-230 ms a step (prefill ran at 82% of the cost model's rate); the probe traced most of the "
            "extra to the backend's logits processor, which copied its banned-token list to the GPU at every "
            "step (fixed after this run, not yet re-measured). cost_model_seconds is the cost model's assumption "
            "for vLLM on the same tokens, not a measurement.")
    write_result("gpu_run-h200", figures, "bash benchmarks/gpu_run.sh (device tool, nvidia-h200); "
                 "python -m benchmarks.gpu.generate_probe; python -m benchmarks.gpu.gpu_results",
                 tables=tables, note=note, machine=check["machine"], date="2026-12-04T17:18:00+00:00",
                 commit=RUN_COMMIT, dirty=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
