"""What the three benchmark loaders share: locating a value in the input for error messages, and small
conversions every dataset needs (turn pairing, order-keeping de-duplication, reading a JSON list).

Every malformed record raises :class:`~promem_fast.errors.InputError` through :meth:`Loc.error`, so the
message names the file, the line (JSONL) or the record index inside the field path (JSON), the session and
the field, whichever loader found it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ...errors import ConfigError, InputError

PathLike = str | os.PathLike[str]

_T = TypeVar("_T")
_MISSING: Any = object()


@dataclass(frozen=True)
class Loc:
    """Where in the input a value sits, so a failure can name file, line, session and field path."""

    file: str
    line: int | None = None
    session_id: str | None = None
    path: str = ""

    def child(self, part: str | int, session_id: str | None = None) -> Loc:
        sub = f"[{part}]" if isinstance(part, int) else f".{part}" if self.path else part
        return Loc(self.file, self.line, session_id or self.session_id, self.path + sub)

    def error(self, message: str, key: str | None = None) -> InputError:
        field = self.path if key is None else (f"{self.path}.{key}" if self.path else key)
        return InputError(message, file=self.file, line=self.line, session_id=self.session_id, field=field or None)

    def get(self, record: Any, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        """``record[key]`` checked against ``kind``; a missing or null value gives ``default`` or fails."""
        if not isinstance(record, Mapping):
            raise self.error(f"expected an object, got {type(record).__name__}")
        value = record.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error("missing required field", key)
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(f"expected {names}, got {type(value).__name__}", key)
        return value

    def text(self, record: Any, key: str, default: Any = _MISSING) -> Any:
        """A scalar kept as a string: answers are sometimes ints (``2022``) and are compared as text."""
        value = self.get(record, key, (str, int, float), default)
        return value if value is default else str(value)


def check_limit(limit: int | None, name: str = "limit") -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"{name} must be a non-negative integer or None, got {limit!r}")


def read_json_list(path: Path) -> list[Any]:
    """A whole JSON file that must hold a list (LoCoMo, LongMemEval)."""
    with path.open(encoding="utf-8") as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg}", file=str(path), line=exc.lineno) from exc
    if not isinstance(data, list):
        raise InputError(f"expected a JSON list at top level, got {type(data).__name__}", file=str(path))
    return data


def pair_turn_ids(roles: Sequence[str]) -> list[int]:
    """Turn ids for a flat message list: a user message opens a turn and the next reply joins it.

    A reply that has no user message before it (a session opening with the assistant, or two replies in a
    row) opens a turn of its own, so every message belongs to exactly one turn and ids only grow.
    """
    ids: list[int] = []
    turn = -1
    replied = True
    for role in roles:
        if role == "user" or replied:
            turn += 1
        replied = role != "user"
        ids.append(turn)
    return ids


def dedup(items: Sequence[_T]) -> tuple[_T, ...]:
    """Items in first-seen order, each once (evidence often names the same session or turn twice)."""
    return tuple(dict.fromkeys(items))
