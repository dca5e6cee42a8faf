"""Typed exceptions. Every input error names where it came from so a user can fix the record."""

from __future__ import annotations

from dataclasses import dataclass


class PromemError(Exception):
    """Base class of every error this package raises on purpose."""


class MissingDependency(PromemError, ImportError):
    """An optional backend's library is not installed; the message holds the pip command."""


class ConfigError(PromemError, ValueError):
    """A configuration value is unknown or out of range; the message names the field."""


class UsageError(PromemError):
    """The command line asks for what cannot be done (a missing input, an output that is the input)."""


class WriteFailed(PromemError):
    """An output file could not be written (disk full, read-only file system); the message names the path."""

    def __init__(self, path: object, cause: OSError) -> None:
        super().__init__(f"cannot write {path}: {cause.strerror or cause}")
        self.path = path


@dataclass
class InputError(PromemError):
    """A bad input record: names the file, line, session id and field so it can be found and fixed."""

    message: str
    file: str | None = None
    line: int | None = None
    session_id: str | None = None
    field: str | None = None

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.file is not None:
            where.append(f"{self.file}:{self.line}" if self.line is not None else self.file)
        elif self.line is not None:
            where.append(f"line {self.line}")
        if self.session_id is not None:
            where.append(f"session {self.session_id!r}")
        if self.field is not None:
            where.append(f"field {self.field!r}")
        return (", ".join(where) + ": " if where else "") + self.message

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "session_id": self.session_id,
            "field": self.field,
            "error": self.message,
        }


class BackendError(PromemError, RuntimeError):
    """A backend call failed for one batch; the engine splits the batch to isolate the bad request."""


class SessionFailed(PromemError, RuntimeError):
    """A session's program crashed (the cause is chained): with ``on_error='stop'`` the run ends; ``Memory.add``
    raises it for the one session it was given, which is then not stored."""


class BackendUnavailable(PromemError, RuntimeError):
    """A backend is gone for good (process died, endpoint unreachable): the run stops cleanly."""


class ContextOverflow(PromemError, ValueError):
    """A prompt does not fit the model's context window; it is never silently truncated."""
