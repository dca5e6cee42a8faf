"""The resume manifest, ``OUT.manifest.json``: what produced an output file, so ``--resume`` never mixes runs.

A resumed run appends to the graphs an earlier run wrote. That is only sound when both runs read the same
input with the same settings and the same code; otherwise the file silently holds two different runs.
The manifest records, before the first graph is written, a hash of every input line and the parts of the
configuration's fingerprint (:meth:`~promem_fast.config.EngineConfig.fingerprint`: the settings that can
change a result, whether timings are recorded, the package version) in the clear. ``--resume`` compares it with the run about to start and refuses with one line naming each
difference; :func:`kept_prefix` then checks that every kept graph belongs to the expected session, in order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promem_fast.errors import InputError
from promem_fast.private import replace_private
from promem_fast.version import __version__

if TYPE_CHECKING:
    from promem_fast.config import EngineConfig

FORMAT = 1
"""Bumped when the manifest's own layout changes."""

def manifest_path(out: Path) -> Path:
    """``OUT.manifest.json`` beside ``OUT.jsonl``."""
    return out.with_name(out.name.removesuffix(".jsonl") + ".manifest.json")


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def line_hashes(path: str | Path) -> tuple[list[str], str]:
    """A short hash of every line of ``path`` (blank ones included, so line numbers agree) and of the file."""
    whole = hashlib.sha256()
    lines = []
    with open(path, "rb") as handle:
        for raw in handle:
            whole.update(raw)
            lines.append(hashlib.sha256(raw.rstrip(b"\r\n")).hexdigest()[:16])
    return lines, whole.hexdigest()


@dataclass
class Manifest:
    """What one output file was made from; equal manifests mean a resume continues the same run."""

    version: str
    config: dict[str, Any]
    timings: bool
    input_sha256: str
    input_lines: list[str]
    format: int = FORMAT

    @classmethod
    def of_run(cls, input_path: str | Path, config: EngineConfig) -> Manifest:
        """The manifest of a run of ``config`` over ``input_path``: equal manifests have equal config
        fingerprints, and the parts are kept apart so that :meth:`differences` can name each one."""
        lines, whole = line_hashes(input_path)
        return cls(version=__version__, config=config.result_settings(), timings=config.record_timings,
                   input_sha256=whole, input_lines=lines)

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """The manifest at ``path``; a damaged one is an :class:`InputError` naming it."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            names = {f.name for f in dataclasses.fields(cls)}
            if not isinstance(data, dict) or not names <= set(data):
                raise ValueError(f"expected the fields {', '.join(sorted(names))}")
            wrong = [k for k, kind in _FIELD_TYPES.items() if not isinstance(data[k], kind)]
            if wrong or not all(isinstance(h, str) for h in data["input_lines"]):
                raise ValueError(f"{', '.join(wrong) or 'input_lines'} of the wrong type")
            return cls(**{k: data[k] for k in names})
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"not a readable manifest ({exc}); start again with --overwrite", file=str(path)) from exc

    def write(self, path: Path) -> None:
        """Write atomically (``PATH.tmp``, then moved over it), 0600 as it names every input line's hash: a run
        killed here leaves the old manifest or the new one, never half of one."""
        replace_private(path, (json.dumps(dataclasses.asdict(self), ensure_ascii=False, sort_keys=True)
                               + "\n").encode("utf-8"))

    def differences(self, now: Manifest) -> list[str]:
        """What differs between the run that wrote the output (``self``) and the one starting (``now``)."""
        out = []
        if self.format != now.format or self.version != now.version:
            out.append(f"promem_fast version {self.version} wrote it, this is {now.version}")
        if self.input_sha256 != now.input_sha256:
            out.append(_input_difference(self.input_lines, now.input_lines))
        if self.config != now.config:
            then, current = _flat(self.config), _flat(now.config)
            changed = sorted(k for k in then.keys() | current.keys() if then.get(k) != current.get(k))
            shown = ", ".join(f"{k} ({then.get(k)!r} then, {current.get(k)!r} now)" for k in changed[:3])
            out.append(f"the configuration differs: {shown}" + (f" and {len(changed) - 3} more" if len(changed) > 3
                                                                else ""))
        if self.timings != now.timings:
            out.append(f"timings were {'on' if self.timings else 'off (--no-timings)'}, "
                       f"now {'on' if now.timings else 'off (--no-timings)'}")
        return out


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "version": str, "config": dict, "timings": bool, "input_sha256": str, "input_lines": list, "format": int}
"""What each field must hold, so an edited manifest is refused here instead of crashing the comparison."""


def _input_difference(then: list[str], now: list[str]) -> str:
    first = next((i for i, (a, b) in enumerate(zip(then, now)) if a != b), None)
    if first is None:
        return f"the input has {len(now):,} lines, the run being resumed read {len(then):,}"
    if not set(then) & set(now):
        return "the input is a different file (no line in common)"
    return f"the input differs from line {first + 1} on ({len(then):,} lines then, {len(now):,} now)"


def check_resume(path: Path, now: Manifest, *, out: Path, kept: int) -> None:
    """Refuse (an :class:`InputError` of one line) to resume ``out`` unless its manifest matches ``now``."""
    if not path.exists():
        if kept:
            raise InputError(f"{kept} graphs but no manifest ({path.name}), so they cannot be checked against "
                             f"this run; start again with --overwrite", file=str(out))
        return
    differences = Manifest.read(path).differences(now)
    if differences:
        raise InputError("cannot resume, " + "; ".join(differences) + "; use --overwrite to start again",
                         file=str(out))


def kept_prefix(kept_ids: list[str], input_ids: Iterable[str], *, out: Path, failed: set[str]) -> int:
    """How many input sessions the kept graphs cover: the position after the last kept one.

    The output is written in input order, so the kept graphs must be sessions of the input in that order,
    and a session skipped between two of them must have failed (``failed``: the ids in the rejects file).
    Anything else, a graph of another input, a repeat, a moved or a deleted line, is an
    :class:`InputError` naming the output line.
    """
    position = 0
    expected = iter(input_ids)
    for number, sid in enumerate(kept_ids, start=1):
        for candidate in expected:
            position += 1
            if candidate == sid:
                break
            if candidate not in failed:
                raise InputError(f"session {candidate!r} of the input has neither a graph nor a reject before "
                                 f"this line (a deleted or moved line); start again with --overwrite",
                                 file=str(out), line=number, session_id=sid)
        else:
            raise InputError("this graph is not of a later session of the input (a repeated, moved or foreign "
                             "line); start again with --overwrite", file=str(out), line=number, session_id=sid)
    return position
