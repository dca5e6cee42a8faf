"""HaluMem (Chen et al. 2025), the paper's primary benchmark: gold memory points per session, so extraction
itself can be judged (integrity, accuracy), plus QA asked after each session."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from ...types import Session, Turn
from ..benchmark import Benchmark, EvalUser, GoldMemory, Question
from .common import Loc, PathLike, check_limit, dedup, pair_turn_ids

log = logging.getLogger(__name__)

_PERSONA_NAME = re.compile(r"Name:\s*([^;]+?)\s*(?:;|$)")
_BOOL_STRINGS = {"true": True, "false": False}


def load_halumem(path: PathLike, limit: int | None = None) -> Benchmark:
    """Load ``HaluMem-Medium.jsonl`` or ``HaluMem-Long.jsonl`` (one user per line).

    Source schema (HaluMem, IAAR-Shanghai/HaluMem on Hugging Face; MemTensor/HaluMem on GitHub)::

        {"uuid": str,
         "persona_info": "[Recorded on …] Name: Martin Mark; Gender: …; …",
         "sessions": [
           {"start_time": "Jan 15, 2029, 15:12:20", "end_time": str,
            "dialogue": [{"role": "user"|"assistant", "content": str, "timestamp": str,
                          "dialogue_turn": int}],          # a user message and its reply share the number
            "memory_points": [{"index": int, "memory_content": str,
                               "memory_type": "Persona Memory"|"Event Memory"|"Relationship Memory",
                               "memory_source": "primary"|"secondary"|"interference"|"system",
                               "is_update": "True"|"False", "original_memories": [str],
                               "importance": float, "timestamp": str,
                               # interference points also: reason, source_memory_index,
                               # reference_memory_content/_index/_type
                               }],
            "questions": [{"question": str, "answer": str,
                           "evidence": [{"memory_content": str, "memory_type": str}],
                           "difficulty": "easy"|"medium"|"hard", "question_type": str}],  # key may be absent
            # HaluMem-Long distractor sessions (irrelevant QA inserted between real sessions):
            "is_generated_qa_session": true, "title": str, "session_id": int}],
         "total_dialogue_token_length": int, "total_question_count": int, "token_cost": {…}}

    Mapping: one :class:`EvalUser` per line, named from ``persona_info``'s ``Name:`` (the uuid when absent);
    session ids ``{uuid}:{index}`` (position in ``sessions``, distractors included, as in HaluMem's own
    evaluation); session timestamp = ``start_time``; turn ids = ``dialogue_turn`` (paired user→reply when a
    message lacks it, as inside HaluMem-Long's inserted QA). Distractor sessions are kept (they are part of
    the history a system must read) and flagged ``metadata["distractor"]``. A session's questions are asked
    after it ends: their history is every session up to and including it, ``question_time`` its
    ``end_time``, and ``evidence_session_ids`` the sessions whose gold points are the evidence;
    "Memory Boundary" questions (about things never said; no evidence) are marked ``abstention``.
    ``is_update`` strings become bools. ``limit``: the first N users.
    """
    check_limit(limit)
    path = Path(path)
    users: list[EvalUser] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            if limit is not None and len(users) >= limit:
                break
            if not raw.strip():
                continue
            loc = Loc(str(path), lineno)
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise loc.error(f"invalid JSON: {exc.msg}") from exc
            users.append(_halumem_user(record, loc))
    stem = path.stem.lower()
    name = "halumem-long" if "long" in stem else "halumem-medium" if "medium" in stem else "halumem"
    bench = Benchmark(name, users, str(path))
    log.info("loaded %s from %s: %s", name, path, bench.counts())
    return bench


def _halumem_user(record: Any, loc: Loc) -> EvalUser:
    uuid = str(loc.get(record, "uuid", (str, int)))
    persona = loc.get(record, "persona_info", str, "")
    match = _PERSONA_NAME.search(persona)
    if match:
        name = match.group(1)
    else:
        log.warning("%s:%s: no 'Name:' in persona_info of user %s; using the uuid as the name",
                    loc.file, loc.line, uuid)
        name = uuid

    sessions: list[Session] = []
    points: list[GoldMemory] = []
    questions: list[Question] = []
    sessions_of_content: dict[str, list[str]] = {}
    sessions_loc = loc.child("sessions")
    for i, raw in enumerate(loc.get(record, "sessions", list)):
        sid = f"{uuid}:{i}"
        sloc = sessions_loc.child(i, session_id=sid)
        session = _halumem_session(raw, sid, name, uuid, i, sloc)
        sessions.append(session)
        for k, mp in enumerate(sloc.get(raw, "memory_points", list, [])):
            point = _halumem_point(mp, sid, sloc.child("memory_points").child(k))
            points.append(point)
            sessions_of_content.setdefault(point.content, []).append(sid)
        history = tuple(s.session_id for s in sessions)
        dates = tuple(s.timestamp for s in sessions)
        asked_at = session.metadata["end_time"] or session.timestamp
        for j, rq in enumerate(sloc.get(raw, "questions", list, [])):
            qloc = sloc.child("questions").child(j)
            question_type = qloc.get(rq, "question_type", str)
            evidence = tuple(qloc.get(rq, "evidence", list, []))
            for e, item in enumerate(evidence):
                qloc.child("evidence").child(e).get(item, "memory_content", str)
            evidence_sessions = dedup(
                [s for item in evidence for s in sessions_of_content.get(item["memory_content"], [])]
            )
            questions.append(Question(
                question_id=f"{sid}:q{j}",
                user_id=uuid,
                question=qloc.get(rq, "question", str),
                answer=qloc.text(rq, "answer"),
                question_type=question_type,
                session_ids=history,
                session_dates=dates,
                evidence_session_ids=evidence_sessions,
                evidence=evidence,
                question_time=asked_at,
                difficulty=qloc.get(rq, "difficulty", str, None),
                abstention=question_type == "Memory Boundary",
                metadata={"session_index": i},
            ))
    meta = {k: record[k] for k in ("total_dialogue_token_length", "total_question_count") if k in record}
    meta["persona_info"] = persona
    return EvalUser(user_id=uuid, name=name, sessions=sessions, memory_points=points, questions=questions,
                    metadata=meta)


def _halumem_session(raw: Any, sid: str, name: str, uuid: str, index: int, loc: Loc) -> Session:
    start = loc.get(raw, "start_time", str, None)
    end = loc.get(raw, "end_time", str, None)
    messages = loc.get(raw, "dialogue", list)
    roles: list[str] = []
    texts: list[str] = []
    stamps: list[str | None] = []
    numbers: list[int | None] = []
    for m, msg in enumerate(messages):
        mloc = loc.child("dialogue").child(m)
        roles.append(mloc.get(msg, "role", str))
        texts.append(mloc.get(msg, "content", str))
        stamps.append(mloc.get(msg, "timestamp", str, None))
        numbers.append(mloc.get(msg, "dialogue_turn", int, None))
    if any(n is None for n in numbers):
        log.debug("session %s: messages without dialogue_turn, pairing user messages with replies", sid)
        turn_ids: list[int] = pair_turn_ids(roles)
    else:
        turn_ids = [n for n in numbers if n is not None]
    turns = tuple(Turn(turn_id=t, role=r, text=x, timestamp=s)
                  for t, r, x, s in zip(turn_ids, roles, texts, stamps, strict=True))
    meta: dict[str, Any] = {
        "dataset": "halumem",
        "user_id": uuid,
        "index": index,
        "end_time": end,
        "distractor": bool(loc.get(raw, "is_generated_qa_session", bool, False)),
    }
    title = loc.get(raw, "title", str, None)
    if title is not None:
        meta["title"] = title
    return Session(session_id=sid, user=name, turns=turns, timestamp=start, metadata=meta, owner_role="user")


_POINT_FIELDS = frozenset({
    "index", "memory_content", "memory_type", "memory_source", "is_update", "original_memories",
    "importance", "timestamp",
})


def _halumem_point(raw: Any, sid: str, loc: Loc) -> GoldMemory:
    flag = loc.get(raw, "is_update", (str, bool), False)
    if isinstance(flag, str):
        if flag.strip().lower() not in _BOOL_STRINGS:
            raise loc.error(f"expected 'True' or 'False', got {flag!r}", "is_update")
        flag = _BOOL_STRINGS[flag.strip().lower()]
    originals = loc.get(raw, "original_memories", list, [])
    for k, text in enumerate(originals):
        if not isinstance(text, str):
            raise loc.child("original_memories").error(f"expected str, got {type(text).__name__}", f"[{k}]")
    importance = loc.get(raw, "importance", (int, float), None)
    return GoldMemory(
        session_id=sid,
        content=loc.get(raw, "memory_content", str),
        memory_type=loc.get(raw, "memory_type", str),
        source=loc.get(raw, "memory_source", str),
        index=loc.get(raw, "index", int, None),
        is_update=flag,
        original_memories=tuple(originals),
        importance=None if importance is None else float(importance),
        timestamp=loc.get(raw, "timestamp", str, None),
        metadata={k: v for k, v in raw.items() if k not in _POINT_FIELDS},
    )
