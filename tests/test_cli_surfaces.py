"""Rough edges of the command line a user meets first: a closed pipe, progress in a log, the engine's share of
the wall in the summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, make_session, scripted_config, write_jsonl
from promem_fast import Engine

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sessions(n: int) -> list:
    return [make_session(f"s{i}", "Maya", [(f"I adopted a cat named Tom{i} on Saturday.", "Lovely!")])
            for i in range(n)]


def test_a_reader_that_went_away_ends_the_command_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written, as `promem config | head` ends
    try:
        done = subprocess.run([sys.executable, "-m", "promem_fast.cli", "config"], stdout=write,
                              stderr=subprocess.PIPE, env=ENV, timeout=60, text=True)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")  # 128 + SIGPIPE, as a C tool killed by it; no traceback


def test_progress_is_a_plain_line_per_session_when_stderr_is_a_file(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", sessions(4))
    done = subprocess.run([sys.executable, "-m", "promem_fast.cli", "extract", str(source), "-o",
                           str(tmp_path / "out.jsonl"), "--profile", "scripted", "--set", "progress=true"],
                          capture_output=True, env=ENV, timeout=120, text=True)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("extract: ")]
    counts = [re.match(r"extract: (\d+)/4 sessions \((\d+)%\), [\d.e+-]+ sessions/s$", line).groups()
              for line in lines]
    assert counts == [("1", "25"), ("2", "50"), ("3", "75"), ("4", "100")]
    assert "\r" not in done.stderr  # no bar redrawn over itself


def test_the_engine_share_leaves_out_model_loads_made_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import promem_fast.services as services

    real = services.create

    def slow_create(*args: object) -> object:  # a model that takes a while to load, as MiniLM or SmolLM2 do
        time.sleep(0.4)
        return real(*args)

    monkeypatch.setattr(services, "create", slow_create)
    engine = Engine(scripted_config())
    assert engine.services.embedder is not None  # loaded before the run, as `extract --db` opens the store
    engine.extract(sessions(2))
    summary = engine.summary
    assert summary.load_seconds >= 0.8  # the embedder, then the chat model inside the run
    assert 0 <= summary.engine_seconds <= summary.wall_seconds
    ms = float(re.search(r"engine (-?[\d.]+) ms/session", summary.table()).group(1))
    assert ms >= 0
