"""How a session is shown to the models: who speaks (by name) and when (the session's date).

A model can only resolve "I" to the memory owner and "tomorrow" to a date when the prompt says who the
owner is and what day it was. So every turn is rendered with its speaker's name (the owner's name for the
owner's messages, the other speaker's role or name otherwise), every prompt gets the session date, and
NLI premises say who said what ("Maya Chen said: I moved ..."), which is how a real NLI model can match
the owner's "I" against a hypothesis about "Maya Chen".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache

from promem_fast.types import Session, Turn

TurnGroup = tuple[int | str, tuple[Turn, ...]]

_FORMATS = (
    "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d",
    "%b %d, %Y, %H:%M:%S", "%b %d, %Y", "%B %d, %Y", "%I:%M %p on %d %B, %Y", "%d %B, %Y", "%d %B %Y",
    "%Y/%m/%d (%a) %H:%M", "%Y/%m/%d",
)
"""Timestamp shapes of the formats we read: ISO, HaluMem ("Jan 15, 2029, 15:12:20"), LoCoMo
("1:56 pm on 8 May, 2023") and LongMemEval ("2023/05/20 (Sat) 02:21")."""


@lru_cache(maxsize=4096)
def parse_day(stamp: str | None) -> date | None:
    """The calendar day of a timestamp in one of the shapes above; None when absent or unreadable."""
    if not stamp:
        return None
    text = stamp.strip()
    try:
        return datetime.fromisoformat(text).date()
    except ValueError:
        pass
    for fmt in _FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


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

    @classmethod
    def of(cls, session: Session) -> DialogueView:
        return cls(owner=session.user, owner_role=session.owner_role, day=parse_day(session.timestamp),
                   stamp=session.timestamp)

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

    def turn(self, group: TurnGroup) -> str:
        """``[turn 3] Maya Chen: ...`` lines (the turn's own date is added when it is not the session's)."""
        return _render(group, self.owner_role, self.owner, self.day)

    def turn_date(self, group: TurnGroup) -> str | None:
        """The day a turn was said on (its own timestamp when readable, else the session's)."""
        day = _turn_day(group) or self.day
        return day.isoformat() if day is not None else self.stamp

    def premise(self, group: TurnGroup, mode: str) -> str:
        """The NLI premise: "On 2029-01-15, Maya Chen said: I ..." for the whole turn, or only the owner's
        messages when ``mode`` is ``speaker`` (and the turn has some)."""
        _, messages = group
        if mode == "speaker":
            messages = tuple(m for m in messages if m.role == self.owner_role) or messages
        lines = [f"{_label(m.role, self.owner_role, self.owner)} said: {m.text}" for m in messages]
        day = _turn_day(group) or self.day
        head = f"On {day.isoformat()}, " if day is not None else ""
        return head + "\n".join(lines)


def _label(role: str, owner_role: str, owner: str) -> str:
    return owner if role == owner_role else role


def _turn_day(group: TurnGroup) -> date | None:
    return next((d for d in (parse_day(m.timestamp) for m in group[1]) if d is not None), None)


@lru_cache(maxsize=4096)
def _render(group: TurnGroup, owner_role: str, owner: str, day: date | None) -> str:
    """Cached: every stage shows the same turns; the cache covers a full window of sessions and no more."""
    tid, messages = group
    own_day = _turn_day(group)
    stamp = f" on {own_day.isoformat()}" if own_day is not None and own_day != day else ""
    return "\n".join(f"[turn {tid}{stamp}] {_label(m.role, owner_role, owner)}: {m.text}" for m in messages)
