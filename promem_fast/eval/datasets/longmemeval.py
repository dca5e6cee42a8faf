"""LongMemEval (Wu et al. 2025): one question per haystack of user-assistant sessions, the haystacks
sharing many of their sessions."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from ...types import Session, Turn
from ..benchmark import Benchmark, EvalUser, Question
from .common import Loc, PathLike, check_limit, dedup, pair_turn_ids, read_json_list

log = logging.getLogger(__name__)

_LME_VARIANT = re.compile(r"longmemeval_(s|m|oracle)(?:_|$)")


def load_longmemeval(path: PathLike, limit: int | None = None) -> Benchmark:
    """Load ``longmemeval_s_cleaned.json``, ``longmemeval_m_cleaned.json`` or ``longmemeval_oracle.json``.

    Source schema (xiaowu0162/LongMemEval, README "Dataset Format")::

        [{"question_id": str,                 # ends in "_abs" for abstention questions
          "question_type": "single-session-user"|"single-session-assistant"|"single-session-preference"
                           |"temporal-reasoning"|"knowledge-update"|"multi-session",
          "question": str, "answer": str|int, "question_date": "2023/05/30 (Tue) 23:40",
          "haystack_session_ids": [str], "haystack_dates": [str],
          "haystack_sessions": [[{"role": "user"|"assistant", "content": str, "has_answer": true}]],
          "answer_session_ids": [str]}]

    Mapping: one :class:`EvalUser` per question (``user_id`` = ``question_id``) whose sessions are its
    haystack in order. The same haystack session recurs under many questions, so sessions are shared by id
    and :attr:`Benchmark.sessions` lists each once (extraction runs once per unique session); a session's
    timestamp is the date it had where first seen, while each question keeps its own dates in
    ``session_dates``. If one id ever comes with different contents, the later version is kept apart as
    ``{id}#2``, ``#3``, … (and a warning logged) rather than merged wrongly. Turn ids pair each user message
    with the assistant reply after it; turns flagged ``has_answer`` are listed per session in the question's
    ``metadata["evidence_turn_ids"]``. ``abstention`` follows LongMemEval's own test (``"_abs"`` in the id).
    ``limit``: the first N questions (the whole file is still parsed: it is a single JSON document).
    """
    check_limit(limit)
    path = Path(path)
    data = read_json_list(path)
    registry = _SessionRegistry()
    users = [_lme_item(rec, Loc(str(path), path=f"[{k}]"), registry) for k, rec in enumerate(data[:limit])]
    match = _LME_VARIANT.search(path.stem.lower())
    name = f"longmemeval-{match.group(1)}" if match else "longmemeval"
    bench = Benchmark(name, users, str(path))
    log.info("loaded %s from %s: %s", name, path, bench.counts())
    return bench


class _SessionRegistry:
    """Haystack sessions shared by id across questions, with a check that a reused id means the same text."""

    def __init__(self) -> None:
        self._versions: dict[str, list[tuple[tuple[tuple[str, str], ...], Session]]] = {}

    def resolve(self, raw_id: str, date: str | None, messages: list[tuple[str, str]]) -> Session:
        key = tuple(messages)
        versions = self._versions.setdefault(raw_id, [])
        for known, session in versions:
            if known == key:
                return session
        sid = raw_id if not versions else f"{raw_id}#{len(versions) + 1}"
        if versions:
            log.warning("LongMemEval session %r recurs with different contents; keeping this version as %r",
                        raw_id, sid)
        ids = pair_turn_ids([role for role, _ in messages])
        session = Session(
            session_id=sid,
            user="user",
            turns=tuple(Turn(turn_id=t, role=role, text=text) for t, (role, text) in zip(ids, messages, strict=True)),
            timestamp=date,
            metadata={"dataset": "longmemeval", "haystack_session_id": raw_id},
            owner_role="user",
        )
        versions.append((key, session))
        return session


def _lme_item(rec: Any, loc: Loc, registry: _SessionRegistry) -> EvalUser:
    qid = str(loc.get(rec, "question_id", (str, int)))
    ids = [str(x) for x in loc.get(rec, "haystack_session_ids", list)]
    raw_sessions = loc.get(rec, "haystack_sessions", list)
    dates = loc.get(rec, "haystack_dates", list, [None] * len(ids))
    if not len(ids) == len(raw_sessions) == len(dates):
        raise loc.error(f"haystack_session_ids ({len(ids)}), haystack_sessions ({len(raw_sessions)}) and "
                        f"haystack_dates ({len(dates)}) differ in length", "haystack_sessions")
    sessions: list[Session] = []
    resolved: dict[str, str] = {}
    evidence_turns: dict[str, list[int | str]] = {}
    for j, (raw_id, date, raw) in enumerate(zip(ids, dates, raw_sessions, strict=True)):
        sloc = Loc(loc.file, loc.line, raw_id, f"{loc.path}.haystack_sessions[{j}]")
        if not isinstance(raw, list):
            raise sloc.error(f"expected a list of messages, got {type(raw).__name__}")
        if date is not None and not isinstance(date, str):
            raise loc.child("haystack_dates").error(f"expected str, got {type(date).__name__}", f"[{j}]")
        messages = []
        flagged = []
        for m, msg in enumerate(raw):
            mloc = sloc.child(m)
            messages.append((mloc.get(msg, "role", str), mloc.get(msg, "content", str)))
            flagged.append(bool(mloc.get(msg, "has_answer", bool, False)))
        session = registry.resolve(raw_id, date, messages)
        sessions.append(session)
        resolved[raw_id] = session.session_id
        hits = [turn.turn_id for turn, hit in zip(session.turns, flagged, strict=True) if hit]
        if hits:
            evidence_turns[session.session_id] = list(dedup(hits))
    answer_ids = [str(x) for x in loc.get(rec, "answer_session_ids", list, [])]
    missing = [a for a in answer_ids if a not in resolved]
    if missing:
        log.warning("%s: question %s names answer sessions not in its haystack: %s", loc.file, qid, missing)
    question = Question(
        question_id=qid,
        user_id=qid,
        question=loc.get(rec, "question", str),
        answer=loc.text(rec, "answer"),
        question_type=loc.get(rec, "question_type", str),
        session_ids=tuple(s.session_id for s in sessions),
        session_dates=tuple(dates),
        evidence_session_ids=dedup([resolved[a] for a in answer_ids if a in resolved]),
        evidence=tuple(answer_ids),
        question_time=loc.get(rec, "question_date", str, None),
        abstention="_abs" in qid,
        metadata={"evidence_turn_ids": evidence_turns} if evidence_turns else {},
    )
    return EvalUser(user_id=qid, name="user", sessions=sessions, questions=[question])
