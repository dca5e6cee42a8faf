"""Times named in a question, read as a window of days relative to when it is asked.

"What did she do last May?" asked on 2023-08-10 means May 2023; "in 2022" the whole year; "two weeks ago"
the week around the day fourteen days back; "yesterday", "last week", "last month", "last year", "this
year" likewise; a full date ("8 May 2023", "May 8, 2023", "2023-05-08") its own day. A bound word before a
date, a month or a year opens the window on that side: "before June 2029", "by", "until" and "as of" a day
reach back to the first day ever, "after Dec 20, 2031" and "since 2023" forward to the last. The period
named stays in the window: a question often names the day of the event it asks about ("what might he
adopt after March 23?" asks what that day's talk implies), and "as of" a day asks what held on it. A time
relative to an event of the story ("before she moved") names no day and gives no window.

The window ranks up the memories said in it (:mod:`.ranking`): those said in the period named first, then
the others by how far from it (:func:`said_within`), so "as of Mar 23, 2032" ranks that day's memories,
then the day before's. Memories outside it stay searchable, since people often speak of a month well after
it.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Hashable, Sequence
from datetime import date, timedelta
from typing import NamedTuple, TypeVar

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_COUNT = r"(\d+|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"

_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH}\s+(?:of\s+)?(\d{{4}})\b", re.I)
_LAST_MONTH_NAME = re.compile(rf"\blast\s+{_MONTH}(?!\w)", re.I)
_IN_MONTH = re.compile(rf"\b(?:in|during|this)\s+{_MONTH}(?!\w)", re.I)
_YEAR = re.compile(r"\b(in|during|of|since|before|prior\s+to|after|until|till|up\s+to|by|as\s+of)\s+(\d{4})\b", re.I)
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b", re.I)
_AS_OF = re.compile(r"\bas of\b", re.I)
_BOUND_WORDS = "before|prior to|until|till|up to|by|as of|after|since"
"""The words that bound a window on one side ("before May", "as of 2021"), read by :func:`_bounded`."""
_BOUND = re.compile(rf"\b({_BOUND_WORDS})\s+(?:the\s+)?$", re.I)
_NAMED = re.compile(r"\b(?:yesterday|last\s+(?:week|month|year)|this\s+year)\b", re.I)
_LEAD = rf"(?:\b(?:{_BOUND_WORDS}|on|in|during)\s+(?:the\s+)?)?"
_PHRASES = tuple(re.compile(_LEAD + p.pattern, p.flags) for p in (
    _ISO, _DAY_MONTH_YEAR, _MONTH_DAY_YEAR, _MONTH_YEAR, _LAST_MONTH_NAME, _IN_MONTH, _YEAR, _AGO, _NAMED, _AS_OF))
"""What :func:`without_times` takes out: every phrase :func:`window` reads (longest forms first), with the bound
word or preposition that leads it ("prior to", "till", "on"), which the window has read too."""


class Window(NamedTuple):
    """The days a question asks about, both ends included (``date.min`` or ``date.max`` where it is open),
    and within them the period it names (the whole window unless a bound word opened it)."""

    first: date
    last: date
    named_first: date
    named_last: date

    @classmethod
    def of(cls, first: date, last: date) -> Window:
        return cls(first, last, first, last)

    def distance(self, day: date) -> int:
        """Days from ``day`` to the period named (0 inside it)."""
        return max((self.named_first - day).days, (day - self.named_last).days, 0)


K = TypeVar("K", bound=Hashable)


def _month(year: int, month: int) -> Window:
    return Window.of(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _day(year: int, month: int, day: int) -> Window | None:
    try:
        when = date(year, month, day)
    except ValueError:
        return None
    return Window.of(when, when)


def _relative(text: str, today: date) -> Window | None:
    lower = text.lower()
    if "yesterday" in lower:
        day = today - timedelta(days=1)
        return Window.of(day, day)
    if "last week" in lower:
        start = today - timedelta(days=today.weekday() + 7)
        return Window.of(start, start + timedelta(days=6))
    if "last month" in lower:
        first = today.replace(day=1) - timedelta(days=1)
        return _month(first.year, first.month)
    if "last year" in lower:
        return Window.of(date(today.year - 1, 1, 1), date(today.year - 1, 12, 31))
    if "this year" in lower:
        return Window.of(date(today.year, 1, 1), today)
    match = _AGO.search(text)
    if match:
        count = match.group(1).lower()
        n = int(count) if count.isdigit() else _NUMBERS[count]
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[match.group(2).lower()] * n
        slack = max(1, days // 4)
        return Window.of(today - timedelta(days=days + slack), today - timedelta(days=max(0, days - slack)))
    return None


def _bounded(days: Window, bound: str | None) -> Window:
    """``days`` opened on one side by the bound word before them (see the module's docstring)."""
    if bound in ("before", "prior to", "until", "till", "up to", "by", "as of"):
        return Window(date.min, days.last, days.named_first, days.named_last)
    if bound in ("after", "since"):
        return Window(days.first, date.max, days.named_first, days.named_last)
    return days


def _bound_before(question: str, match: re.Match[str]) -> str | None:
    found = _BOUND.search(question[:match.start()])
    return " ".join(found.group(1).lower().split()) if found else None


def window(question: str, today: date | None) -> Window | None:
    """The days ``question`` asks about, relative to ``today`` (its time; relative phrases need it), or None."""
    for pattern, order in ((_ISO, "ymd"), (_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        match = pattern.search(question)
        if match:
            parts = dict(zip(order, match.groups(), strict=True))
            month = int(parts["m"]) if parts["m"].isdigit() else _MONTHS[parts["m"].lower().rstrip(".")]
            found_day = _day(int(parts["y"]), month, int(parts["d"]))
            if found_day is not None:
                return _bounded(found_day, _bound_before(question, match))
    match = _MONTH_YEAR.search(question)
    if match and int(match.group(2)) >= date.min.year:  # "May 0000" names no day of the calendar
        days = _month(int(match.group(2)), _MONTHS[match.group(1).lower().rstrip(".")])
        return _bounded(days, _bound_before(question, match))
    if today is not None:
        match = _LAST_MONTH_NAME.search(question) or _IN_MONTH.search(question)
        if match:
            month = _MONTHS[match.group(1).lower().rstrip(".")]
            last = match.re is _LAST_MONTH_NAME
            year = today.year if month < today.month or (month == today.month and not last) else today.year - 1
            return _month(year, month)
    match = _YEAR.search(question)
    if match and int(match.group(2)) >= date.min.year:
        year = int(match.group(2))
        return _bounded(Window.of(date(year, 1, 1), date(year, 12, 31)), " ".join(match.group(1).lower().split()))
    return None if today is None else _relative(question, today)


def without_times(question: str) -> str:
    """The question without the time phrases :func:`window` reads ("as of Mar 23, 2032", "last May", "two weeks
    ago"): once the window carries the time, the phrase's words only add noise to the other rankings. A day
    and a month are in nearly every dated memory, so BM25 would pull memories for sharing "2032" or "Mar",
    and the embedding of "What is his pet preference as of Mar 23, 2032?" leans toward other dated sentences.
    Whitespace is closed up; a question that is only a time phrase is kept whole."""
    left = question
    for pattern in _PHRASES:
        left = pattern.sub(" ", left)
    left = re.sub(r"\s+([?.!,])", r"\1", re.sub(r"\s+", " ", left)).strip()
    return left if any(ch.isalnum() for ch in left) else question


def said_within(candidates: Sequence[K], said_of: Callable[[K], str | None], days: Window) -> list[K]:
    """The candidates said within ``days``: those said in the period it names first, in their given order,
    then the others by how many days from it."""
    on = {key: said_on(said_of(key)) for key in candidates}
    kept = {key: day for key, day in on.items() if day is not None and days.first <= day <= days.last}
    return sorted(kept, key=lambda key: days.distance(kept[key]))


def said_on(said: str | None) -> date | None:
    """The day of an ISO time (or day), None when there is none or it is not one."""
    if not said:
        return None
    try:
        return date.fromisoformat(said[:10])
    except ValueError:
        return None
