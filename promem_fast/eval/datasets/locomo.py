"""LoCoMo (Maharana et al. 2024): long conversations between two people, with QA by category."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...types import Session, Turn
from ..benchmark import Benchmark, EvalUser, GoldMemory, Question
from .common import Loc, PathLike, check_limit, dedup, read_json_list

log = logging.getLogger(__name__)

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

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVENTS_KEY = re.compile(r"^events_session_(\d+)$")
_DIA_ID = re.compile(r"D(\d+):(\d+)")


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
    the raw list kept in ``metadata["raw_evidence"]``); ``metadata["about"]`` names the speaker the question
    asks about (both when it names both or neither), whom the answer prompt names. Answers kept as strings. ``limit``: the first N
    conversations.
    """
    check_limit(limit)
    path = Path(path)
    data = read_json_list(path)
    users = [_locomo_sample(rec, Loc(str(path), path=f"[{k}]")) for k, rec in enumerate(data[:limit])]
    bench = Benchmark("locomo", users, str(path))
    log.info("loaded locomo from %s: %s", path, bench.counts())
    return bench


def _locomo_sample(rec: Any, loc: Loc) -> EvalUser:
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
        name=f"{speakers[0]} and {speakers[1]}",
        sessions=sessions,
        memory_points=points,
        questions=questions,
        metadata={"speakers": speakers,
                  "session_summary": loc.get(rec, "session_summary", Mapping, {}),
                  "observation": loc.get(rec, "observation", Mapping, {})},
    )


def _locomo_turns(raw: list[Any], speakers: tuple[str, str], loc: Loc) -> tuple[Turn, ...]:
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
    summary: Mapping[str, Any], speakers: tuple[str, str], sid_of: dict[tuple[int, str], str], loc: Loc
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
    asked_at: str | None, sid_of: dict[tuple[int, str], str], speakers: tuple[str, str], loc: Loc,
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
    evidence_sessions = dedup([sid_of[(s, sp)] for s, _ in refs for sp in speakers if (s, sp) in sid_of])
    text = loc.get(qa, "question", str)
    # a peer dialogue has two speakers: the question is about whichever it names (both when it names both or
    # neither), which is who the answer prompt says it is about
    named = [s for s in speakers if re.search(rf"\b{re.escape(s)}\b", text)]
    meta: dict[str, Any] = {"sample_id": sample_id, "about": " and ".join(named or speakers)}
    adversarial = loc.text(qa, "adversarial_answer", None)
    if adversarial is not None:
        meta["adversarial_answer"] = adversarial
    if evidence != raw_evidence:
        meta["raw_evidence"] = list(raw_evidence)
    return Question(
        question_id=f"{sample_id}:q{k}",
        user_id=sample_id,
        question=text,
        answer=answer,
        question_type=LOCOMO_CATEGORIES[category],
        session_ids=history,
        session_dates=dates,
        evidence_session_ids=evidence_sessions,
        evidence=tuple(dedup(evidence)),
        question_time=asked_at,
        category=category,
        abstention=category == 5,
        metadata=meta,
    )
