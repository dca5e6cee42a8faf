"""Benchmark records: what a loader hands to extraction, QA and judging.

Every benchmark (HaluMem, LoCoMo, LongMemEval) is loaded into the same shape so the code on top of it
(extraction runs, QA answering, judging, aggregation) is written once:

- a :class:`Benchmark` holds :class:`EvalUser` items (a HaluMem user, a LoCoMo conversation, a LongMemEval
  question with its haystack);
- each item holds its :class:`~promem_fast.types.Session` objects (what the engine extracts), its gold
  :class:`GoldMemory` points (what extraction is judged against) and its :class:`Question` items (what QA is
  judged on).

Sessions may be shared between items (LongMemEval reuses haystack sessions across questions):
:attr:`Benchmark.sessions` yields each session once, so extraction runs once per unique session, and every
question names the session ids whose memory it may use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..types import Session


@dataclass(frozen=True, slots=True)
class GoldMemory:
    """One annotated memory point of a session: what a complete and faithful extraction should contain.

    HaluMem memory points map field by field; LoCoMo's annotated per-speaker event summaries are loaded as
    points with ``source == "event_summary"``.
    """

    session_id: str
    content: str
    memory_type: str
    """``Persona Memory`` / ``Event Memory`` / ``Relationship Memory`` (HaluMem's labels)."""
    source: str
    """HaluMem ``memory_source`` (``primary`` / ``secondary`` / ``interference`` / ``system``)."""
    index: int | None = None
    is_update: bool = False
    original_memories: tuple[str, ...] = ()
    """The earlier memories an update point replaces."""
    importance: float | None = None
    timestamp: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    """Fields the common shape has no slot for (e.g. an interference point's ``reason`` and references)."""

    @property
    def is_interference(self) -> bool:
        """Interference points are false facts planted in the dialogue: a good extractor must NOT store them."""
        return self.source == "interference"


@dataclass(frozen=True, slots=True)
class Question:
    """One QA item, with everything answering and judging need without going back to the raw file."""

    question_id: str
    user_id: str
    """The :attr:`EvalUser.user_id` it belongs to."""
    question: str
    answer: str | None
    """Gold answer, always a string (LoCoMo/LongMemEval store some as ints). ``None`` only for LoCoMo
    adversarial questions that carry no ``answer`` (their gold behaviour is to say it is not mentioned)."""
    question_type: str
    """The benchmark's own label: HaluMem ``question_type``, LongMemEval ``question_type``, LoCoMo category
    name (``multi-hop``, ``temporal``, ``open-domain``, ``single-hop``, ``adversarial``)."""
    session_ids: tuple[str, ...]
    """Sessions whose memory may be used to answer (the history before the question), in time order."""
    session_dates: tuple[str | None, ...] = ()
    """Date of each of ``session_ids`` as this question's history gives it (LongMemEval re-dates shared
    sessions per question, so this may differ from ``Session.timestamp``)."""
    evidence_session_ids: tuple[str, ...] = ()
    """Sessions holding the evidence (HaluMem: sessions whose gold points are the evidence; LoCoMo: the
    sessions of the evidence dialogue ids; LongMemEval: ``answer_session_ids``)."""
    evidence: tuple[Any, ...] = ()
    """Raw evidence: HaluMem ``{memory_content, memory_type}`` dicts, LoCoMo dialogue ids, LongMemEval answer
    session ids."""
    question_time: str | None = None
    """When the question is asked (HaluMem: end of its session; LoCoMo: date of the last session;
    LongMemEval: ``question_date``)."""
    category: int | None = None
    """LoCoMo's numeric category (1..5); ``None`` elsewhere."""
    difficulty: str | None = None
    abstention: bool = False
    """The right answer is to say the information is not there (HaluMem "Memory Boundary", LoCoMo
    category 5, LongMemEval ``_abs``)."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class EvalUser:
    """One benchmark item: a HaluMem user, a LoCoMo conversation, or a LongMemEval question's haystack."""

    user_id: str
    name: str
    sessions: list[Session]
    memory_points: list[GoldMemory] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def memory_points_by_session(self) -> dict[str, list[GoldMemory]]:
        """Gold points grouped per session id (every session present, possibly with an empty list), since
        HaluMem judges each session's extraction against that session's points only."""
        out: dict[str, list[GoldMemory]] = {s.session_id: [] for s in self.sessions}
        for point in self.memory_points:
            out.setdefault(point.session_id, []).append(point)
        return out

    def first_sessions(self, n: int) -> EvalUser:
        """This item cut to its first ``n`` dialogue sessions (see :meth:`Benchmark.first_sessions`)."""
        keys = [_dialogue_of(s) for s in self.sessions]
        first = set(list(dict.fromkeys(keys))[:n])
        sessions = [s for s, key in zip(self.sessions, keys, strict=True) if key in first]
        kept = {s.session_id for s in sessions}
        return replace(self, sessions=sessions,
                       memory_points=[p for p in self.memory_points if p.session_id in kept],
                       questions=[_within(q, kept) for q in self.questions if _answerable(q, kept)])


@dataclass(slots=True)
class Benchmark:
    """A loaded benchmark file."""

    name: str
    """e.g. ``halumem-medium``, ``locomo``, ``longmemeval-s``."""
    users: list[EvalUser]
    source: str | None = None
    """The file it was read from."""

    def iter_sessions(self) -> Iterator[Session]:
        """Each unique session once (by id), in order of first appearance: what extraction runs over."""
        seen: set[str] = set()
        for user in self.users:
            for session in user.sessions:
                if session.session_id not in seen:
                    seen.add(session.session_id)
                    yield session

    @property
    def sessions(self) -> list[Session]:
        return list(self.iter_sessions())

    @property
    def questions(self) -> list[Question]:
        return [q for user in self.users for q in user.questions]

    @property
    def memory_points(self) -> list[GoldMemory]:
        return [p for user in self.users for p in user.memory_points]

    def first_sessions(self, n: int) -> Benchmark:
        """Every item cut to its first ``n`` dialogue sessions, for evaluation runs small enough for a CPU model.

        Each item keeps its first ``n`` sessions in order (HaluMem distractor sessions count, as they are part
        of the history; LoCoMo's two per-speaker copies of one conversation session count as one) and the
        gold points of those sessions. A question stays only when the sessions it needs are all kept: the
        sessions of its evidence (``evidence_session_ids``) when it names any, else its whole history
        (``session_ids``), since without evidence any session may be the one the answer depends on. Kept
        sessions are a prefix of the item, so the latter means the session the question is asked after is
        kept: for HaluMem the session it was asked in, for LoCoMo and LongMemEval (asked after the whole
        conversation or haystack) only an item with no session cut. A kept question's ``session_ids`` and
        ``session_dates`` are cut to the kept sessions, so answering never searches a session that was not
        extracted.
        """
        return replace(self, users=[user.first_sessions(n) for user in self.users])

    def session_index(self) -> dict[str, Session]:
        """Session id → session, for looking up the sessions a question names."""
        return {s.session_id: s for s in self.iter_sessions()}

    def counts(self) -> dict[str, int]:
        """Sizes, for logs and sanity checks against the benchmark's published statistics."""
        return {
            "users": len(self.users),
            "sessions": sum(1 for _ in self.iter_sessions()),
            "memory_points": sum(len(u.memory_points) for u in self.users),
            "questions": sum(len(u.questions) for u in self.users),
        }


def _dialogue_of(session: Session) -> str:
    """The dialogue a session was read from: LoCoMo loads each conversation session once per speaker, the two
    copies naming each other in ``metadata["peer_session_id"]``, and a session limit counts them as one."""
    peer = session.metadata.get("peer_session_id")
    return session.session_id if peer is None else min(session.session_id, peer)


def _answerable(question: Question, kept: set[str]) -> bool:
    """Whether every session ``question`` needs is in ``kept`` (the rule of :meth:`Benchmark.first_sessions`)."""
    return all(sid in kept for sid in question.evidence_session_ids or question.session_ids)


def _within(question: Question, kept: set[str]) -> Question:
    """``question`` with its history (ids and dates) cut to the sessions in ``kept``."""
    keep = [i for i, sid in enumerate(question.session_ids) if sid in kept]
    return replace(question, session_ids=tuple(question.session_ids[i] for i in keep),
                   session_dates=tuple(question.session_dates[i] for i in keep) if question.session_dates else ())
