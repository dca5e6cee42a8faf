"""The ``promem`` command: extraction of a HaluMem-schema user, resume after ``kill -9``, bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, tomas_sessions, write_jsonl
from promem_fast.cli import main

SCRIPTED = ["--profile", "scripted", "--no-progress"]


@pytest.fixture(scope="module")
def halumem_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("in") / "halumem.jsonl", tomas_sessions())


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 sessions (the hand-written user's 12, four times with fresh ids): a run long enough to kill midway."""
    sessions = [dataclasses.replace(s, session_id=f"{s.session_id}#{copy}") for copy in range(4)
                for s in tomas_sessions()]
    return write_jsonl(tmp_path_factory.mktemp("in") / "long.jsonl", sessions)


def read_ids(path: Path) -> list[str]:
    return [json.loads(line)["session_id"] for line in path.read_text(encoding="utf-8").splitlines()]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for command in ("extract", "export", "models", "config"):
        assert command in text


def test_extract_writes_one_graph_per_session_with_stage_statistics(
        halumem_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "graphs.jsonl"
    assert main(["extract", str(halumem_file), "-o", str(out), *SCRIPTED]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["session_id"] for r in records] == [s.session_id for s in tomas_sessions()]
    for r in records:
        assert {"draft", "cc", "hv", "da", "rel"} <= set(r["stats"]["stages"])
        assert r["stats"]["stages"]["draft"]["calls"] >= 1 and r["nodes"]
    summary = capsys.readouterr().out
    assert "sessions 12" in summary and "sessions/s" in summary and f"graphs: {out}" in summary
    assert main(["extract", str(halumem_file), "-o", str(out), *SCRIPTED]) == 2  # refuses to clobber


def test_bad_lines_are_skipped_into_the_rejects_file(tmp_path: Path) -> None:
    good = tomas_sessions(2)
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(good[0].to_dict()), "{broken", json.dumps({"session_id": "empty", "user": "A", "turns": []}),
             json.dumps(good[1].to_dict())]
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["extract", str(path), "-o", str(out), *SCRIPTED]) == 0
    assert read_ids(out) == [good[0].session_id, good[1].session_id]
    rejects = [json.loads(x) for x in (tmp_path / "out.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["session_id"], r["field"]) for r in rejects] == [(2, None, None), (3, "empty", "turns")]
    assert main(["extract", str(path), "-o", str(tmp_path / "o2.jsonl"), "--on-error", "stop", *SCRIPTED]) == 2


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_then_resume_loses_and_duplicates_nothing(long_file: Path, tmp_path: Path, seed: int) -> None:
    reference = tmp_path / "ref.jsonl"
    assert main(["extract", str(long_file), "-o", str(reference), "--no-timings", *SCRIPTED]) == 0
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "promem_fast.cli", "extract", str(long_file), "-o", str(out), "--no-timings",
           "--max-in-flight", "4", *SCRIPTED]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(seed)
    kills = 0
    args = cmd
    for _ in range(3):  # kill at a random number of finished sessions, then resume
        target = rng.randint(1, 44)
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if out.exists() and out.read_bytes().count(b"\n") >= target:
                proc.send_signal(signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.005)
        proc.wait()
        args = [*cmd, "--resume"]
    assert subprocess.run(args, env=env, capture_output=True).returncode == 0
    assert kills >= 2
    ids = read_ids(out)
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 48
    assert out.read_bytes() == reference.read_bytes()
