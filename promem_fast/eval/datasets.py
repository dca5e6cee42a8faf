"""Loaders of the three benchmarks the paper evaluates on (§4.1), each into a :class:`Benchmark`.

- HaluMem (Chen et al. 2025), the primary benchmark: gold memory points per session, so extraction
  itself can be judged (integrity, accuracy), plus QA.
- LoCoMo (Maharana et al. 2024): long peer-to-peer conversations with QA by category.
- LongMemEval (Wu et al. 2025): one question per haystack of user-assistant sessions.

Every malformed record raises :class:`~promem_fast.errors.InputError` naming the file, the line (JSONL)
or the record index inside the field path (JSON), the session and the field, so it can be found and fixed.
Nothing is silently skipped except what the schemas below say is optional.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError, InputError
from ..types import Session, Turn
from .records import Benchmark, EvalUser, GoldMemory, Question

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""LoCoMo's numeric QA categories. The data carries only the numbers; this mapping is the one LoCoMo's own
evaluation code implies (snap-research/locomo, ``task_eval/evaluation.py`` and ``evaluation_stats.py``):
category 1 is scored as a comma-separated multi-answer list (multi-hop answers gathered across sessions),
category 3 answers are cut at ``;`` (open-domain answers carry a rationale after it), category 5 is scored
on refusing (adversarial), and the per-category report is printed in the order 4, 1, 2, 3, 5, which is the
paper's table order single-hop, multi-hop, temporal, open-domain, adversarial. The category sizes of
``locomo10.json`` agree (1: 282, 2: 321, 3: 96, 4: 841, 5: 446 — 841 single-hop, 282 multi-hop, 321
temporal, 96 open-domain)."""

_T = TypeVar("_T")
_MISSING: Any = object()
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVENTS_KEY = re.compile(r"^events_session_(\d+)$")
_DIA_ID = re.compile(r"D(\d+):(\d+)")
_PERSONA_NAME = re.compile(r"Name:\s*([^;]+?)\s*(?:;|$)")
_LME_VARIANT = re.compile(r"longmemeval_(s|m|oracle)(?:_|$)")
_BOOL_STRINGS = {"true": True, "false": False}


# --------------------------------------------------------------------------------------------- helpers
@dataclass(frozen=True)
class _Loc:
    """Where in the input a value sits, so a failure can name file, line, session and field path."""

    file: str
    line: int | None = None
    session_id: str | None = None
    path: str = ""

    def child(self, part: str | int, session_id: str | None = None) -> _Loc:
        sub = f"[{part}]" if isinstance(part, int) else f".{part}" if self.path else part
        return _Loc(self.file, self.line, session_id or self.session_id, self.path + sub)

    def error(self, message: str, key: str | None = None) -> InputError:
        field = self.path if key is None else (f"{self.path}.{key}" if self.path else key)
        return InputError(message, file=self.file, line=self.line, session_id=self.session_id, field=field or None)

    def get(self, record: Any, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        """``record[key]`` checked against ``kind``; a missing or null value gives ``default`` or fails."""
        if not isinstance(record, Mapping):
            raise self.error(f"expected an object, got {type(record).__name__}")
        value = record.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error("missing required field", key)
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(f"expected {names}, got {type(value).__name__}", key)
        return value

    def text(self, record: Any, key: str, default: Any = _MISSING) -> Any:
        """A scalar kept as a string: answers are sometimes ints (``2022``) and are compared as text."""
        value = self.get(record, key, (str, int, float), default)
        return value if value is default else str(value)


def _check_limit(limit: int | None, name: str = "limit") -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"{name} must be a non-negative integer or None, got {limit!r}")


def _read_json_list(path: Path) -> list[Any]:
    """A whole JSON file that must hold a list (LoCoMo, LongMemEval)."""
    with path.open(encoding="utf-8") as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg}", file=str(path), line=exc.lineno) from exc
    if not isinstance(data, list):
        raise InputError(f"expected a JSON list at top level, got {type(data).__name__}", file=str(path))
    return data


def _pair_turn_ids(roles: Sequence[str]) -> list[int]:
    """Turn ids for a flat message list: a user message opens a turn and the next reply joins it.

    A reply that has no user message before it (a session opening with the assistant, or two replies in a
    row) opens a turn of its own, so every message belongs to exactly one turn and ids only grow.
    """
    ids: list[int] = []
    turn = -1
    replied = True
    for role in roles:
        if role == "user" or replied:
            turn += 1
        replied = role != "user"
        ids.append(turn)
    return ids


def _dedup(items: Sequence[_T]) -> tuple[_T, ...]:
    """Items in first-seen order, each once (evidence often names the same session or turn twice)."""
    return tuple(dict.fromkeys(items))


# --------------------------------------------------------------------------------------------- HaluMem
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
    _check_limit(limit)
    path = Path(path)
    users: list[EvalUser] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):
            if limit is not None and len(users) >= limit:
                break
            if not raw.strip():
                continue
            loc = _Loc(str(path), lineno)
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


def _halumem_user(record: Any, loc: _Loc) -> EvalUser:
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
            evidence_sessions = _dedup(
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


def _halumem_session(raw: Any, sid: str, name: str, uuid: str, index: int, loc: _Loc) -> Session:
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
        turn_ids: list[int] = _pair_turn_ids(roles)
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


def _halumem_point(raw: Any, sid: str, loc: _Loc) -> GoldMemory:
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


# --------------------------------------------------------------------------------------------- LoCoMo
def load_locomo(path: PathLike, limit: int | None = None) -> Benchmark:
    """Load ``locomo10.json`` (a list of conversations between two people).

    Source schema (snap-research/locomo, ``data/locomo10.json``)::

        [{"sample_id": "conv-26",
          "conversation": {"speaker_a": "Caroline", "speaker_b": "Melanie",
                           "session_1_date_time": "1:56 pm on 8 May, 2023",
                           "session_1": [{"speaker": str, "dia_id": "D1:3", "text": str,
                                          "img_url": [str], "blip_caption": str, "query": str}],  # image keys optional
                           …},                       # some session_N_date_time keys have no session_N
          "qa": [{"question": str, "answer": str|int, "evidence": ["D1:3", …], "category": 1..5,
                  "adversarial_answer": str}],       # category 5: adversarial_answer, usually no answer
          "event_summary": {"events_session_1": {"Caroline": [str], "Melanie": [str], "date": str}},
          "observation": {"session_1_observation": {"Caroline": [[str, "D1:3"]]}},
          "session_summary": {"session_1_summary": str}}]

    Mapping: LoCoMo has no assistant, so memory is extracted for each speaker with the other as
    interlocutor: one :class:`Session` per (``session_N``, speaker), id ``{sample_id}:session_{N}:{speaker}``,
    ``user`` = ``owner_role`` = that speaker's name, turns = every message (role = its speaker, turn id =
    its ``dia_id``), an image's BLIP caption appended as ``[shares <caption>]`` (LoCoMo's own rendering).
    Sessions are the ``session_N`` keys holding lists. The annotated ``event_summary`` events of a speaker
    become gold points (``source="event_summary"``) of that speaker's session. Questions: history = all
    sessions of the conversation; asked after the last session (its date is ``question_time``); evidence
    dialogue ids normalised (malformed entries such as ``"D8:6; D9:17"`` split, unparseable ones dropped,
    the raw list kept in ``metadata["raw_evidence"]``). Answers kept as strings. ``limit``: the first N
    conversations.
    """
    _check_limit(limit)
    path = Path(path)
    data = _read_json_list(path)
    users = [_locomo_sample(rec, _Loc(str(path), path=f"[{k}]")) for k, rec in enumerate(data[:limit])]
    bench = Benchmark("locomo", users, str(path))
    log.info("loaded locomo from %s: %s", path, bench.counts())
    return bench


def _locomo_sample(rec: Any, loc: _Loc) -> EvalUser:
    sample_id = str(loc.get(rec, "sample_id", (str, int)))
    conv = loc.get(rec, "conversation", Mapping)
    cloc = loc.child("conversation")
    speakers = (cloc.get(conv, "speaker_a", str), cloc.get(conv, "speaker_b", str))
    if speakers[0] == speakers[1]:
        raise cloc.error(f"both speakers are named {speakers[0]!r}", "speaker_b")

    numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION_KEY.match(key)) and isinstance(conv[key], list))
    sessions: list[Session] = []
    sid_of: dict[tuple[int, str], str] = {}
    date_of: dict[int, str | None] = {}
    for n in numbers:
        date_of[n] = cloc.get(conv, f"session_{n}_date_time", str, None)
        turns = _locomo_turns(conv[f"session_{n}"], speakers, cloc.child(f"session_{n}", f"{sample_id}:session_{n}"))
        for owner in speakers:
            sid_of[(n, owner)] = f"{sample_id}:session_{n}:{owner}"
        for owner, other in (speakers, speakers[::-1]):
            sessions.append(Session(
                session_id=sid_of[(n, owner)],
                user=owner,
                turns=turns,
                timestamp=date_of[n],
                owner_role=owner,
                metadata={"dataset": "locomo", "sample_id": sample_id, "session": n, "speaker": owner,
                          "interlocutor": other, "peer_session_id": sid_of[(n, other)]},
            ))

    points = _locomo_events(loc.get(rec, "event_summary", Mapping, {}), speakers, sid_of, loc.child("event_summary"))
    history = tuple(s.session_id for s in sessions)
    dates = tuple(s.timestamp for s in sessions)
    asked_at = date_of[numbers[-1]] if numbers else None
    questions = [
        _locomo_question(qa, sample_id, k, history, dates, asked_at, sid_of, speakers, loc.child("qa").child(k))
        for k, qa in enumerate(loc.get(rec, "qa", list, []))
    ]
    return EvalUser(
        user_id=sample_id,
        name=f"{speakers[0]} & {speakers[1]}",
        sessions=sessions,
        memory_points=points,
        questions=questions,
        metadata={"speakers": speakers,
                  "session_summary": loc.get(rec, "session_summary", Mapping, {}),
                  "observation": loc.get(rec, "observation", Mapping, {})},
    )


def _locomo_turns(raw: list[Any], speakers: tuple[str, str], loc: _Loc) -> tuple[Turn, ...]:
    turns = []
    for k, msg in enumerate(raw):
        mloc = loc.child(k)
        speaker = mloc.get(msg, "speaker", str)
        if speaker not in speakers:
            raise mloc.error(f"speaker {speaker!r} is neither of {speakers}", "speaker")
        text = mloc.get(msg, "text", str)
        caption = mloc.get(msg, "blip_caption", str, None)
        if caption:
            text = f"{text} [shares {caption}]"
        turns.append(Turn(turn_id=mloc.get(msg, "dia_id", str), role=speaker, text=text))
    return tuple(turns)


def _locomo_events(
    summary: Mapping[str, Any], speakers: tuple[str, str], sid_of: dict[tuple[int, str], str], loc: _Loc
) -> list[GoldMemory]:
    keyed = sorted((int(m.group(1)), key) for key in summary if (m := _EVENTS_KEY.match(key)))
    points: list[GoldMemory] = []
    for n, key in keyed:
        eloc = loc.child(key)
        events = loc.get(summary, key, Mapping)
        if (n, speakers[0]) not in sid_of:
            log.warning("%s: %s refers to a session that has no dialogue; its events are not loaded", loc.file, key)
            continue
        date = eloc.get(events, "date", str, None)
        for speaker in speakers:
            for idx, text in enumerate(eloc.get(events, speaker, list, [])):
                if not isinstance(text, str):
                    raise eloc.child(speaker).error(f"expected str, got {type(text).__name__}", f"[{idx}]")
                points.append(GoldMemory(session_id=sid_of[(n, speaker)], content=text, memory_type="Event Memory",
                                         source="event_summary", index=idx, timestamp=date))
    return points


def _locomo_question(
    qa: Any, sample_id: str, k: int, history: tuple[str, ...], dates: tuple[str | None, ...],
    asked_at: str | None, sid_of: dict[tuple[int, str], str], speakers: tuple[str, str], loc: _Loc,
) -> Question:
    category = loc.get(qa, "category", int)
    if category not in LOCOMO_CATEGORIES:
        raise loc.error(f"unknown category {category} (expected 1..5)", "category")
    answer = loc.text(qa, "answer", None)
    if answer is None and category != 5:
        raise loc.error("missing required field", "answer")
    raw_evidence = loc.get(qa, "evidence", list, [])
    refs: list[tuple[int, int]] = []
    for e, item in enumerate(raw_evidence):
        if not isinstance(item, str):
            raise loc.child("evidence").error(f"expected str, got {type(item).__name__}", f"[{e}]")
        refs.extend((int(s), int(t)) for s, t in _DIA_ID.findall(item))
    evidence = [f"D{s}:{t}" for s, t in refs]
    evidence_sessions = _dedup([sid_of[(s, sp)] for s, _ in refs for sp in speakers if (s, sp) in sid_of])
    meta: dict[str, Any] = {"sample_id": sample_id}
    adversarial = loc.text(qa, "adversarial_answer", None)
    if adversarial is not None:
        meta["adversarial_answer"] = adversarial
    if evidence != raw_evidence:
        meta["raw_evidence"] = list(raw_evidence)
    return Question(
        question_id=f"{sample_id}:q{k}",
        user_id=sample_id,
        question=loc.get(qa, "question", str),
        answer=answer,
        question_type=LOCOMO_CATEGORIES[category],
        session_ids=history,
        session_dates=dates,
        evidence_session_ids=evidence_sessions,
        evidence=tuple(_dedup(evidence)),
        question_time=asked_at,
        category=category,
        abstention=category == 5,
        metadata=meta,
    )


# --------------------------------------------------------------------------------------------- LongMemEval
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
    _check_limit(limit)
    path = Path(path)
    data = _read_json_list(path)
    registry = _SessionRegistry()
    users = [_lme_item(rec, _Loc(str(path), path=f"[{k}]"), registry) for k, rec in enumerate(data[:limit])]
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
        ids = _pair_turn_ids([role for role, _ in messages])
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


def _lme_item(rec: Any, loc: _Loc, registry: _SessionRegistry) -> EvalUser:
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
        sloc = _Loc(loc.file, loc.line, raw_id, f"{loc.path}.haystack_sessions[{j}]")
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
            evidence_turns[session.session_id] = list(_dedup(hits))
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
        evidence_session_ids=_dedup([resolved[a] for a in answer_ids if a in resolved]),
        evidence=tuple(answer_ids),
        question_time=loc.get(rec, "question_date", str, None),
        abstention="_abs" in qid,
        metadata={"evidence_turn_ids": evidence_turns} if evidence_turns else {},
    )
    return EvalUser(user_id=qid, name="user", sessions=sessions, questions=[question])


# --------------------------------------------------------------------------------------------- dispatch
LOADERS = {"halumem": load_halumem, "locomo": load_locomo, "longmemeval": load_longmemeval}
"""Benchmark kind → loader, for the CLI and configs that name the benchmark."""


def load_benchmark(kind: str, path: PathLike, limit: int | None = None, *,
                   sessions: int | None = None) -> Benchmark:
    """Load ``path`` with the loader of ``kind`` (``halumem``, ``locomo`` or ``longmemeval``).

    ``limit``: the first N items; ``sessions``: then only the first N sessions of each item, with the gold
    points and questions that stay answerable (the rule is :meth:`Benchmark.first_sessions`).
    """
    try:
        loader = LOADERS[kind.lower()]
    except KeyError:
        raise ConfigError(f"unknown benchmark {kind!r}; expected one of {sorted(LOADERS)}") from None
    _check_limit(sessions, "sessions")
    bench = loader(path, limit)
    if sessions is None:
        return bench
    cut = bench.first_sessions(sessions)
    log.info("kept the first %d sessions of each item: %s", sessions, cut.counts())
    return cut
