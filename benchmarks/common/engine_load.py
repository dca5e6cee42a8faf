"""Synthetic sessions and an instant chat model, to measure what the engine itself costs.

The chat model is the scripted one of ``promem_fast.testing`` with one fixed reply per prompt role
(:func:`fixed_reply_llm`): no rule reads the dialogue, so almost all time left is the driver's: batching,
parsing, accounting and the session programs. The engine counts the seconds spent inside it
(``RunSummary.backend_seconds``), which the overhead figures subtract.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.types import Session, Turn

REPLIES: dict[str, Any] = {
    "detail": {"details": ["Lisbon", "May 2025"]},
    "event": {"events": ["Sam moved to Lisbon for a new job."]},
    "relation": {"relations": [{"source": 0, "relation": "causal", "target": 1}]},
    "draft": {"facts": ["Sam moved to Lisbon.", "Sam adopted a dog named Rex."]},
    "decompose": {"facts": ["Sam moved to Lisbon.", "Sam adopted a dog named Rex."]},
    "adjudicate": {"action": "DISCARD", "revised_fact": None},
    "nli": {"label": "neutral"},
    "probe": {"question": "Why did Sam move to Lisbon?"},
    "answer_flat": {"answerable": False},
    "verify_relation": {"supported": True},
}
"""One reply per role of the extraction prompts; the three roles that answer numbered items (probe,
answer_flat, verify_relation) give this reply for every item."""


def fixed_reply_llm() -> ScriptedLLM:
    """The scripted chat model answering every role with its :data:`REPLIES` entry, whatever the prompt."""
    return ScriptedLLM(rules={role: (lambda _fields, reply=reply: reply) for role, reply in REPLIES.items()})


def synthetic_sessions(n: int, turns: int = 8) -> Iterator[Session]:
    """``n`` small sessions with distinct ids and two topics each (so segmentation cuts them)."""
    for i in range(n):
        messages = []
        for t in range(turns):
            topic = "I moved to Lisbon for a job at Nordvik Labs" if t < turns // 2 else "My dog Rex loves the beach"
            messages.append(Turn(t, "user", f"{topic}, update {t} of session {i}."))
            messages.append(Turn(t, "assistant", "That sounds great, tell me more."))
        yield Session(session_id=f"s{i}", user="Sam", turns=tuple(messages), timestamp="2025-05-01T10:00:00")
