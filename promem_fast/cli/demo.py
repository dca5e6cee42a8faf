"""``promem demo``: the shipped sample sessions through the whole pipeline, from any folder, ending with a few
of the memories it kept (each with the turn it came from), the command that draws them, and a plain word on
what a run on the 135M CPU default does and does not show."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

from promem_fast.cli.common import config_args

DATA = Path(__file__).resolve().parent.parent / "data"
SAMPLE = DATA / "demo_sessions.jsonl"
"""The four sample sessions (shipped in the wheel)."""
DEMO_CONFIG = DATA / "demo.yaml"
"""The CPU default with shorter reply budgets, so the sample finishes in minutes on two cores."""
SHOWN = 4
"""Memories printed at the end."""

WEAK_MODEL_NOTE = """\
This run used SmolLM2-135M-Instruct on the CPU: it shows what the pipeline costs and the shape of its output,
not memory quality (a 135M model writes shallow or wrong facts and, as NLI judge, accepts nearly all of them).
For real memories run the same sessions on a real model:
  promem extract {sample} -o graphs.jsonl --profile gpu       # vLLM + Llama-3.1-8B on a GPU
  promem extract {sample} -o graphs.jsonl --profile cpu \\
      --set llm.backend=openai --set llm.base_url=http://127.0.0.1:8080/v1 --set llm.model=MODEL
      # any OpenAI-compatible server: llama.cpp's llama-server, vllm serve, ..."""


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="extract the shipped sample sessions and show a few memories (works from any folder)")
    p.add_argument("-o", "--output", type=Path, default=Path("out/demo_graphs.jsonl"),
                   help="JSONL of graphs to write (default: out/demo_graphs.jsonl; replaced if it exists)")
    p.add_argument("--sample-path", action="store_true",
                   help="print where the sample sessions are installed and stop (to copy them: "
                        'cp "$(promem demo --sample-path)" sessions.jsonl)')
    config_args(p)  # default: the shipped demo.yaml
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from promem_fast.cli import main

    if args.sample_path:
        print(SAMPLE)
        return 0
    if args.config is None and args.profile is None:
        args.config = DEMO_CONFIG
    args.output.parent.mkdir(parents=True, exist_ok=True)
    argv = ["extract", str(SAMPLE), "-o", str(args.output), "--overwrite"]
    argv += ["--config", str(args.config)] if args.config is not None else []
    argv += ["--profile", args.profile] if args.profile is not None else []
    argv += [f"--set={item}" for item in args.overrides] + (["--no-progress"] if args.no_progress else [])
    argv += ["--max-in-flight", str(args.max_in_flight)] if args.max_in_flight is not None else []
    status = main(argv)
    if args.output.exists():
        print()
        print(closing(args.output, SAMPLE, weak=_weak_model(args)))
    return status


def closing(graphs: Path, sessions: Path, *, weak: bool) -> str:
    """A few memories of ``graphs`` with the turn each came from, the command that draws one session, and (for
    the 135M default) what such a run shows."""
    from promem_fast.io import read_graphs, read_sessions
    from promem_fast.types import Session

    said = {s.session_id: s for s in read_sessions(sessions) if isinstance(s, Session)}
    kept = [g for g in read_graphs(graphs) if not isinstance(g, Exception)]
    lines = [f"{sum(len(g.nodes) for g in kept)} memories from {len(kept)} sessions; a few of them:"]
    picks = [(g, n) for i in range(SHOWN) for g in kept if i < len(g.nodes) for n in [g.nodes[i]]][:SHOWN]
    for graph, node in picks:
        lines.append(f"  [{graph.session_id}] {node.text}")
        turn = _turn_text(said.get(graph.session_id), node.turn_ids)
        if turn:
            lines.append("      " + textwrap.shorten(f"from turn {node.turn_ids[0]}: {turn}", 110, placeholder=" …"))
    if not picks:
        lines.append("  (none: the model kept nothing; see each record's stats.failures)")
    first = picks[0][0].session_id if picks else (kept[0].session_id if kept else "SESSION")
    lines.append(f"Draw a session's memory graph: promem view {graphs} --session {first} -o {first}.html")
    if weak:
        lines.append(WEAK_MODEL_NOTE.format(sample=sessions))
    return "\n".join(lines)


def _turn_text(session: Any, turn_ids: list[Any]) -> str:
    if session is None or not turn_ids:
        return ""
    return " ".join(t.text for t in session.turns if t.turn_id == turn_ids[0] and t.role == session.owner_role)


def _weak_model(args: argparse.Namespace) -> bool:
    """Whether the run's chat model is the shipped 135M default (llama.cpp with no model named)."""
    from promem_fast.cli.common import build_config

    config = build_config(args)
    return config.llm.backend == "llamacpp" and config.llm.model is None
