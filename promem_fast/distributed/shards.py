"""Shards: how the input is cut, how one shard is read, and the files a finished shard leaves.

A shard is a stretch of one input file: a run of ``shard_sessions`` lines of a JSONL file (found by one
scan of the file on the driver, kept as a byte range plus the number of its first line so rejects still
name the real line) or a run of whole row groups of a Parquet file. Cutting is deterministic, so the same
command cuts the same shards again and a rerun recognises the ones already finished.

Each finished shard leaves ``NAME.jsonl`` (its graphs), ``NAME.rejects.jsonl`` and, last,
``NAME.manifest.json``. Every file is written to a temporary name and renamed, and the manifest records the
byte size of the others, so a shard counts as done only when all three are whole; anything else is redone.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from promem_fast.errors import InputError, PromemError
from promem_fast.io import parse_lines
from promem_fast.private import replace_private
from promem_fast.types import Session

JSONL_SUFFIXES: tuple[str, ...] = (".jsonl",)
PARQUET_SUFFIXES: tuple[str, ...] = (".parquet", ".pq")
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Shard:
    """One unit of work: ``[start, stop)`` bytes (JSONL) or row groups (Parquet) of ``path``."""

    name: str
    path: str
    format: str
    start: int
    stop: int
    first_line: int
    """Line (JSONL) or row (Parquet) number of the shard's first record, counted from 1 in the whole file."""

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Shard:
        return cls(name=str(row["name"]), path=str(row["path"]), format=str(row["format"]), start=int(row["start"]),
                   stop=int(row["stop"]), first_line=int(row["first_line"]))


def input_files(inputs: list[Path]) -> list[Path]:
    """The JSONL and Parquet files named, a directory standing for the shard files directly inside it."""
    found: list[Path] = []
    for item in inputs:
        if item.is_dir():
            inside = sorted(p for p in item.iterdir() if p.is_file() and p.suffix in JSONL_SUFFIXES + PARQUET_SUFFIXES)
            if not inside:
                raise InputError("directory holds no .jsonl or .parquet shards", file=str(item))
            found.extend(inside)
        elif item.is_file():
            found.append(item)
        else:
            raise InputError("no such file or directory", file=str(item))
    return found


def plan(inputs: list[Path], shard_sessions: int) -> list[Shard]:
    """Every shard of the inputs, in input order, each named after its file and position."""
    if shard_sessions < 1:
        raise PromemError("--shard-sessions must be >= 1")
    shards: list[Shard] = []
    stems: dict[str, Path] = {}
    for path in input_files(inputs):
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.stem)
        if stem.lower() in stems:  # lower: on a case-insensitive disk X-00000.jsonl is x-00000.jsonl
            raise InputError(f"two inputs would write the same shard files (also {stems[stem.lower()]}); "
                             "rename one", file=str(path))
        stems[stem.lower()] = path
        cut = _parquet_cuts if path.suffix in PARQUET_SUFFIXES else _jsonl_cuts
        fmt = "parquet" if path.suffix in PARQUET_SUFFIXES else "jsonl"
        for index, (start, stop, first) in enumerate(cut(path, shard_sessions)):
            shards.append(Shard(f"{stem}-{index:05d}", str(path), fmt, start, stop, first))
    return shards


def count_sessions(paths: list[Path]) -> int:
    """Records in the input files: non-blank JSONL lines, Parquet rows."""
    total = 0
    for path in paths:
        if path.suffix in PARQUET_SUFFIXES:
            from promem_fast.deps import require

            total += require("pyarrow.parquet", "ray", "pyarrow").ParquetFile(path).metadata.num_rows
            continue
        with open(path, "rb") as handle:
            total += sum(1 for raw in handle if raw.strip())
    return total


def _jsonl_cuts(path: Path, size: int) -> Iterator[tuple[int, int, int]]:
    """Byte ranges holding ``size`` non-blank lines each (the last may hold fewer)."""
    start = offset = 0
    first, count = 1, 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if count == 0:
                start, first = offset, number
            offset += len(raw)
            if raw.strip():
                count += 1
            if count == size:
                yield start, offset, first
                count = 0
    if count:
        yield start, offset, first


def _parquet_cuts(path: Path, size: int) -> Iterator[tuple[int, int, int]]:
    """Runs of whole row groups holding at least ``size`` rows each (row groups are never split)."""
    from promem_fast.deps import require

    pq = require("pyarrow.parquet", "ray", "pyarrow")
    meta = pq.ParquetFile(path).metadata
    start, rows, first = 0, 0, 1
    for group in range(meta.num_row_groups):
        rows += meta.row_group(group).num_rows
        if rows >= size:
            yield start, group + 1, first
            start, first, rows = group + 1, first + rows, 0
    if start < meta.num_row_groups:
        yield start, meta.num_row_groups, first


def read_shard(shard: Shard, *, max_turn_chars: int,
               taken: frozenset[str] = frozenset()) -> Iterator[Session | InputError]:
    """The shard's sessions, or for each bad record the error naming its file and line (or row).

    ``taken``: session ids that an earlier shard already holds; here they are duplicates, rejected as a
    single-node run rejects the later line of a duplicated id (:func:`cross_shard_duplicates` finds them).
    """
    number = 0

    def numbered() -> Iterator[tuple[int, bytes]]:
        nonlocal number
        for number, raw in _raw_lines(shard):
            yield number, raw

    # parse_lines answers each line before it reads the next, so ``number`` is the line of each item
    for item in parse_lines(numbered(), shard.path, max_turn_chars=max_turn_chars):
        if isinstance(item, Session) and item.session_id in taken:
            yield InputError("duplicated session id (first occurrence kept)", file=shard.path, line=number,
                             session_id=item.session_id, field="session_id")
        else:
            yield item


def session_ids(shard: Shard, *, max_turn_chars: int) -> list[str]:
    """The ids of the shard's valid sessions, in order (what a later shard must not repeat)."""
    return [item.session_id for item in read_shard(shard, max_turn_chars=max_turn_chars)
            if isinstance(item, Session)]


def cross_shard_duplicates(ids: list[list[str]]) -> list[list[str]]:
    """For the shards' ids in input order, each shard's ids that an earlier shard already has."""
    seen: set[str] = set()
    out = []
    for shard_ids in ids:
        out.append(sorted(i for i in shard_ids if i in seen))
        seen.update(shard_ids)
    return out


def _raw_lines(shard: Shard) -> Iterator[tuple[int, bytes]]:
    """Numbered raw records: JSONL lines split on b"\\n" as the cut was, Parquet rows as their JSON text."""
    if shard.format == "parquet":
        from promem_fast.deps import require

        pq = require("pyarrow.parquet", "ray", "pyarrow")
        table = pq.ParquetFile(shard.path).read_row_groups(list(range(shard.start, shard.stop)))
        for number, record in enumerate(table.to_pylist(), start=shard.first_line):
            yield number, json.dumps(_drop_nulls(record), default=str).encode("utf-8")
        return
    with open(shard.path, "rb") as handle:
        handle.seek(shard.start)
        data = handle.read(shard.stop - shard.start)
    yield from enumerate(io.BytesIO(data), start=shard.first_line)


def _drop_nulls(value: Any) -> Any:
    """Parquet gives every struct all columns of its schema; a column a record lacks reads as null."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ shard files
def files(out_dir: Path, name: str) -> dict[str, Path]:
    return {"graphs": out_dir / f"{name}.jsonl", "rejects": out_dir / f"{name}.rejects.jsonl",
            "parquet": out_dir / f"{name}.parquet", "manifest": out_dir / f"{name}.manifest.json"}


def is_complete(out_dir: Path, shard: Shard, config_hash: str) -> bool:
    """Whether ``shard``'s files are all there, whole, and were made from this input range and config."""
    paths = files(out_dir, shard.name)
    try:
        manifest = json.loads(paths["manifest"].read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    if manifest.get("config") != config_hash:
        raise PromemError(f"{paths['manifest']}: made with other settings than this run; rerun with the "
                          "settings of that run or pass --overwrite to start again")
    if manifest.get("shard") != shard.to_row():
        raise PromemError(f"{paths['manifest']}: made from another cut of the input (different file or "
                          "--shard-sessions); pass --overwrite to start again")
    sizes: dict[str, int] = manifest.get("bytes", {})
    return all(paths[key].is_file() and paths[key].stat().st_size == size for key, size in sizes.items())


def write_shard(out_dir: Path, shard: Shard, graphs: str, rejects: str, manifest: dict[str, Any], *,
                parquet: bool, fsync: bool) -> None:
    """Write a finished shard's files, the manifest last; each appears whole or not at all."""
    paths = files(out_dir, shard.name)
    paths["manifest"].unlink(missing_ok=True)
    sizes = {"graphs": replace_private(paths["graphs"], graphs.encode("utf-8"), fsync=fsync),
             "rejects": replace_private(paths["rejects"], rejects.encode("utf-8"), fsync=fsync)}
    if parquet:
        sizes["parquet"] = _write_parquet(paths["parquet"], graphs, fsync)
    body = {**manifest, "version": MANIFEST_VERSION, "shard": shard.to_row(), "bytes": sizes}
    replace_private(paths["manifest"], json.dumps(body, indent=1, sort_keys=True).encode("utf-8"), fsync=fsync)


def _write_parquet(path: Path, graphs: str, fsync: bool) -> int:
    """The graphs as Parquet: ``session_id`` and the record's JSON text (the same bytes as the JSONL line)."""
    from promem_fast.deps import require

    pa = require("pyarrow", "ray")
    pq = require("pyarrow.parquet", "ray", "pyarrow")
    lines = graphs.splitlines()
    table = pa.table({"session_id": [json.loads(line)["session_id"] for line in lines], "graph": lines})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return replace_private(path, buffer.getvalue(), fsync=fsync)
