"""Where a decode step of the transformers backend goes on a GPU: its ``generate`` call against lighter variants.

    python -m benchmarks.gpu.generate_probe --out probe.json            # random Llama-3.1-8B shape, CUDA, bf16
    python -m benchmarks.gpu.generate_probe --tiny --device cpu --out probe.json   # smoke

On an H200 the harness's ``generate`` batches took 120 ms a decode step at 2 rows and about 220 ms at 32,
while a bare forward step of the same model took 36 ms at batch 1 (``gpu_check.py``). This probe times, on one
randomly initialised model held in memory (weights do not change the cost), left-padded prompts of mixed
lengths as the backend pads them, for each variant:

- ``backend``: ``model.generate`` exactly as :meth:`TransformersLLM._run` calls it (the backend's own logits
  processor masking end tokens, its per-row budget stopping criterion);
- ``plain``: ``model.generate`` with only ``max_new_tokens``/``min_new_tokens`` (end tokens never end a row);
- ``static``: ``plain`` with a static KV cache (``cache_implementation="static"``);
- ``forward``: a hand loop of single-token forward steps on the dynamic cache, no generation utilities.

Each variant runs once with 1 new token and once with ``--new-tokens``; the difference over the extra steps is
its decode step time, so the prefill is not counted in it. The JSON is rewritten after every measurement.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.gpu.gpu_check import LLAMA_8B, build
from benchmarks.gpu.random_models import TINY_LLAMA
from promem_fast.backends.llm_transformers import _RowBudget, _RowDecoder


def prompts(torch: Any, rows: int, width: int, vocab: int, device: str) -> tuple[Any, Any]:
    """Left-padded ids and mask, lengths spread from half the width to all of it (as a sorted batch is)."""
    ids = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for row in range(rows):
        length = width // 2 + (width - width // 2) * (row + 1) // rows
        ids[row, width - length:] = torch.randint(1, vocab, (length,))
        mask[row, width - length:] = 1
    return ids.to(device), mask.to(device)


def variant(name: str, model: Any, torch: Any, ids: Any, mask: Any, new: int, eos: list[int]) -> None:
    rows, width = ids.shape
    if name == "forward":
        out = model(ids, attention_mask=mask, use_cache=True)
        cache = out.past_key_values
        token = out.logits[:, -1:].argmax(-1)
        for _ in range(new - 1):
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            out = model(token, attention_mask=mask, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
        return
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "max_new_tokens": new, "do_sample": False}
    if name in ("backend", "decoder", "budget"):
        from transformers import LogitsProcessorList, StoppingCriteriaList

        if name != "budget":
            decoder = _RowDecoder(torch, [0.0] * rows, [0] * rows, eos, ids.device)
            kwargs["logits_processor"] = LogitsProcessorList([decoder])
        else:
            kwargs["min_new_tokens"] = new
        if name != "decoder":
            kwargs["stopping_criteria"] = StoppingCriteriaList([_RowBudget(torch, width, [new] * rows, ids.device)])
    else:
        kwargs["min_new_tokens"] = new
        if name == "static":
            kwargs["cache_implementation"] = "static"
    model.generate(**kwargs)


def timed(device: str, fn: Any) -> float:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--batches", type=int, nargs="+", default=[2, 32])
    p.add_argument("--width", type=int, default=3000, help="padded prompt width (the longest prompt)")
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--variants", nargs="+", default=["backend", "plain", "static", "forward"])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    import torch
    import transformers

    shape = TINY_LLAMA if args.tiny else LLAMA_8B
    model = build(shape, args.device)
    model.generation_config = transformers.GenerationConfig(eos_token_id=[2], pad_token_id=0)
    result: dict[str, Any] = {"what": __doc__.split("\n", 1)[0], "shape": shape, "width": args.width,
                              "new_tokens": args.new_tokens, "device": args.device,
                              "transformers": transformers.__version__, "torch": torch.__version__,
                              "decode_step_ms": {}, "prefill_s": {}, "errors": {}, "machine": machine_info()}
    with torch.inference_mode():
        for rows in args.batches:
            ids, mask = prompts(torch, rows, args.width, shape["vocab_size"], args.device)
            for name in args.variants:
                key = f"{name}_batch{rows}"
                try:
                    variant(name, model, torch, ids, mask, 2, [2])  # warm-up
                    one = timed(args.device, lambda: variant(name, model, torch, ids, mask, 1, [2]))
                    many = timed(args.device, lambda: variant(name, model, torch, ids, mask, args.new_tokens, [2]))
                except Exception as exc:  # noqa: BLE001 - a variant this transformers lacks is recorded, not fatal
                    result["errors"][key] = f"{type(exc).__name__}: {exc}"[:300]
                    print(key, "failed:", result["errors"][key], flush=True)
                    continue
                result["prefill_s"][key] = round(one, 3)
                result["decode_step_ms"][key] = round((many - one) / (args.new_tokens - 1) * 1e3, 2)
                print(key, "prefill+1", round(one, 3), "s; decode step", result["decode_step_ms"][key], "ms",
                      flush=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            if args.device == "cuda":
                torch.cuda.empty_cache()
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
