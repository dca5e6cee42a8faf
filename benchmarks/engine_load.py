"""Synthetic sessions and an instant backend, to measure what the engine itself costs.

The null backend answers every role with a small fixed reply of the right shape, so almost all time
left is the driver's: batching, parsing, accounting and the session programs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence

from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.types import Session, Turn

REPLIES = {
    "details": {"details": ["Lisbon", "May 2025"]},
    "events": {"events": ["Sam moved to Lisbon for a new job."]},
    "relations": {"relations": [{"source": 0, "relation": "causal", "target": 1}]},
    "facts": {"facts": ["Sam moved to Lisbon.", "Sam adopted a dog named Rex."]},
    "action": {"action": "DISCARD", "revised_fact": None},
    "label": {"label": "neutral"},
    "question": {"question": "Why did Sam move to Lisbon?"},
    "answerable": {"answerable": False, "answer": None},
    "supported": {"supported": True},
}


class NullLLM:
    """Replies instantly with a valid JSON object for the request's schema; counts its own time."""

    context_length = 32768

    def __init__(self) -> None:
        self.seconds = 0.0
        self._cache = {key: json.dumps(value) for key, value in REPLIES.items()}

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m["content"]) for m in messages) // 4 + 8

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        started = time.perf_counter()
        out = []
        for r in requests:
            key = next(iter(r.schema.get("required", ["facts"])))
            out.append(Completion(self._cache.get(key, "{}"), 100, 10))
        self.seconds += time.perf_counter() - started
        return out


def synthetic_sessions(n: int, turns: int = 8) -> Iterator[Session]:
    """``n`` small sessions with distinct ids and two topics each (so segmentation cuts them)."""
    for i in range(n):
        messages = []
        for t in range(turns):
            topic = "I moved to Lisbon for a job at Nordvik Labs" if t < turns // 2 else "My dog Rex loves the beach"
            messages.append(Turn(t, "user", f"{topic}, update {t} of session {i}."))
            messages.append(Turn(t, "assistant", "That sounds great, tell me more."))
        yield Session(session_id=f"s{i}", user="Sam", turns=tuple(messages), timestamp="2025-05-01T10:00:00")
