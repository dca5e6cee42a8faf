"""A question's evidence as dialogue turns, whatever form the benchmark gives it in.

- LoCoMo names its evidence turns (``D3:7``); each speaker's copy of session 3 holds that turn, so a turn id
  is matched in any session.
- LongMemEval marks the evidence turns of its answer sessions (``has_answer``), kept by the loader in
  ``metadata["evidence_turn_ids"]``: matched as (session, turn).
- HaluMem gives evidence as text, the gold memory points the answer rests on. Each point is placed on the
  dialogue turn of its session that says most of it: the turn sharing the largest share of the point's
  content words (names and stop words left out; every turn tied at the top counts). This reading of the
  evidence is ours, stated as such wherever the figure is reported.

A memory is grounded in the evidence when one of the turns it is anchored to (its ``turn_ids``) is one of
these turns.
"""

from __future__ import annotations

from collections.abc import Mapping

from promem_fast.persistence.lexical import name_words, terms
from promem_fast.types import Session

from .benchmark import Benchmark, Question

TurnRef = tuple[str | None, str]
"""(session id, turn id); a None session matches the turn id in any session."""


def _point_turns(content: str, sessions: list[Session], names: set[str]) -> set[TurnRef]:
    """The turns of ``sessions`` that say most of the evidence text ``content`` (see the module docstring)."""
    wanted = set(terms(content, names))
    if not wanted:
        return set()
    best, found = 0.0, set()
    for session in sessions:
        for turn_id, messages in session.turn_groups():
            share = len(wanted & set(terms(" ".join(m.text for m in messages), names))) / len(wanted)
            if share > best:
                best, found = share, {(session.session_id, str(turn_id))}
            elif share == best and share > 0:
                found.add((session.session_id, str(turn_id)))
    return found


def evidence_turns(kind: str, question: Question, sessions: Mapping[str, Session]) -> set[TurnRef]:
    """The turns holding ``question``'s evidence (empty when the benchmark gives none for it)."""
    if kind == "locomo":
        return {(None, str(e)) for e in question.evidence}
    if kind == "longmemeval":
        marked = question.metadata.get("evidence_turn_ids", {})
        return {(sid, str(t)) for sid, turns in marked.items() for t in turns}
    held = [sessions[sid] for sid in question.evidence_session_ids if sid in sessions]
    names = name_words({s.user for s in held})
    found: set[TurnRef] = set()
    for item in question.evidence:
        content = item.get("memory_content", "") if isinstance(item, dict) else str(item)
        found |= _point_turns(content, held, names)
    return found


def all_evidence_turns(kind: str, bench: Benchmark) -> dict[str, set[TurnRef]]:
    """Question id → its evidence turns, for every question of ``bench``."""
    sessions = {s.session_id: s for user in bench.users for s in user.sessions}
    return {q.question_id: evidence_turns(kind, q, sessions) for q in bench.questions}


def grounded_in(unit_turns: set[str], session_id: str, evidence: set[TurnRef]) -> bool:
    """Whether a memory of ``session_id`` anchored to ``unit_turns`` is grounded in ``evidence``."""
    return any(turn in unit_turns and (sid is None or sid == session_id) for sid, turn in evidence)
