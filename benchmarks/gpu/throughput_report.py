"""The throughput harness's figures: the JSON summary of a run and its plain-text rendering."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from benchmarks.common.measure import machine_info
from benchmarks.common.workload import dialogue_text
from benchmarks.gpu.replay import GENERATED_TOKENS_PER_SESSION, PAPER_STAGE_SHARES, PAPER_TOKENS_PER_SESSION, ROLE_STAGE
from benchmarks.gpu.throughput_setup import Setup
from promem_fast import Engine
from promem_fast.backends.base import LLMBackend
from promem_fast.testing.llm_scripted import approx_tokens
from promem_fast.types import Session


def token_stats(sessions: Sequence[Session], llm: LLMBackend | None) -> dict[str, Any]:
    """Mean dialogue size: characters / 4 always, and in the model's own tokens when there is a model."""
    texts = [dialogue_text(s) for s in sessions]
    out: dict[str, Any] = {"mean_chars": round(sum(map(len, texts)) / len(texts)),
                           "mean_tokens_chars_over_4": round(sum(map(approx_tokens, texts)) / len(texts))}
    if llm is not None:
        empty = llm.count_tokens([{"role": "user", "content": ""}])
        counted = [llm.count_tokens([{"role": "user", "content": t}]) - empty for t in texts]
        out["mean_tokens_model_tokenizer"] = round(sum(counted) / len(counted))
        out["chars_per_model_token"] = round(sum(map(len, texts)) / max(sum(counted), 1), 2)
    return out


def summarize(engine: Engine, setup: Setup, args: argparse.Namespace, source: str, sizes: dict[str, Any],
              finished: bool) -> dict[str, Any]:
    summary = engine.summary
    replay = setup.replay
    n = summary.sessions
    wall = summary.wall_seconds
    stages = summary.stats.to_dict()["stages"]
    role_seconds: dict[str, float] = {}
    if replay is not None:
        for role, tally in replay.roles.items():
            stage = ROLE_STAGE.get(role, "?")
            role_seconds[stage] = role_seconds.get(stage, 0.0) + tally.model_seconds
            if stage in stages:
                stages[stage]["model_seconds"] = round(role_seconds[stage], 3)
    prompt = sum(s["prompt_tokens"] for s in stages.values())
    completion = sum(s["completion_tokens"] for s in stages.values())
    backend = sum(summary.backend_seconds.values())
    out: dict[str, Any] = {
        "finished": finished,
        "backend": args.backend,
        "device": setup.device,
        "taken": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "notes": setup.notes,
        "sessions": {"count": n, "asked": args.sessions, "source": source, **sizes},
        "config": {"max_in_flight": setup.config.max_in_flight, "llm_batch_size": setup.config.llm.batch_size,
                   "max_tokens": {k: setup.config.pipeline.max_tokens[k] for k in ROLE_STAGE},
                   "ignore_eos": setup.config.llm.ignore_eos},
        "wall_seconds": round(wall, 3),
        "sessions_per_hour": round(n / wall * 3600, 1) if wall > 0 else None,
        "prompt_tokens_per_second": round(prompt / wall, 1) if wall > 0 else None,
        "completion_tokens_per_second": round(completion / wall, 1) if wall > 0 else None,
        "prompt_tokens_per_session": round(prompt / n) if n else None,
        "completion_tokens_per_session": round(completion / n) if n else None,
        "paper_tokens_per_session": PAPER_TOKENS_PER_SESSION,
        "paper_stage_shares": PAPER_STAGE_SHARES,
        "assumed_generated_tokens_per_session": GENERATED_TOKENS_PER_SESSION if setup.config.llm.ignore_eos else None,
        "engine_overhead_ms_per_session": round((wall - backend) / n * 1e3, 2) if n else None,
        "rounds": summary.rounds,
        "backend_calls": summary.backend_calls,
        "backend_seconds": {k: round(v, 3) for k, v in summary.backend_seconds.items()},
        "stages": stages,
        "counts": summary.stats.counts,
        "machine": machine_info(),
    }
    replays = {kind: r for kind, r in (("llm", replay), ("nli", setup.nli), ("embedder", setup.embedder)) if r}
    if replays:
        out["replays"] = {kind: r.seconds() for kind, r in replays.items()}
        unreplayed = wall - sum(r.replay_seconds for r in replays.values())
        out["sessions_per_hour_without_replay"] = round(n / unreplayed * 3600, 1) if n and unreplayed > 0 else None
    if replay is not None:
        out["model_seconds"] = round(replay.model_seconds, 3)
        out["replay_seconds"] = round(replay.replay_seconds, 3)
        out["roles"] = {role: dataclasses.asdict(t) for role, t in sorted(replay.roles.items())}
        # A partial run finished no session, so the per-role tallies are its only token figures.
        out["model_prompt_tokens_per_second"] = round(
            sum(t.prompt_tokens for t in replay.roles.values()) / max(replay.model_seconds, 1e-9), 1)
        out["model_completion_tokens_per_second"] = round(
            sum(t.completion_tokens for t in replay.roles.values()) / max(replay.model_seconds, 1e-9), 1)
    return out


def render(result: dict[str, Any]) -> str:
    """The plain-text report (the JSON holds the same figures)."""
    s = result["sessions"]
    sizes = f"{s['mean_tokens_chars_over_4']} tokens by characters/4"
    if "mean_tokens_model_tokenizer" in s:
        sizes += f", {s['mean_tokens_model_tokenizer']} model tokens ({s['chars_per_model_token']} chars/token)"
    lines = [f"promem_fast throughput: {result['backend']} on {result['device']} "
             f"({'; '.join(result['machine']['gpus']) or result['machine']['cpu']})",
             f"sessions: {s['count']} of {s['asked']} ({s['source']}), mean dialogue {sizes}",
             *[f"  note: {note}" for note in result["notes"]]]
    if not result["finished"]:
        lines.append("  NOT FINISHED: interrupted; session figures cover the sessions done, role tallies all calls")
    per_hour = result["sessions_per_hour"]
    lines += [
        f"sessions/hour             {per_hour if per_hour is not None else '-'}"
        + (f"   ({result['sessions_per_hour_without_replay']} without the replay's own time)"
           if result.get("sessions_per_hour_without_replay") else ""),
        f"prompt tokens/s           {result['prompt_tokens_per_second']}",
        f"completion tokens/s       {result['completion_tokens_per_second']}",
        f"tokens/session            {result['prompt_tokens_per_session']} prompt + "
        f"{result['completion_tokens_per_session']} completion (paper Table 6: {PAPER_TOKENS_PER_SESSION} in all)",
        f"engine overhead           {result['engine_overhead_ms_per_session']} ms/session "
        "(wall minus time inside backends)",
        f"wall {result['wall_seconds']} s, {result['rounds']} rounds, backend seconds {result['backend_seconds']}",
    ]
    if "model_seconds" in result:
        lines.append(f"model seconds {result['model_seconds']} ({'GPU' if result['device'] == 'cuda' else 'CPU'}), "
                     f"replay seconds {result['replay_seconds']}; model alone: "
                     f"{result['model_prompt_tokens_per_second']} prompt tok/s, "
                     f"{result['model_completion_tokens_per_second']} completion tok/s")
    aux = [f"{kind} {r['model_seconds']} s (replay {r['replay_seconds']} s)"
           for kind, r in result.get("replays", {}).items() if kind != "llm"]
    if aux:
        lines.append("random aux models: " + ", ".join(aux))
    lines.append(f"{'stage':<7}{'calls':>7}{'prompt tok':>12}{'compl tok':>11}{'nli':>7}{'embeds':>8}"
                 f"{'seconds':>10}{'model s':>10}")
    for name, st in result["stages"].items():
        model_s = st.get("model_seconds")
        lines.append(f"{name:<7}{st['calls']:>7}{st['prompt_tokens']:>12}{st['completion_tokens']:>11}"
                     f"{st['nli_pairs']:>7}{st['embedded_texts']:>8}{st['seconds']:>10.2f}"
                     f"{model_s if model_s is not None else '-':>10}")
    lines.append("seconds: the engine's attribution of every backend batch (replay included); model s: the LLM's "
                 "own share (on one GPU, GPU-seconds)")
    return "\n".join(lines)
