"""The README followed as a new user follows it, from an empty folder: each step's exit status and wall time.

    nice -n 10 python -m benchmarks.runs.readme_transcript     # writes benchmarks/results/readme_transcript.{json,md}
    python -m benchmarks.runs.readme_transcript --work DIR --from demo   # go on in DIR from a step

In a new folder: a clone of this checkout's HEAD, a fresh virtual environment, the wheel built as the README's
Install section says, then ``pip install '…whl[cpu,serve]'`` with an empty pip cache (llama.cpp compiles, with
the portable flags the README gives), ``promem demo``, the README's service example (key, ``promem serve``,
the curl calls), its Python client example, an agent talking to ``promem mcp`` over stdio with the official
SDK's client, the README's ``Memory`` example, and last two reinstalls into fresh environments: the same
``[cpu,serve]`` with pip's cache now warm (the llama.cpp wheel built before is reused) and ``[embed,serve]``,
which compiles nothing. The shell and Python examples are read from ``README.md`` (found by a line each
holds) and run as written, with one substitution: port 8000 becomes a free port, so the run cannot meet
another server. Commands run with the environment's ``bin`` first on ``PATH``, as after ``activate``.

Each step is timed as a user waits for it (wall seconds, on a machine other jobs may share: the load average
is recorded at each step's start). A step that fails is recorded with its output's last lines and the run goes
on where later steps do not need it. ``--from STEP`` reruns from that step in the same ``--work`` folder,
keeping the earlier steps' records (the llama.cpp compile is not paid twice).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common.paths import RESULTS, ROOT
from benchmarks.tools.figures import write_result

log = logging.getLogger("readme_transcript")
NAME = "readme_transcript"
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
"""The portable llama.cpp build of the Makefile and the README's Install section."""
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
SERVICE_BLOCK = "export KEY=$(promem keys create"
CLIENT_BLOCK = "from promem_fast.client import Client"
MEMORY_BLOCK = "from promem_fast import Memory\n"
TAIL_LINES = 6
"""Last lines of a step's output kept in the record."""
MCP_AGENT = """\
import json, sys
import anyio
from mcp import Client, StdioServerParameters

async def talk():
    params = StdioServerParameters(command="promem", args=["mcp", "--db", "memory.db", "--tenant", "acme"])
    async with Client(params, read_timeout_seconds=1800) as client:
        tools = sorted(tool.name for tool in (await client.list_tools()).tools)
        added = await client.call_tool("add", {"user_id": "ana", "date": "2024-03-02", "messages": [
            {"role": "user", "content": "I adopted a grey cat called Miso last Sunday."},
            {"role": "assistant", "content": "Congratulations on Miso!"}]})
        found = await client.call_tool("search", {"user_id": "ana", "query": "What pet does Ana have?", "top_k": 3})
        hits = [] if found.is_error else (found.structured_content or {}).get("results", [])
        job = {} if added.is_error else (added.structured_content or {})
        print(json.dumps({"tools": tools, "add_error": added.is_error, "add_state": job.get("state"),
                          "add_done": job.get("done"), "search_error": found.is_error, "hits": len(hits),
                          "found": [h["memory"] for h in hits]}))

anyio.run(talk)
"""
"""An agent using the memory: the official MCP SDK's client starts ``promem mcp`` over stdio, lists its tools,
adds one conversation and searches it."""


def readme_block(marker: str) -> str:
    """The README's python or bash block holding ``marker`` (exactly one must)."""
    blocks = [code for lang, code in BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
              if lang in ("python", "bash") and marker in code]
    if len(blocks) != 1:
        raise SystemExit(f"README.md has {len(blocks)} blocks holding {marker!r}, not one")
    return blocks[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_average() -> float:
    return os.getloadavg()[0]


@dataclass
class Run:
    """The work folder and what the steps hand on: the environment, the key, the server."""

    work: Path
    port: int
    env: dict[str, str] = field(default_factory=dict)
    server: subprocess.Popen[bytes] | None = None

    @property
    def user_dir(self) -> Path:
        """The empty folder a user runs the commands in."""
        return self.work / "user"

    def venv_env(self, venv: str) -> dict[str, str]:
        """The environment as after ``. VENV/bin/activate``, with pip's cache in the work folder."""
        bin_dir = self.work / venv / "bin"
        return {**os.environ, **self.env, "VIRTUAL_ENV": str(self.work / venv),
                "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_CACHE_DIR": str(self.work / "pip-cache"),
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}

    def shell(self, step: str, script: str, cwd: Path, *, venv: str = "venv", timeout: float = 600,
              extra: dict[str, str] | None = None) -> tuple[int, str]:
        """Run ``script`` under bash -e; its output goes to ``logs/STEP.log`` and comes back."""
        return self.command(step, ["bash", "-c", "set -euo pipefail\n" + script], cwd, venv=venv,
                            timeout=timeout, extra=extra)

    def python(self, step: str, code: str, *, timeout: float = 600) -> tuple[int, str]:
        return self.command(step, [str(self.work / "venv" / "bin" / "python"), "-c", code], self.user_dir,
                            timeout=timeout)

    def command(self, step: str, argv: list[str], cwd: Path, *, venv: str = "venv", timeout: float = 600,
                extra: dict[str, str] | None = None) -> tuple[int, str]:
        logs = self.work / "logs"
        logs.mkdir(exist_ok=True)
        path = logs / f"{step}.log"
        with path.open("wb") as out:
            try:
                rc = subprocess.run(argv, cwd=cwd, env={**self.venv_env(venv), **(extra or {})}, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=timeout, check=False).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        return rc, path.read_text(encoding="utf-8", errors="replace")

    def stop_server(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(60)
            except subprocess.TimeoutExpired:
                self.server.kill()
        self.server = None


def with_port(code: str, port: int) -> str:
    return code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")


def wheel_of(run: Run) -> str:
    return str(sorted((run.work / "checkout" / "dist").glob("promem_fast-*.whl"))[-1])


# ---------------------------------------------------------------- the steps, in the README's order

def step_wheel(run: Run) -> tuple[int, str, dict[str, Any]]:
    """Clone, a fresh venv, ``python -m pip install build && python -m build``."""
    rc, out = run.shell("wheel", f"git clone -q {shlex.quote(str(ROOT))} checkout\n"
                                 f"{shlex.quote(sys.executable)} -m venv venv\n"
                                 "cd checkout\npython -m pip install -q build\npython -m build >/dev/null\n"
                                 "ls dist", run.work)
    return rc, out, {}


def install(run: Run, step: str, venv: str, extras: str) -> tuple[int, str, dict[str, Any]]:
    """A fresh venv (unless the wheel step made it) and ``pip install 'WHEEL[extras]'`` into it."""
    make = "" if (run.work / venv).exists() else f"{shlex.quote(sys.executable)} -m venv {venv}\n"
    rc, out = run.shell(step, make + f'pip install "{wheel_of(run)}[{extras}]"\npromem --help >/dev/null',
                        run.work, venv=venv, timeout=3 * 3600, extra={"CMAKE_ARGS": LLAMA_CMAKE_ARGS})
    built = re.findall(r"Building wheel for ([\w.-]+)", out)
    return rc, out, {"compiled": sorted(set(built) - {"promem-fast", "promem_fast"})}


def step_install(run: Run) -> tuple[int, str, dict[str, Any]]:
    return install(run, "install_cpu_serve", "venv", "cpu,serve")


def step_demo(run: Run) -> tuple[int, str, dict[str, Any]]:
    run.user_dir.mkdir(exist_ok=True)
    rc, out = run.command("demo", ["promem", "demo"], run.user_dir, timeout=3600)
    kept = re.search(r"^(\d+) memories from (\d+) sessions", out, re.M)
    return rc, out, {"memories": int(kept.group(1)) if kept else None,
                     "sessions": int(kept.group(2)) if kept else None}


def _service_parts(port: int) -> tuple[str, list[str], str, str]:
    """The README's service block cut where ``promem serve … &`` starts: what runs before it (the key), the
    server's arguments, the wait for it, and the calls after."""
    lines = with_port(readme_block(SERVICE_BLOCK), port).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("promem serve "))
    serve = shlex.split(lines[at].split("#")[0].rstrip().removesuffix("&"))[1:] + ["--port", str(port)]
    waits = next(i for i, line in enumerate(lines) if i > at and "healthz" in line)
    return "\n".join(lines[:at]), serve, "\n".join(lines[at + 1:waits + 1]), "\n".join(lines[waits + 1:])


def step_serve(run: Run) -> tuple[int, str, dict[str, Any]]:
    """The service block up to a listening server: ``export KEY=$(promem keys create …)``, ``promem serve``,
    the wait on ``/healthz``."""
    keys, serve, wait, _ = _service_parts(run.port)
    run.user_dir.mkdir(exist_ok=True)
    rc, out = run.shell("serve_keys", keys + '\nprintf "__KEY__=%s\\n" "$KEY"', run.user_dir)
    found = re.search(r"^__KEY__=(\S+)$", out, re.M)
    if rc or not found:
        return rc or 1, out, {}
    run.env["KEY"] = found.group(1)
    log_file = (run.work / "logs" / "serve.log").open("ab")
    run.server = subprocess.Popen(["promem", *serve], cwd=run.user_dir, env=run.venv_env("venv"), stdout=log_file,
                                  stderr=subprocess.STDOUT)
    rc, waited = run.shell("serve_wait", wait, run.user_dir, timeout=600)
    return rc, out.replace(found.group(1), "KEY") + waited, {"argv": ["promem", *serve]}


def step_http(run: Run) -> tuple[int, str, dict[str, Any]]:
    """The service block's calls: queue a conversation, wait for its job, search."""
    rc, out = run.shell("http", _service_parts(run.port)[3], run.user_dir, timeout=1800)
    results = re.findall(r'\{"results":\s*\[.*\]\}', out)
    hits = len(json.loads(results[-1])["results"]) if results else None
    return rc, out, {"search_hits": hits}


def step_client(run: Run) -> tuple[int, str, dict[str, Any]]:
    rc, out = run.python("client", with_port(readme_block(CLIENT_BLOCK), run.port), timeout=1800)
    run.stop_server()
    return rc, out, {"printed_lines": len(out.splitlines())}


def step_mcp(run: Run) -> tuple[int, str, dict[str, Any]]:
    rc, out = run.python("mcp", MCP_AGENT, timeout=1800)
    said = [line for line in out.splitlines() if line.startswith("{")]
    return rc, out, json.loads(said[-1]) if said else {}


def step_memory(run: Run) -> tuple[int, str, dict[str, Any]]:
    rc, out = run.python("memory", readme_block(MEMORY_BLOCK))
    return rc, out, {}


def step_reinstall(run: Run) -> tuple[int, str, dict[str, Any]]:
    return install(run, "reinstall_cpu_serve", "venv-again", "cpu,serve")


def step_embed(run: Run) -> tuple[int, str, dict[str, Any]]:
    return install(run, "install_embed_serve", "venv-embed", "embed,serve")


STEPS: dict[str, tuple[str, Callable[[Run], tuple[int, str, dict[str, Any]]]]] = {
    "wheel": ("python -m pip install build && python -m build (fresh clone, fresh venv)", step_wheel),
    "install_cpu_serve": ("pip install 'WHEEL[cpu,serve]', empty pip cache (compiles llama.cpp)", step_install),
    "demo": ("promem demo (empty folder)", step_demo),
    "serve": ("export KEY=$(promem keys create …); promem serve --profile cpu &; wait for /healthz", step_serve),
    "http": ("curl: queue a conversation, wait for the job, search", step_http),
    "client": ("the README's Python client example", step_client),
    "mcp": ("an MCP client (official SDK) over stdio: list tools, add, search", step_mcp),
    "memory": ("the README's Memory example", step_memory),
    "reinstall_cpu_serve": ("pip install 'WHEEL[cpu,serve]' into a fresh venv, pip cache warm", step_reinstall),
    "install_embed_serve": ("pip install 'WHEEL[embed,serve]' into a fresh venv (nothing compiles)", step_embed),
}


def tail(text: str) -> list[str]:
    return [line[:200] for line in text.rstrip().splitlines()[-TAIL_LINES:]]


def run_steps(run: Run, names: list[str], records: dict[str, dict[str, Any]]) -> None:
    for name in names:
        what, fn = STEPS[name]
        log.info("step %s: %s", name, what)
        load = load_average()
        start = time.monotonic()
        try:
            rc, out, seen = fn(run)
        except Exception as exc:  # a step's own fault (a README block missing, say) is its record, not the run's end
            rc, out, seen = 1, f"{type(exc).__name__}: {exc}", {}
        wall = time.monotonic() - start
        records[name] = {"step": name, "what": what, "rc": rc, "wall_s": round(wall, 1),
                         "loadavg_1m_start": round(load, 2), **seen, "tail": tail(out)}
        log.info("step %s: exit %d in %.1f s %s", name, rc, wall, seen)
        save(run, records)
    run.stop_server()


def installed_commit(run: Run) -> str | None:
    """The commit the steps installed: the clone's HEAD (the checkout may have moved on since)."""
    done = subprocess.run(["git", "-C", str(run.work / "checkout"), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def save(run: Run, records: dict[str, dict[str, Any]]) -> None:
    """The result file (figures: each step's exit status and seconds) and its Markdown table."""
    ordered = [records[name] for name in STEPS if name in records]
    figures: dict[str, Any] = {}
    for record in ordered:
        figures[f"{record['step']}.rc"] = record["rc"]
        figures[f"{record['step']}.wall_s"] = record["wall_s"]
        figures[f"{record['step']}.wall_min"] = round(record["wall_s"] / 60, 1)
    figures["steps"] = len(ordered)
    figures["steps_ok"] = sum(r["rc"] == 0 for r in ordered)
    for key in ("memories", "search_hits", "hits"):
        for record in ordered:
            if isinstance(record.get(key), int):
                figures[f"{record['step']}.{key}"] = record[key]
    if "mcp" in records and records["mcp"].get("tools"):
        figures["mcp.tools"] = len(records["mcp"]["tools"])
    rows = [[r["step"], r["what"], r["rc"], r["wall_s"], r["loadavg_1m_start"]] for r in ordered]
    tables = {"steps": {"columns": ["step", "what", "exit", "seconds", "load 1m at start"], "rows": rows}}
    write_result(NAME, figures, "nice -n 10 python -m benchmarks.runs.readme_transcript", tables=tables,
                 commit=installed_commit(run), dirty=False, note=f"work folder {run.work}; each step's record: " + json.dumps(ordered, ensure_ascii=False))
    lines = ["# The README followed from an empty folder", "",
             "`nice -n 10 python -m benchmarks.runs.readme_transcript` (figures in `readme_transcript.json`).", "",
             "| step | what | exit | seconds | load 1m at start |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['step']} | {r['what']} | {r['rc']} | {r['wall_s']} | {r['loadavg_1m_start']} |" for r in ordered]
    lines += ["", "Last lines of each step's output:", ""]
    for r in ordered:
        seen = {k: v for k, v in r.items() if k not in ("step", "what", "rc", "wall_s", "loadavg_1m_start", "tail")}
        lines += [f"**{r['step']}** {json.dumps(seen, ensure_ascii=False) if seen else ''}", "", "```",
                  *r["tail"], "```", ""]
    (RESULTS / f"{NAME}.md").write_text("\n".join(lines), encoding="utf-8")


def earlier_records() -> dict[str, dict[str, Any]]:
    path = RESULTS / f"{NAME}.json"
    if not path.exists():
        return {}
    note = json.loads(path.read_text(encoding="utf-8")).get("note") or ""
    _, _, listed = note.partition("each step's record: ")
    return {r["step"]: r for r in json.loads(listed)} if listed else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="the work folder (default: a new one under /tmp)")
    parser.add_argument("--from", dest="start", choices=list(STEPS), default="wheel",
                        help="first step to run; the earlier ones' records are kept from the result file")
    parser.add_argument("--only", choices=list(STEPS), nargs="+", default=None, help="run just these steps")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    work = args.work or Path(f"/tmp/promem-readme-{time.strftime('%Y%m%d-%H%M%S')}")
    work.mkdir(parents=True, exist_ok=True)
    run = Run(work=work.resolve(), port=free_port())
    names = args.only or list(STEPS)[list(STEPS).index(args.start):]
    records = {} if args.start == "wheel" and not args.only else earlier_records()
    if "KEY" not in run.env and "serve" not in names and {"http", "client"} & set(names):
        raise SystemExit("the http and client steps need the serve step (its key and server) in the same run")
    try:
        run_steps(run, names, records)
    finally:
        run.stop_server()
    return 0 if all(records[n]["rc"] == 0 for n in names if n in records) else 1


if __name__ == "__main__":
    sys.exit(main())
