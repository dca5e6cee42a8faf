"""Times named in a question, read as a window of days relative to when it is asked.

"What did she do last May?" asked on 2023-08-10 means May 2023; "in 2022" the whole year; "two weeks ago"
the week around the day fourteen days back; "yesterday", "last week", "last month", "last year", "this
year" likewise; a full date ("8 May 2023", "May 8, 2023", "2023-05-08") its own day, and "as of 2029-02-13"
everything up to that day. A time relative to an event of the story ("before she moved") names no day and
gives no window. The window ranks up the memories said in it (:mod:`.ranking`); memories outside it stay
searchable, since people often speak of a month well after it.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

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
_YEAR = re.compile(r"\b(?:in|during|of|since)\s+(\d{4})\b", re.I)
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b", re.I)
_AS_OF = re.compile(r"\bas of\b", re.I)

Window = tuple[date, date]
"""First and last day, both included."""


def _month(year: int, month: int) -> Window:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _day(year: int, month: int, day: int) -> Window | None:
    try:
        when = date(year, month, day)
    except ValueError:
        return None
    return when, when


def _relative(text: str, today: date) -> Window | None:
    lower = text.lower()
    if "yesterday" in lower:
        day = today - timedelta(days=1)
        return day, day
    if "last week" in lower:
        start = today - timedelta(days=today.weekday() + 7)
        return start, start + timedelta(days=6)
    if "last month" in lower:
        first = today.replace(day=1) - timedelta(days=1)
        return _month(first.year, first.month)
    if "last year" in lower:
        return date(today.year - 1, 1, 1), date(today.year - 1, 12, 31)
    if "this year" in lower:
        return date(today.year, 1, 1), today
    match = _AGO.search(text)
    if match:
        count = match.group(1).lower()
        n = int(count) if count.isdigit() else _NUMBERS[count]
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[match.group(2).lower()] * n
        slack = max(1, days // 4)
        return today - timedelta(days=days + slack), today - timedelta(days=max(0, days - slack))
    return None


def window(question: str, today: date | None) -> Window | None:
    """The days ``question`` asks about, relative to ``today`` (its time; relative phrases need it), or None."""
    if _AS_OF.search(question):  # "as of D": what holds on D, said on D or any day before
        found = _ISO.search(question)
        if found:
            day = _day(*(int(g) for g in found.groups()))
            return None if day is None else (date(1, 1, 1), day[1])
    for pattern, order in ((_ISO, "ymd"), (_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        match = pattern.search(question)
        if match:
            parts = dict(zip(order, match.groups(), strict=True))
            month = int(parts["m"]) if parts["m"].isdigit() else _MONTHS[parts["m"].lower().rstrip(".")]
            found_day = _day(int(parts["y"]), month, int(parts["d"]))
            if found_day is not None:
                return found_day
    match = _MONTH_YEAR.search(question)
    if match:
        return _month(int(match.group(2)), _MONTHS[match.group(1).lower().rstrip(".")])
    if today is not None:
        match = _LAST_MONTH_NAME.search(question) or _IN_MONTH.search(question)
        if match:
            month = _MONTHS[match.group(1).lower().rstrip(".")]
            last = match.re is _LAST_MONTH_NAME
            year = today.year if month < today.month or (month == today.month and not last) else today.year - 1
            return _month(year, month)
    match = _YEAR.search(question)
    if match:
        year = int(match.group(1))
        return date(year, 1, 1), date(year, 12, 31)
    return None if today is None else _relative(question, today)


def within(said: str | None, days: Window) -> bool:
    """Whether an ISO time (or day) ``said`` falls on one of the window's days."""
    if not said:
        return False
    try:
        day = date.fromisoformat(said[:10])
    except ValueError:
        return False
    return days[0] <= day <= days[1]
