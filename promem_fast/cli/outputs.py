"""The files of one ``promem extract`` run: OUT, ``OUT.rejects.jsonl`` and ``OUT.manifest.json``.

Everything that can go wrong before the first session runs is checked here and reported as one line: a
missing or unreadable input, an output that is a directory or is the input itself, a resume that does not
continue the same run. A run that fails to create its files removes what it created while still empty, so
the rerun is not blocked by an empty OUT.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promem_fast.errors import InputError, UsageError, WriteFailed
from promem_fast.io import GraphWriter, RejectWriter, read_sessions
from promem_fast.manifest import Manifest, check_resume, kept_prefix, manifest_path
from promem_fast.private import narrow, private_dirs
from promem_fast.types import Session


def check_input(path: Path) -> None:
    """The input must be a readable regular file (not a directory, not missing)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the input: {exc.strerror}") from exc
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path}: the input is a directory, not a JSONL file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path}: cannot read the input: permission denied")


@dataclass
class RunFiles:
    """OUT and its two companions, opened for a fresh or a resumed run."""

    out: Path
    existed: dict[Path, bool] = field(default_factory=dict)
    """Which of the three files existed before this run (those that did not are removed again if the run
    fails before writing a graph)."""

    @property
    def rejects(self) -> Path:
        return self.out.with_name(self.out.name.removesuffix(".jsonl") + ".rejects.jsonl")

    @property
    def manifest(self) -> Path:
        return manifest_path(self.out)

    def check(self, source: Path, *, resume: bool, overwrite: bool) -> None:
        """Refuse outputs that would destroy the input or cannot be files, and clobbering without a flag."""
        folder = next(p for p in self.out.absolute().parents if p.exists())
        if not folder.is_dir():
            raise UsageError(f"{folder} is not a directory, so {self.out} cannot be created there")
        for path in (self.out, self.rejects, self.manifest):
            if not path.exists():
                continue
            if not stat.S_ISREG(path.stat().st_mode):
                kind = "a directory" if path.is_dir() else "not a regular file"
                raise UsageError(f"{path}: the output is {kind}")
            if os.path.samefile(path, source):
                raise UsageError(f"{path} is the input file; writing it would destroy the input, choose another "
                                 f"output")
        if self.out.exists() and not (resume or overwrite):
            raise UsageError(f"{self.out} exists; pass --resume to continue it or --overwrite to replace it")

    def open(self, source: Path, config: Any, *, resume: bool) -> tuple[GraphWriter, RejectWriter, int]:
        """The writers, and how many valid input sessions the kept output already covers.

        A resume is checked against the manifest and the kept lines before anything is written.
        """
        now = Manifest.of_run(source, config)
        resume = resume and self.out.exists()
        if resume:
            check_resume(self.manifest, now, out=self.out, kept=count_records(self.out))
        self.existed = {p: p.exists() for p in (self.out, self.rejects, self.manifest)}
        writer: GraphWriter | None = None
        try:
            if not resume or not self.manifest.exists():
                private_dirs(self.out.parent)
                now.write(self.manifest)
            else:
                narrow(self.manifest)  # kept as it is, but no longer readable by others
            writer = GraphWriter(self.out, resume=resume, fsync=config.fsync, timings=config.record_timings)
            rejects = RejectWriter(self.rejects, resume=resume)
        except OSError as exc:
            if writer is not None:
                writer.close()
            self.discard_if_empty()
            raise WriteFailed(exc.filename or self.out, exc) from exc
        except InputError:  # a damaged rejects file on resume: the graphs file is already open
            if writer is not None:
                writer.close()
            raise
        if not writer.kept:
            return writer, rejects, 0
        try:
            sessions = (s.session_id for s in read_sessions(source) if isinstance(s, Session))
            return writer, rejects, kept_prefix(writer.kept, sessions, out=self.out, failed=rejects.failed)
        except Exception:
            writer.close()
            rejects.close()
            raise

    def discard_if_empty(self) -> None:
        """After a failed write: if no graph made it, remove the files this run created, so an empty OUT does
        not block the rerun."""
        if self.out.exists() and self.out.stat().st_size > 0:
            return
        for path, existed in self.existed.items():
            if not existed and path.is_file():
                path.unlink()
        tmp = self.manifest.with_name(self.manifest.name + ".tmp")
        if tmp.is_file():
            tmp.unlink()


def count_records(path: Path) -> int:
    """The non-blank lines of a JSONL file (blank ones are skipped by every reader)."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())
