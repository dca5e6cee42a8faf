"""How a session is shown to the models: who speaks (by name) and when (the session's date).

A model can only resolve "I" to the memory owner and "tomorrow" to a date when the prompt says who the
owner is and what day it was. So every turn is rendered with its speaker's name (the owner's name for the
owner's messages, the other speaker's role or name otherwise), every prompt gets the session date, and
NLI premises say who said what ("Maya Chen said: I moved ..."), which is how a real NLI model can match
the owner's "I" against a hypothesis about "Maya Chen". Premises also carry the calendar day of each relative
date the speaker used ("tomorrow (2029-01-16)"): the facts were written with calendar dates, and an NLI model
cannot count days, so without it every correctly dated fact would go to decomposition and adjudication.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, timedelta
from functools import lru_cache

from promem_fast.prompts import session_block
from promem_fast.times import day_of
from promem_fast.types import Session, Turn

TurnGroup = tuple[int | str, tuple[Turn, ...]]

def day_text(day: date) -> str:
    """``2029-01-15 (Monday)``: ISO for the model to copy into facts, the weekday for "last Friday"."""
    return f"{day.isoformat()} ({day.strftime('%A')})"


@dataclass(frozen=True)
class DialogueView:
    """The names and the date a session's prompts show."""

    owner: str
    """The memory owner's name (``Session.user``)."""
    owner_role: str
    """The ``Turn.role`` of the owner's messages."""
    day: date | None
    stamp: str | None
    """The session timestamp as given (shown when it cannot be read as a date)."""
    block: str = ""
    """The leading block every prompt of the session starts with (:func:`promem_fast.prompts.session_block`)."""
    shows_dialogue: bool = False
    """Whether ``block`` holds the whole dialogue (else each prompt carries the part it needs)."""
    detail_originals: bool = False
    """Whether the words details are taken from are compressed in ``block``, so details are asked from the
    original turns, shown in their own requests."""

    @classmethod
    def of(cls, session: Session) -> DialogueView:
        """The view with the whole dialogue in its block (:func:`~promem_fast.pipeline.common.with_block`
        takes it out when the session does not fit the model's context)."""
        view = cls(owner=session.user, owner_role=session.owner_role, day=day_of(session.timestamp),
                   stamp=session.timestamp)
        block = session_block(view.owner, view.when, view.dialogue(session.turn_groups()))
        return replace(view, block=block, shows_dialogue=True)

    @property
    def when(self) -> str:
        """The session date line of every extraction prompt."""
        if self.day is not None:
            return day_text(self.day)
        return self.stamp.strip() if self.stamp and self.stamp.strip() else "unknown"

    @property
    def date(self) -> str | None:
        """The date kept on each node: ISO when readable, else the timestamp as given."""
        return self.day.isoformat() if self.day is not None else self.stamp

    def dialogue(self, groups: Sequence[TurnGroup]) -> str:
        """Every turn, one ``[turn 3] Maya Chen: ...`` line per message."""
        return "\n".join(self.turn(g) for g in groups)

    def turn(self, group: TurnGroup) -> str:
        """``[turn 3] Maya Chen: ...`` lines (the turn's own date is added when it is not the session's)."""
        return _render(group, self.owner_role, self.owner, self.day)

    def turn_date(self, group: TurnGroup) -> str | None:
        """The day a turn was said on (its own timestamp when readable, else the session's)."""
        day = _turn_day(group) or self.day
        return day.isoformat() if day is not None else self.stamp

    def premise(self, group: TurnGroup, mode: str) -> str:
        """The NLI premise: "On 2029-01-15, Maya Chen said: I ..." for only the owner's messages when
        ``mode`` is ``speaker`` (and the turn has some), or for the whole turn; relative dates resolved."""
        day = _turn_day(group) or self.day
        lines = [f"{_label(m.role, self.owner_role, self.owner)} said: {resolve_dates(m.text, day)}"
                 for m in self.said(group, mode)]
        head = f"On {day.isoformat()}, " if day is not None else ""
        return head + "\n".join(lines)

    def said(self, group: TurnGroup, mode: str) -> tuple[Turn, ...]:
        """A turn's messages that count as evidence: the owner's (``speaker``; the whole turn when the owner
        said nothing in it) or every message (``turn``, the ablation)."""
        _, messages = group
        if mode == "speaker":
            return tuple(m for m in messages if m.role == self.owner_role) or messages
        return messages


def _label(role: str, owner_role: str, owner: str) -> str:
    return owner if role == owner_role else role


def _turn_day(group: TurnGroup) -> date | None:
    return next((d for d in (day_of(m.timestamp) for m in group[1]) if d is not None), None)


@lru_cache(maxsize=4096)
def _render(group: TurnGroup, owner_role: str, owner: str, day: date | None) -> str:
    """Cached: every stage shows the same turns; the cache covers a full window of sessions and no more."""
    tid, messages = group
    own_day = _turn_day(group)
    stamp = f" on {own_day.isoformat()}" if own_day is not None and own_day != day else ""
    return "\n".join(f"[turn {tid}{stamp}] {_label(m.role, owner_role, owner)}: {m.text}" for m in messages)


_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
            "ten": 10}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNT = r"(\d{1,2}|" + "|".join(_NUMBERS) + r"|a)"
_RELATIVE = re.compile(
    r"\b(?:the day before yesterday|the day after tomorrow|yesterday|today|tonight|tomorrow"
    r"|(?:last|next|this coming) (?:" + "|".join(_WEEKDAYS) + r"|week)"
    r"|" + _COUNT + r" (day|week)s? ago|in " + _COUNT + r" (day|week)s?)\b", re.I)


def _offset(phrase: str, day: date) -> date:
    words = phrase.lower().split()
    fixed = {"the day before yesterday": -2, "the day after tomorrow": 2, "yesterday": -1, "today": 0,
             "tonight": 0, "tomorrow": 1}
    if phrase.lower() in fixed:
        return day + timedelta(days=fixed[phrase.lower()])
    calendar_week = words[0] in ("last", "next", "this") and words[-1] == "week"
    if calendar_week:
        monday = day - timedelta(days=day.weekday())
        return monday + timedelta(days=-7 if words[0] == "last" else 7)
    if words[-1] in _WEEKDAYS:
        target = _WEEKDAYS.index(words[-1])
        if words[0] == "last":
            return day - timedelta(days=(day.weekday() - target - 1) % 7 + 1)
        return day + timedelta(days=(target - day.weekday() - 1) % 7 + 1)
    count_word = words[1] if words[0] == "in" else words[0]
    count = 1 if count_word == "a" else _NUMBERS.get(count_word) or int(count_word)
    unit = 7 if words[2 if words[0] == "in" else 1].startswith("week") else 1
    return day + timedelta(days=count * unit * (1 if words[0] == "in" else -1))


def resolve_dates(text: str, day: date | None) -> str:
    """``text`` with the calendar day after each relative date ("tomorrow (2029-01-16)", "last week (the
    week of 2029-01-08)"), counted from ``day``; unchanged without a day."""
    if day is None:
        return text

    def mark(m: re.Match[str]) -> str:
        try:
            found = _offset(m.group(0), day)
        except OverflowError:  # "tomorrow" of 9999-12-31 is past the calendar: left as said
            return m.group(0)
        if re.fullmatch(r"(?:last|next|this coming) week", m.group(0), re.I):
            return f"{m.group(0)} (the week of {found.isoformat()})"
        return f"{m.group(0)} ({found.isoformat()})"

    return _RELATIVE.sub(mark, text)
