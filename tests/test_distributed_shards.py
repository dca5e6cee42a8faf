"""Cutting input into shards (no Ray needed): the shards of a file hold every record once, with its real line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promem_fast.distributed.driver import _clear
from promem_fast.distributed.shards import files, plan, read_shard, write_shard
from promem_fast.errors import InputError, PromemError
from promem_fast.io import read_sessions

LINE = st.one_of(st.just("good"), st.just("broken"), st.sampled_from(["", "  ", "\t"]))


def outcome(item: object) -> tuple[str, object]:
    if isinstance(item, InputError):
        return "error", (item.line, item.message)
    return "session", item.session_id  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(LINE, max_size=30), size=st.integers(1, 6), trailing=st.booleans())
def test_shards_read_back_the_whole_file_once_with_real_line_numbers(
        tmp_path_factory: pytest.TempPathFactory, kinds: list[str], size: int, trailing: bool) -> None:
    lines = []
    for number, kind in enumerate(kinds, start=1):
        if kind == "good":
            lines.append(json.dumps({"session_id": f"s{number}", "user": "Ana",
                                     "turns": [{"role": "user", "text": f"I was at line {number}."}]}))
        else:
            lines.append("{broken" if kind == "broken" else kind)
    path = tmp_path_factory.mktemp("cut") / "in.jsonl"
    path.write_text("\n".join(lines) + ("\n" if trailing and lines else ""), encoding="utf-8")
    shards = plan([path], size)
    whole = [outcome(item) for item in read_sessions(path)]
    pieces = [outcome(item) for shard in shards for item in read_shard(shard, max_turn_chars=1000)]
    assert pieces == whole
    records = sum(1 for kind in kinds if kind != "" and kind.strip())
    assert len(shards) == -(-records // size)
    assert [s.name for s in shards] == [f"in-{i:05d}" for i in range(len(shards))]


def test_a_directory_is_its_shard_files_and_name_clashes_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jsonl").write_text('{"session_id": "1"}\n')
    (tmp_path / "a" / "notes.txt").write_text("not a shard\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.jsonl").write_text('{"session_id": "2"}\n')
    assert [s.path for s in plan([tmp_path / "a"], 10)] == [str(tmp_path / "a" / "x.jsonl")]
    with pytest.raises(InputError, match="same shard files"):
        plan([tmp_path / "a", tmp_path / "b"], 10)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "X.jsonl").write_text('{"session_id": "3"}\n')
    with pytest.raises(InputError, match="same shard files"):  # one file on a case-insensitive disk
        plan([tmp_path / "a", tmp_path / "c"], 10)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no .jsonl or .parquet"):
        plan([tmp_path / "empty"], 10)
    with pytest.raises(InputError, match="no such file"):
        plan([tmp_path / "missing.jsonl"], 10)
    with pytest.raises(PromemError, match="shard-sessions"):
        plan([tmp_path / "a"], 0)


def test_overwrite_clears_the_shards_of_another_cut_of_the_same_input(tmp_path: Path) -> None:
    """A cut into more shards leaves higher-numbered files; --overwrite removes them, and nothing else."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"session_id": str(i)}) + "\n" for i in range(4)))
    out = tmp_path / "out"
    out.mkdir()
    for shard in plan([source], 1):
        write_shard(out, shard, "", "", {}, parquet=False, fsync=False)
    other = tmp_path / "other.jsonl"
    other.write_text(source.read_text())
    (kept,) = plan([other], 4)
    write_shard(out, kept, "", "", {}, parquet=False, fsync=False)
    (out / "notes.jsonl").write_text("mine\n")
    _clear(out, plan([source], 2))
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted([*(p.name for p in files(out, kept.name).values() if p.exists()), "notes.jsonl"])
