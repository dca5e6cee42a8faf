"""``--resume`` continues only the same run: same input, result-changing config, version and timings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import tomas_sessions, write_jsonl
from promem_fast.cli import main
from promem_fast.config import EngineConfig
from promem_fast.distributed.driver import shard_fingerprint
from promem_fast.distributed.shards import is_complete, plan, write_shard
from promem_fast.errors import InputError, PromemError
from promem_fast.manifest import Manifest, kept_prefix

SCRIPTED = ["--profile", "scripted", "--no-progress", "--no-timings"]


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("in") / "six.jsonl", tomas_sessions(6))


@pytest.fixture
def interrupted(six: Path, tmp_path: Path) -> tuple[Path, Path, bytes]:
    """(input, OUT, the complete result): OUT holds the first 3 of 6 graphs, as a killed run leaves it."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(six.read_bytes())
    out = tmp_path / "out.jsonl"
    assert main(["extract", str(source), "-o", str(out), *SCRIPTED]) == 0
    full = out.read_bytes()
    out.write_bytes(b"".join(full.splitlines(keepends=True)[:3]))
    return source, out, full


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], out: Path) -> str:
    """Run ``argv`` expecting a refusal: exit 2, one line on stderr, OUT untouched."""
    before = out.read_bytes()
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("promem: "), lines
    assert out.read_bytes() == before
    return lines[0]


def edit_line(path: Path, number: int, edit: Callable[[bytes], bytes]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = edit(lines[number - 1])
    path.write_bytes(b"".join(lines))


def test_a_resume_of_the_same_run_finishes_it_byte_identically(
        interrupted: tuple[Path, Path, bytes]) -> None:
    source, out, full = interrupted
    # window and batch size do not change results, so they may differ between the two runs
    assert main(["extract", str(source), "-o", str(out), "--resume", "--max-in-flight", "2",
                 "--set", "max_batch_size=3", *SCRIPTED]) == 0
    assert out.read_bytes() == full


@pytest.mark.parametrize("case,change,expected", [
    ("another input", lambda src, tmp: write_jsonl(tmp / "other.jsonl", tomas_sessions(12)[6:]),
     "the input is a different file"),
    ("a subset", lambda src, tmp: _write(tmp / "sub.jsonl", b"".join(src.read_bytes().splitlines(True)[:4])),
     "the input has 4 lines, the run being resumed read 6"),
    ("a superset", lambda src, tmp: _write(tmp / "sup.jsonl", src.read_bytes() + src.read_bytes()[:200]),
     "the input has 7 lines"),
    ("edited text", lambda src, tmp: _edited(src, 2), "the input differs from line 2 on"),
])
def test_a_different_input_is_refused(interrupted: tuple[Path, Path, bytes], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str], case: str, change, expected: str) -> None:  # type: ignore[no-untyped-def]
    source, out, _ = interrupted
    other = change(source, tmp_path)
    line = refused(capsys, ["extract", str(other), "-o", str(out), "--resume", *SCRIPTED], out)
    assert expected in line and "--overwrite" in line


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _edited(source: Path, number: int) -> Path:
    edit_line(source, number, lambda line: line.replace(b"a", b"e", 1))
    return source


@pytest.mark.parametrize("extra,expected", [
    (["--set", "pipeline.tau_comp=0.9"], "pipeline.tau_comp (0.6 then, 0.9 now)"),
    (["--set", "llm.seed=7"], "llm.seed (0 then, 7 now)"),
])
def test_another_config_is_refused_naming_the_field(interrupted: tuple[Path, Path, bytes],
                                                    capsys: pytest.CaptureFixture[str], extra: list[str],
                                                    expected: str) -> None:
    source, out, _ = interrupted
    line = refused(capsys, ["extract", str(source), "-o", str(out), "--resume", *extra, *SCRIPTED], out)
    assert expected in line


def test_timings_switched_on_is_refused(interrupted: tuple[Path, Path, bytes],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    source, out, _ = interrupted
    argv = ["extract", str(source), "-o", str(out), "--resume", "--profile", "scripted", "--no-progress"]
    assert "timings were off (--no-timings), now on" in refused(capsys, argv, out)


@pytest.mark.parametrize("damage,expected", [
    (lambda lines: lines[:2] + [lines[1]] + lines[2:], ":3, session"),                # a duplicated line
    (lambda lines: [lines[0], b'{"session_id": "x", "valid": "json"}\n', lines[2]], ":2: not a complete record"),
    (lambda lines: [lines[1], lines[0], lines[2]], ":1, session"),                      # two lines swapped
    (lambda lines: lines[1:3], ":1, session"),                                          # the first line lost
    (lambda lines: [lines[0], lines[2]], ":2, session"),                                # a middle line lost
])
def test_kept_lines_that_are_not_this_runs_graphs_in_order_are_refused(
        interrupted: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str], damage, expected: str) -> None:  # type: ignore[no-untyped-def]
    source, out, _ = interrupted
    out.write_bytes(b"".join(damage(out.read_bytes().splitlines(keepends=True))))
    line = refused(capsys, ["extract", str(source), "-o", str(out), "--resume", *SCRIPTED], out)
    assert str(out) + expected in line


def test_an_output_without_a_manifest_is_refused(interrupted: tuple[Path, Path, bytes],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    source, out, _ = interrupted
    (out.parent / "out.manifest.json").unlink()
    assert "no manifest" in refused(capsys, ["extract", str(source), "-o", str(out), "--resume", *SCRIPTED], out)


def test_the_manifest_ignores_only_fields_that_cannot_change_results(six: Path) -> None:
    base = EngineConfig.profile("scripted")
    same = EngineConfig.profile("scripted")
    same.max_in_flight, same.max_batch_size, same.progress, same.on_error = 3, 5, True, "stop"
    same.llm.timeout_s = 1.0
    assert Manifest.of_run(six, base).differences(Manifest.of_run(six, same)) == []
    for field, value in (("tau_comp", 0.5), ("max_attempts", 1), ("premise", "turn")):
        other = EngineConfig.profile("scripted")
        setattr(other.pipeline, field, value)
        (difference,) = Manifest.of_run(six, base).differences(Manifest.of_run(six, other))
        assert f"pipeline.{field}" in difference


@pytest.mark.parametrize(("change", "changes_result"), [
    ("pipeline.tau_comp=0.5", True), ("llm.seed=1", True), ("nli.threshold=0.2", True), ("embedder.dim=128", True),
    ("pipeline.max_tokens={draft: 512}", True), ("record_timings=true", True), ("llm.model=other.gguf", True),
    ("max_in_flight=3", False), ("max_batch_size=5", False), ("on_error=stop", False), ("fsync=true", False),
    ("llm.timeout_s=1.0", False), ("llm.max_retries=0", False), ("qa_top_k=5", False), ("progress=true", False),
    ("max_failed_batches=9", False), ("llm.prefix_reuse=false", False),
])
def test_single_node_and_ray_resume_agree_on_what_changes_a_result(tmp_path: Path, change: str,
                                                                   changes_result: bool) -> None:
    """One fingerprint for both resume paths: a setting that a single-node ``--resume`` refuses, a Ray rerun
    refuses too (it does not take the finished shard as this run's), and one it accepts, both accept."""
    source = tmp_path / "in.jsonl"
    source.write_text('{"session_id": "s1", "user": "Ana", "turns": [{"role": "user", "text": "I live in Oslo."}]}\n')
    before = EngineConfig.profile("scripted")
    before.record_timings = False
    after = before.with_overrides([change])
    assert (after.fingerprint() != before.fingerprint()) is changes_result
    assert bool(Manifest.of_run(source, before).differences(Manifest.of_run(source, after))) is changes_result
    out = tmp_path / "shards"
    out.mkdir()
    (shard,) = plan([source], 10)
    write_shard(out, shard, "", "", {"config": shard_fingerprint(before, parquet=False)}, parquet=False, fsync=False)
    if changes_result:
        with pytest.raises(PromemError, match="other settings"):
            is_complete(out, shard, shard_fingerprint(after, parquet=False))
    else:
        assert is_complete(out, shard, shard_fingerprint(after, parquet=False))


def test_kept_graphs_must_follow_the_input_order(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert kept_prefix(["a", "c"], ["a", "b", "c", "d"], out=out, failed={"b"}) == 3  # b failed: a gap is fine
    for kept, line in ((["a", "a"], 2), (["c", "a"], 1), (["z"], 1), (["a", "c"], 2)):
        with pytest.raises(InputError) as info:
            kept_prefix(kept, ["a", "b", "c"], out=out, failed=set())
        assert info.value.line == line and info.value.file == str(out)


def test_the_manifest_sits_beside_the_output(interrupted: tuple[Path, Path, bytes]) -> None:
    _, out, _ = interrupted
    data = json.loads((out.parent / "out.manifest.json").read_text())
    assert data["timings"] is False and len(data["input_lines"]) == 6 and data["config"]["pipeline"]["tau_comp"] == 0.6


def test_another_version_or_a_damaged_manifest_is_refused(interrupted: tuple[Path, Path, bytes],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    source, out, _ = interrupted
    manifest = out.parent / "out.manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "version": "0.0.1"}))
    argv = ["extract", str(source), "-o", str(out), "--resume", *SCRIPTED]
    assert "promem_fast version 0.0.1 wrote it" in refused(capsys, argv, out)
    manifest.write_text('{"version": ')
    assert "not a readable manifest" in refused(capsys, argv, out)
    manifest.write_text(json.dumps({**data, "input_lines": 6}))  # fields of the wrong type: refused, no crash
    assert "not a readable manifest (input_lines of the wrong type)" in refused(capsys, argv, out)


def test_resume_and_overwrite_together_are_refused(interrupted: tuple[Path, Path, bytes],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Which one was meant cannot be told; the kept output is left as it is."""
    source, out, _ = interrupted
    before = out.read_bytes()
    with pytest.raises(SystemExit) as info:
        main(["extract", str(source), "-o", str(out), "--resume", "--overwrite", *SCRIPTED])
    assert info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert out.read_bytes() == before
