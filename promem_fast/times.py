"""Time read once: the one parser of every timestamp and query time, and the one date rule.

Sessions arrive dated in several forms: ISO 8601, HaluMem's "Sep 04, 2025, 09:05:32", LoCoMo's "1:56 pm on
8 May, 2023", LongMemEval's "2023/05/20 (Sat) 02:21", plain days. Input (:func:`promem_fast.io.session_from_dict`
and the benchmark loaders) turns each into one form, :func:`iso_time`'s, so that every later reader (the
session date of the prompts, the chat template's ``date_string``, the store's ``valid_from`` and the order
sessions are judged in) sees the same instant. A JSON number is read as Unix seconds (UTC). Readers downstream
go through :func:`day_of`, which reads that form (and, for a :class:`~promem_fast.types.Session` built by hand,
any accepted form) the same way.

The rule: a time is kept naive, to the second; a time with an offset is turned into UTC first; a time whose
UTC instant falls outside the years 0001–9999 (``0001-01-01T00:00:00+05:00``) is refused by name, as is a
form none of the parsers read. The same rule holds for ``as_of``/``since``/``until`` on every surface.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from functools import lru_cache
from typing import Any

FORMATS: tuple[str, ...] = (
    "%b %d, %Y, %H:%M:%S",      # HaluMem: "Sep 04, 2025, 09:05:32"
    "%I:%M %p on %d %B, %Y",    # LoCoMo: "1:56 pm on 8 May, 2023"
    "%I:%M %p on %d %b, %Y",    # LoCoMo: "1:56 pm on 8 Sep, 2023"
    "%Y/%m/%d (%a) %H:%M",      # LongMemEval: "2023/05/20 (Sat) 02:21"
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%d %B %Y",
    "%d %B, %Y",
    "%B %d, %Y",
    "%b %d, %Y",
)
"""The non-ISO forms read, besides everything :meth:`datetime.fromisoformat` reads."""

BARE_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


EXPIRES = "expiration_date"
"""The session metadata key of the last day its memories hold (mem0's name and place for it: ``add(...,
expiration_date=)``), read once at input as ``YYYY-MM-DD`` (:func:`promem_fast.io.session_from_dict`); the
store hides them after that day (:func:`promem_fast.store.filters.visible`)."""


class TimeProblem(ValueError):
    """A time that cannot be kept: unreadable, or outside the years the rule allows (the message says which)."""


def parse_time(value: str | float) -> datetime:
    """``value`` as a naive datetime to the second (UTC when it had an offset; a number is Unix seconds, as
    chat logs and mem0's platform give them, so UTC too); :class:`TimeProblem` if none."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, timezone.utc).replace(tzinfo=None, microsecond=0)
        except (OverflowError, OSError, ValueError):
            raise TimeProblem(f"{value!r} Unix seconds fall outside the years 0001-9999") from None
    text = value.strip()
    found: datetime | None = None
    try:
        found = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        for fmt in FORMATS:
            try:
                found = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
    if found is None:
        raise TimeProblem(f"{value[:40]!r} is not a date or time (ISO 8601, e.g. 2024-03-02T10:00:00, or one "
                          f"of {len(FORMATS)} dataset forms such as 'Sep 04, 2025, 09:05:32')")
    if found.tzinfo is not None:
        try:
            found = found.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError:
            raise TimeProblem(f"{value[:40]!r} falls outside the years 0001-9999 once turned into UTC") from None
    return found.replace(microsecond=0)


def kept_day(value: Any) -> str:
    """``value`` (a day, a time, or Unix seconds) as the ISO day of its UTC instant (``2025-06-30``): the form
    of an :data:`EXPIRES` day, which the store compares as text; :class:`TimeProblem` if none."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise TimeProblem(f"must be a day such as 2025-06-30, got {type(value).__name__}")
    return parse_time(value).date().isoformat()


def received() -> tuple[str, str]:
    """Now, for messages added without a date (they were said when they arrive, as a chat program adds them): the
    kept form (UTC, to the second) and a key that orders arrivals within that second (microseconds, as digits)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    return now.isoformat(timespec="seconds"), now.strftime("%Y%m%dT%H%M%S%f")


def dated(given: str | float | None, messages: list[Any]) -> bool:
    """Whether messages given to an ``add`` say when they were said: a time ``given``, or a message's own
    ``timestamp`` (the session then takes its first turn's); else they were said when they arrive."""
    return given is not None or any(isinstance(m, dict) and m.get("timestamp") is not None for m in messages)


def said_when(given: str | float | None, messages: list[Any]) -> str | float | None:
    """When messages given to an ``add`` were said: the time ``given``; else none when a message carries its own
    ``timestamp``; else now (:func:`received`)."""
    return given if dated(given, messages) else received()[0]


def iso_time(value: str | None) -> str | None:
    """``value`` in the one kept form (``2023-05-08T13:56:00``); None when absent or not a time we can keep."""
    if not value:
        return None
    try:
        return parse_time(value).isoformat(timespec="seconds")
    except TimeProblem:
        return None


@lru_cache(maxsize=4096)
def day_of(value: str | None) -> date | None:
    """The calendar day of a kept (or any accepted) timestamp; None when absent or unreadable. Cached: every
    stage of a session asks for the same few timestamps."""
    if not value:
        return None
    try:
        return parse_time(value).date()
    except TimeProblem:
        return None


def query_time(value: str, *, end_of_day: bool = False) -> str:
    """A caller's ``as_of``/``since``/``until`` in the kept form; :class:`TimeProblem` when it breaks the rule.
    A bare day with ``end_of_day`` (``as_of``, ``until``) means its last second: what was said that day counts."""
    found = parse_time(value).isoformat(timespec="seconds")
    if end_of_day and BARE_DAY.fullmatch(value.strip()):
        found = found[:10] + "T23:59:59"
    return found
