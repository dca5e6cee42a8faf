"""Check the GPU cost model's inputs on a real GPU: prefill tokens/s and decode step times of Llama-3.1-8B.

    python -m benchmarks.gpu.gpu_check --model-json benchmarks/results/gpu_model.json --gpu H200 --out check.json
    python -m benchmarks.gpu.gpu_check --tiny --device cpu ...      # the same steps on a 2-layer model (smoke)

A randomly initialised model of Llama-3.1-8B's exact shape in bf16 (weights do not change the cost) runs a
prefill of ``--prefill-tokens`` tokens and single-token decode steps at the batch and context sizes the model
file lists; each measured figure is written next to the one :mod:`gpu_model` assumed, with their ratio.
Plain torch through transformers (no CUDA graphs, no paged attention), so decode steps measured here are an
upper bound of vLLM's; a ratio far from 1 on prefill, or decode steps faster than assumed, means the model's
efficiency factors need revising.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import RESULTS
from benchmarks.gpu.random_models import TINY_LLAMA

LLAMA_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 14336, "vocab_size": 128256}


def build(shape: dict[str, Any], device: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
                         num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                         num_key_value_heads=shape["kv_heads"], vocab_size=shape["vocab_size"],
                         max_position_embeddings=131072, rope_theta=500000.0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.set_default_dtype(dtype)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    return model.eval()


def timed(device: str, fn: Any, repeat: int) -> float:
    import torch

    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / repeat


def measure(model: Any, device: str, prefill_tokens: int, decode: list[tuple[int, int]], vocab: int
            ) -> dict[str, Any]:
    import inspect

    import torch

    out: dict[str, Any] = {}
    # transformers 5.x names the KV cache (argument and output) ``cache``; earlier versions ``past_key_values``
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.inference_mode():
        ids = torch.randint(0, vocab, (1, prefill_tokens), device=device)
        seconds = timed(device, lambda: model(ids, use_cache=False), 3)
        out["prefill_tokens_per_s"] = round(prefill_tokens / seconds)
        steps: dict[str, float] = {}
        for batch, context in decode:
            prompt = torch.randint(0, vocab, (batch, context), device=device)
            cache = getattr(model(prompt, use_cache=True), name)
            token = torch.randint(0, vocab, (batch, 1), device=device)

            def step() -> None:
                model(token, use_cache=True, **{name: cache})
                cache.crop(-1)  # drop the token just added: the context stays fixed across timed steps

            steps[f"batch{batch}_ctx{context}_ms"] = round(timed(device, step, 5) * 1e3, 2)
            del cache, prompt
            if device == "cuda":
                torch.cuda.empty_cache()
        out["decode_step_ms"] = steps
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--model-json", type=Path, default=RESULTS / "gpu_model.json")
    p.add_argument("--gpu", default="H200", help="the row of the model file to compare with")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (smoke run; figures not comparable)")
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    assumed = json.loads(args.model_json.read_text(encoding="utf-8"))["gpus"][args.gpu]["inputs_to_check"]
    decode = [tuple(map(int, re.findall(r"\d+", key))) for key in assumed["decode_step_ms"]]
    decode = [(b, c) for b, c in decode if b * c * 131072 < 40e9]  # leave the 8B weights room on an 80 GB card
    if args.tiny:
        decode = [(min(b, 4), min(c, 256)) for b, c in decode]
    shape = TINY_LLAMA if args.tiny else LLAMA_8B
    model = build(shape, args.device)
    measured = measure(model, args.device, 512 if args.tiny else args.prefill_tokens, decode, shape["vocab_size"])
    ratios = {"prefill": round(measured["prefill_tokens_per_s"] / assumed["prefill_tokens_per_s"], 3)}
    for key, ms in measured["decode_step_ms"].items():
        if key in assumed["decode_step_ms"]:
            ratios[key] = round(ms / assumed["decode_step_ms"][key], 3)
    result = {"what": "measured on this GPU vs the cost model's assumed inputs (measured / assumed)",
              "comparable": not args.tiny, "gpu_row": args.gpu, "assumed": assumed, "measured": measured,
              "ratios": ratios, "machine": machine_info(), "command": " ".join(sys.argv)}
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"ratios": ratios, "comparable": not args.tiny}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
