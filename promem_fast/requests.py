"""What a session program asks the engine for, and what it gets back.

A session program is a generator: it yields a list of requests, the engine answers all of them (batched
with every other session's requests of the same kind) and sends back a list of results in the same order.
A result is the parsed value, or a :class:`Failure` when the step could not be completed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

import numpy as np

from promem_fast.backends.base import Message, NLIResult
from promem_fast.types import StepFailure

T = TypeVar("T")


@dataclass(frozen=True, eq=False, slots=True)
class Generate:
    """A chat completion whose reply must parse as JSON matching ``schema``.

    ``check`` is the role's semantic validation of the parsed value (ids in range, texts non-empty). It may
    return a repaired value together with repair notes, or raise ``ReplyError`` to have the reply retried.
    """

    stage: str
    role: str
    messages: tuple[Message, ...]
    schema: Mapping[str, Any]
    max_tokens: int
    check: Callable[[Any], tuple[Any, list[str]]] | None = None
    item: str | None = None
    """What the request is about, kept with a failure so the user can see which step failed."""
    cut_aware: bool = False
    """The program handles a reply cut by its token budget: such a reply comes back as :class:`Cut`."""


@dataclass(frozen=True, slots=True)
class Cut:
    """A reply that ran out of its token budget (finish reason "length"): its parsed and checked value,
    what was complete of it, or None when nothing of it parsed. Only :attr:`Generate.cut_aware` requests get
    one; the program continues the list or asks again with a larger budget."""

    value: Any
    looped: bool = False
    """The reply was repeating itself when it stopped (:mod:`promem_fast.loops`): more room or a
    continuation would only get more of the same, so the program keeps what it has."""


@dataclass(frozen=True, eq=False, slots=True)
class Entail:
    """NLI: does ``premise`` entail ``hypothesis``? Answered with an :class:`NLIResult`."""

    stage: str
    premise: str
    hypothesis: str
    item: str | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Embed:
    """Embeddings of ``texts``, answered with a float32 array of normalised rows."""

    stage: str
    texts: tuple[str, ...]
    query: bool = False
    """Embed as retrieval queries (some models prefix an instruction)."""


@dataclass(frozen=True, eq=False, slots=True)
class Match:
    """Top-1 cosine of each query row among the key rows, answered with ``(index, score)`` arrays."""

    stage: str
    queries: np.ndarray
    keys: np.ndarray


@dataclass(frozen=True, eq=False, slots=True)
class Anchor:
    """Detail anchoring by turn: for each entry turn, the indices of the details of the same turn.

    Answered with a list (one per entry) of int64 index arrays. Turns are ordinals within the session;
    negative means ungrounded. The engine answers all sessions' requests with one native call.
    """

    stage: str
    detail_turns: np.ndarray
    entry_turns: np.ndarray


@dataclass(frozen=True, eq=False, slots=True)
class CleanEdges:
    """Edge cleaning: indices of the candidate edges to keep (no self-loops, no edge to a discarded node
    (id < 0), no duplicate; relations flagged in ``symmetric`` match in both directions). Answered with
    an int64 array, input order kept; one native call for the whole batch."""

    stage: str
    source: np.ndarray
    relation: np.ndarray
    target: np.ndarray
    symmetric: np.ndarray | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Compress:
    """Token compression (LLMLingua-2) of ``texts``, answered with the compressed texts in order."""

    stage: str
    texts: tuple[str, ...]


@dataclass(frozen=True, eq=False, slots=True)
class Attend:
    """Sentence-level attention between consecutive ``texts`` (LightMem's coarse topic cut), answered with
    an ``(n, n)`` row-normalised float32 matrix."""

    stage: str
    texts: tuple[str, ...]


Request = Union[Generate, Entail, Embed, Match, Anchor, CleanEdges, Compress, Attend]


Failure = StepFailure
"""A step the engine could not complete (the result a program receives in place of a value); the program
records it in its statistics (``RunContext.fail``) and goes on with what it has."""


class ReplyError(ValueError):
    """Raised by a role's ``check`` when a parsed reply is unusable and no strict repair exists."""


Program = Generator[list[Request], list[Any], T]
"""A session program: yields request lists, receives result lists, returns its final value."""

__all__ = [
    "Anchor", "Attend", "CleanEdges", "Compress", "Cut", "Embed", "Entail", "Failure", "Generate", "Match", "NLIResult", "Program", "ReplyError", "Request",
]
