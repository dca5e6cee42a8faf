"""Every ``python`` and ``bash`` example of the README runs, in order, in one temporary folder.

They run as written with three substitutions, so the suite takes seconds and cannot collide with another
server: the ``cpu`` profile becomes the ``scripted`` stand-in, port 8000 a free port, and ``promem`` the
module of this checkout. ``sessions.jsonl`` is the shipped sample. A ``promem serve ... &`` line is started
by the test (and stopped at its end) rather than left to the shell. A block that cannot run here is listed
in :data:`NOT_RUN` with the reason; each entry must match exactly one block, so none is skipped silently.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from promem_fast.testing.service_processes import free_port

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
NOT_RUN = {
    "make demo": "builds the environment the suite runs in (minutes of compiling llama.cpp)",
    "python -m build": "builds and installs the wheel: `make wheel-check` (run by CI) does exactly this in a fresh venv",
    "--profile gpu": "needs a GPU with vLLM",
    "llama-server -m": "needs an OpenAI-compatible server with a model (llama.cpp's llama-server or vllm serve)",
    "promem eval halumem     --data": "needs the benchmarks' data files",
    "--profile paper": "needs a GPU box, the paper's models and an OpenAI-compatible endpoint",
    "PROMEM_DB_URL=postgresql": "needs a PostgreSQL server at that address (tests/test_store_postgres.py runs a real one)",
}


def examples() -> list[tuple[str, str]]:
    """The README's python and bash blocks, in order, less those of :data:`NOT_RUN`."""
    blocks = [(lang, code) for lang, code in BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
              if lang in ("python", "bash")]
    for marker in NOT_RUN:
        assert sum(marker in code for _, code in blocks) == 1, f"NOT_RUN entry {marker!r} must match one block"
    return [(lang, code) for lang, code in blocks if not any(marker in code for marker in NOT_RUN)]


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], list[subprocess.Popen[bytes]]]]:
    shutil.copy(ROOT / "promem_fast" / "data" / "demo_sessions.jsonl", tmp_path / "sessions.jsonl")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "promem"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m promem_fast.cli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    servers: list[subprocess.Popen[bytes]] = []
    try:
        yield tmp_path, env, servers
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()


def adapt(code: str, port: int) -> str:
    return (code.replace('profile("cpu")', 'profile("scripted")').replace("--profile cpu", "--profile scripted")
            .replace("127.0.0.1:8000", f"127.0.0.1:{port}"))


def test_every_readme_example_runs(workdir: tuple[Path, dict[str, str], list[subprocess.Popen[bytes]]]) -> None:
    cwd, env, servers = workdir
    port = free_port()
    outputs = []
    ran = examples()
    assert [lang for lang, _ in ran].count("python") >= 3 and [lang for lang, _ in ran].count("bash") >= 1
    for lang, code in ran:
        code = adapt(code, port)
        if lang == "python":
            done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=300)
        else:
            kept = []
            for line in code.splitlines():
                if line.startswith("promem serve ") and line.split("#")[0].rstrip().endswith("&"):
                    args = shlex.split(line.split("#")[0].rstrip()[:-1])[1:] + ["--port", str(port)]
                    log = open(cwd / "serve.log", "ab")  # noqa: SIM115 (the server outlives this block)
                    servers.append(subprocess.Popen([sys.executable, "-m", "promem_fast.cli", *args], cwd=cwd,
                                                    env=env, stdout=log, stderr=log))
                    continue
                kept.append(line)
            # only an exported KEY reaches the next block, as only an exported one reaches a program run later
            script = "set -euo pipefail\n" + "\n".join(kept) + '\nprintf "\\n__KEY__=%s\\n" "$(printenv KEY || true)"\n'
            done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=300)
            found = re.search(r"^__KEY__=(.*)$", done.stdout, re.M)
            if found and found.group(1):
                env["KEY"] = found.group(1)
        assert done.returncode == 0, f"{lang} example failed:\n{code}\n--- stderr:\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    served, client = outputs[-2], outputs[-1]  # the service's shell example, then the client's
    assert '"memory":' in served and "Denver" in served and '"score":' in served
    assert "Denver" in client
    assert (cwd / "other.db").exists() and (cwd / "memory.jsonl").exists()
