"""Time in the store: when a memory was said, until when it held, and the one order sessions are judged in.

Every time the store keeps or hands out is ISO 8601 (``2024-03-02T10:00:00``, naive; an aware time is
turned into UTC first), so that times compare as strings in SQL. A memory holds from its ``valid_from``
(its own date, else its session's) until a newer memory replaces it (``valid_until``, the newer one's
``valid_from``); a question about a time sees the memories that held then.

The canonical order (:func:`session_key`) is the order in which a user's sessions are judged for updates:
by when they were said, then by session id with its numbers compared as numbers (``s2`` before ``s10``),
undated sessions last. Each session is judged against the memory as it stood after every session before it
in that order, whatever order the sessions arrived in (see :mod:`.ordering`).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from promem_fast.errors import InputError
from promem_fast import times

_NUMBER = re.compile(r"(\d+)")
UNDATED = "~"
"""Sorts after every ISO time: undated sessions come last in the canonical order."""


def query_time(value: str | None, field: str, *, end_of_day: bool = False) -> str | None:
    """A caller's ``as_of``/``since``/``until`` in the kept form; one that breaks the rule of
    :mod:`promem_fast.times` (unreadable, or outside the years 0001-9999 in UTC) is an error naming the field.

    A bare day given as ``as_of`` or ``until`` (``end_of_day``) means its last second: what was said that
    day counts."""
    if value is None:
        return None
    try:
        return times.query_time(value, end_of_day=end_of_day)
    except times.TimeProblem as exc:
        raise InputError(str(exc), field=field) from None


def time_window(as_of: str | None, since: str | None, until: str | None) -> tuple[str | None, ...]:
    """The three query times read by one rule, with ``since`` after ``until`` refused by name."""
    read = (query_time(as_of, "as_of", end_of_day=True), query_time(since, "since"),
            query_time(until, "until", end_of_day=True))
    if read[1] is not None and read[2] is not None and read[1] > read[2]:
        raise InputError(f"since ({since}) is after until ({until}): the window holds nothing", field="since")
    return read


def day_label(iso: str | None) -> str | None:
    """``2023-05-07 (Sunday)``: how an answerer is shown a memory's day."""
    if not iso:
        return None
    day = datetime.fromisoformat(iso)
    return f"{day.date().isoformat()} ({day.strftime('%A')})"


def now_iso() -> str:
    """The current UTC time, ISO 8601 with ``Z`` (when something was recorded)."""
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def validity(as_of: str | None, since: str | None, until: str | None, *, history: bool = False,
             alias: str = "n") -> tuple[str, tuple[Any, ...]]:
    """SQL (over ``nodes {alias}``) selecting the memories a question sees, with its parameters.

    Merged duplicates never show (their memory stands for them). Without ``as_of``: the current memories
    (none replaced yet), or all of them with ``history``. With ``as_of`` ("what held then"): those said by
    then (undated ones always) and not replaced before it. ``since``/``until`` ("said within the window"):
    those said on or after ``since`` and by ``until``, replaced ones included when there is no ``as_of``;
    an undated memory was said at no known time, so a window never holds it.
    """
    n = alias
    clauses, params = [f"{n}.merged_into IS NULL", shown(n)], []
    if as_of is not None:
        clauses.append(f"({n}.valid_from IS NULL OR {n}.valid_from <= ?)")
        clauses.append(f"({n}.superseded_by IS NULL OR ({n}.valid_until IS NOT NULL AND {n}.valid_until > ?))")
        params += [as_of, as_of]
    elif not history and since is None and until is None:
        clauses.append(f"{n}.superseded_by IS NULL")
    if since is not None:
        clauses.append(f"{n}.valid_from >= ?")
        params.append(since)
    if until is not None:
        clauses.append(f"{n}.valid_from <= ?")
        params.append(until)
    return " AND ".join(clauses), tuple(params)


def shown(alias: str = "n") -> str:
    """SQL (over ``nodes {alias}``): the memory is shown to readers. A new session shows in the transaction that
    writes its update verdicts, or, when it reopened later sessions of its user (it was said before them), once
    those are judged again; a memory that a reopened session had replaced or absorbed is held back until then
    (:func:`.pending.release`). So a reader during the judging finds the memory as it was before the session
    came: never its new memories beside the older ones they are about to replace, nor an earlier-dated memory
    beside the later one being judged again, nor a replaced memory back as current meanwhile."""
    return f"{alias}.held = 0 AND {alias}.session_pk NOT IN (SELECT id FROM sessions WHERE shown = 0)"


def session_key(said_at: str | None, session_id: str) -> tuple[Any, ...]:
    """A session's place in the canonical order (see the module)."""
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _NUMBER.split(session_id) if p)
    return (said_at or UNDATED, parts)
