"""``promem extract`` on bad paths and bad records: one clear line and exit 2, never a traceback, never lost data."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, tomas_sessions, write_jsonl
from promem_fast.cli import main

SCRIPTED = ["--profile", "scripted", "--no-progress", "--no-timings"]


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("in") / "six.jsonl", tomas_sessions(6))


@pytest.fixture(scope="module")
def reference(six: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    assert main(["extract", str(six), "-o", str(out), *SCRIPTED]) == 0
    return out.read_bytes()


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line the command printed on stderr (it must be exactly one, starting with ``promem:``)."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("promem: "), lines
    return lines[0]


def ids(path: Path) -> list[str]:
    return [json.loads(line)["session_id"] for line in path.read_text(encoding="utf-8").splitlines()]


def with_bad_line(six: Path, tmp_path: Path, at: int, bad: bytes) -> Path:
    lines = six.read_bytes().splitlines()
    lines.insert(at - 1, bad)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


# ------------------------------------------------------------------------------------------- data loss
def test_output_that_is_the_input_is_refused_and_the_input_kept(
        six: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "same.jsonl"
    source.write_bytes(six.read_bytes())
    (tmp_path / "link.jsonl").symlink_to(source)
    for spelled in (source, tmp_path / "link.jsonl", tmp_path / "." / "same.jsonl"):
        assert main(["extract", str(source), "-o", str(spelled), "--overwrite", *SCRIPTED]) == 2
        assert "is the input file" in one_error_line(capsys)
    assert source.read_bytes() == six.read_bytes()


@pytest.mark.parametrize("at", [2, 5])
def test_on_error_stop_writes_every_session_before_the_bad_line(
        six: Path, tmp_path: Path, at: int, capsys: pytest.CaptureFixture[str]) -> None:
    source = with_bad_line(six, tmp_path, at, b'{"session_id": "bad", "user": "Ann", "turns": []}')
    out = tmp_path / "out.jsonl"
    assert main(["extract", str(source), "-o", str(out), "--on-error", "stop", *SCRIPTED]) == 2
    assert ids(out) == [s.session_id for s in tomas_sessions(at - 1)]
    (reject,) = [json.loads(x) for x in (tmp_path / "out.rejects.jsonl").read_text().splitlines()]
    assert (reject["line"], reject["session_id"], reject["field"]) == (at, "bad", "turns")
    assert f"in.jsonl:{at}" in one_error_line(capsys)


@pytest.mark.parametrize("policy", ["skip", "stop"])
def test_a_lone_surrogate_becomes_a_reject_under_either_policy(
        six: Path, tmp_path: Path, policy: str) -> None:
    bad_text = b'{"session_id": "t", "user": "Ann", "turns": [{"role": "user", "text": "hi \\ud800"}]}'
    bad_id = b'{"session_id": "s\\udc00", "user": "Ann", "turns": []}'
    source = with_bad_line(with_bad_line(six, tmp_path, 3, bad_text), tmp_path, 5, bad_id)
    out = tmp_path / "out.jsonl"
    status = main(["extract", str(source), "-o", str(out), "--on-error", policy, *SCRIPTED])
    rejects = [json.loads(x) for x in (tmp_path / "out.rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    if policy == "skip":
        assert status == 0 and len(ids(out)) == 6
        assert [(r["line"], r["field"]) for r in rejects] == [(3, "turns[0].text"), (5, "session_id")]
    else:
        assert status == 2 and len(ids(out)) == 2 and [r["line"] for r in rejects] == [3]


# ------------------------------------------------------------------------------------------- clear errors
def test_a_missing_input_or_a_directory_is_one_line_and_leaves_no_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    for source, cause in ((tmp_path / "nope.jsonl", "No such file"), (tmp_path, "is a directory")):
        assert main(["extract", str(source), "-o", str(out), *SCRIPTED]) == 2
        line = one_error_line(capsys)
        assert str(source) in line and cause in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_output_that_cannot_be_a_file_is_one_line_and_blocks_no_rerun(
        six: Path, tmp_path: Path, reference: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "afile").write_text("x")
    cases = [(tmp_path / "dir.jsonl", "the output is a directory"),
             (tmp_path / "afile" / "sub" / "out.jsonl", f"{tmp_path / 'afile'} is not a directory")]
    for out, cause in cases:
        assert main(["extract", str(six), "-o", str(out), "--overwrite", *SCRIPTED]) == 2
        assert cause in one_error_line(capsys)
    assert (tmp_path / "dir.jsonl").is_dir() and (tmp_path / "afile").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "dir.jsonl"]


def test_a_negative_max_in_flight_is_refused(six: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extract", str(six), "-o", str(tmp_path / "o.jsonl"), "--max-in-flight", "-1", *SCRIPTED]) == 2
    assert "max_in_flight" in one_error_line(capsys)
    assert not (tmp_path / "o.jsonl").exists()


def test_max_in_flight_zero_sizes_the_window_itself(six: Path, tmp_path: Path) -> None:
    """0 is auto: the KV cache's window on vLLM, the default window on a backend that states no KV size."""
    assert main(["extract", str(six), "-o", str(tmp_path / "o.jsonl"), "--max-in-flight", "0", *SCRIPTED]) == 0
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 6


def test_the_summary_counts_every_reject_once_and_a_respelled_resume_adds_none(
        six: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    source = with_bad_line(with_bad_line(six, tmp_path, 2, b"{broken"), tmp_path, 4, b"[1]")
    out = tmp_path / "out.jsonl"
    assert main(["extract", str(source), "-o", str(out), *SCRIPTED]) == 0
    summary = capsys.readouterr().out
    assert "rejected 2 " in summary and "rejected 0" not in summary
    rejects = tmp_path / "out.rejects.jsonl"
    first = rejects.read_bytes()
    monkeypatch.chdir(tmp_path)
    assert main(["extract", "./in.jsonl", "-o", "out.jsonl", "--resume", *SCRIPTED]) == 0
    assert rejects.read_bytes() == first


# ------------------------------------------------------------------------------------------- full or read-only disks
@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (a real file system that fills up); skipped where mounting is not allowed."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)  # lazy: a file left open cannot block it


def test_a_full_disk_keeps_whole_lines_and_the_run_resumes_elsewhere(
        six: Path, small_fs: Path, tmp_path: Path, reference: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"x" * (64 * 1024 - len(reference) // 2 - 8192))  # room for the manifest and ~half
    out = small_fs / "out.jsonl"
    assert main(["extract", str(six), "-o", str(out), *SCRIPTED]) == 2
    line = one_error_line(capsys)
    assert f"cannot write {out}: No space left on device" in line and "--resume" in line
    kept = out.read_bytes()
    assert 0 < len(kept) < len(reference) and reference.startswith(kept[:kept.rfind(b"\n") + 1])
    ballast.unlink()  # space freed: the same command with --resume finishes the job
    assert main(["extract", str(six), "-o", str(out), "--resume", *SCRIPTED]) == 0
    assert out.read_bytes() == reference


def test_a_disk_too_full_to_start_leaves_no_empty_output(
        six: Path, small_fs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (small_fs / "ballast").write_bytes(b"x" * (64 * 1024))
    out = small_fs / "out.jsonl"
    assert main(["extract", str(six), "-o", str(out), *SCRIPTED]) == 2
    assert "No space left on device" in one_error_line(capsys)
    assert sorted(p.name for p in small_fs.iterdir()) == ["ballast"]


def test_a_read_only_file_system_is_one_line(six: Path, small_fs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    assert main(["extract", str(six), "-o", str(small_fs / "out.jsonl"), *SCRIPTED]) == 2
    assert "Read-only file system" in one_error_line(capsys)


def test_a_write_limit_mid_run_is_one_line_in_a_real_process(six: Path, tmp_path: Path, reference: bytes) -> None:
    """Where no tmpfs can be mounted: the file-size limit makes writes fail the same way (EFBIG)."""
    out = tmp_path / "out.jsonl"
    limit = len(reference) // 2

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    cmd = [sys.executable, "-m", "promem_fast.cli", "extract", str(six), "-o", str(out), *SCRIPTED]
    done = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          preexec_fn=cap, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot write {out}: File too large" in done.stderr
    kept = out.read_bytes()
    assert reference.startswith(kept[:kept.rfind(b"\n") + 1])


def test_export_of_a_damaged_or_missing_file_is_one_line(
        six: Path, reference: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graphs = tmp_path / "graphs.jsonl"
    lines = reference.splitlines(keepends=True)
    graphs.write_bytes(lines[0] + b'{"session_id": "x"}\n' + lines[1])
    assert main(["export", str(graphs), str(tmp_path / "out")]) == 2
    assert f"{graphs}:2: not a memory graph" in one_error_line(capsys)
    assert main(["export", str(tmp_path / "nope.jsonl"), str(tmp_path / "out")]) == 2
    assert "No such file" in one_error_line(capsys)


def test_export_refuses_a_mix_of_graphs_and_store_arguments_and_keeps_the_graphs(
        reference: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --db the first argument is the file written: --db added to a graphs export must not overwrite it."""
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_bytes(reference)
    assert main(["export", str(graphs), str(tmp_path / "out"), "--db", str(tmp_path / "m.db")]) == 2
    assert "takes no OUT_DIR" in one_error_line(capsys)
    assert graphs.read_bytes() == reference
    assert main(["export", str(graphs), str(tmp_path / "out"), "--tenant", "t"]) == 2
    assert "needs --db" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_store_that_cannot_open_leaves_no_empty_output(
        six: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The files are created before the store opens; an empty OUT left behind would block the rerun."""
    bad = tmp_path / "bad.db"
    bad.write_text("not a database, just text " * 50)
    out = tmp_path / "out.jsonl"
    assert main(["extract", str(six), "-o", str(out), "--db", str(bad), *SCRIPTED]) == 2
    assert "not a usable store" in one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.db"]
    assert main(["extract", str(six), "-o", str(out), *SCRIPTED]) == 0
