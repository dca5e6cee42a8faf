"""What the store hands out: :class:`Hit`, one memory node with everything a reader needs around it.

A hit is the QA unit of evaluation: the node's text, the details anchored to it, its relation edges (to
nodes of the same session) and its date, so a question about a detail reaches the entry that carries it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def turn_key(turn_id: Any) -> str | None:
    """A turn id as stored (JSON, so ``3`` and ``"3"`` stay apart)."""
    return None if turn_id is None else json.dumps(turn_id)


@dataclass(slots=True)
class Hit:
    """One node of a user's memory, as search and :meth:`MemoryStore.hits` return it (:meth:`memory`: the shape
    :class:`promem_fast.Memory` and every surface hand out)."""

    node_id: int
    user: str
    session_id: str
    text: str
    date: str | None
    """The node's own date when it has one, else its session's timestamp."""
    turn_id: int | str | None
    """The grounding turn (the first of the node's turns)."""
    score: float | None
    """Cosine with the query (``None`` outside search)."""
    details: list[str] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    """``{"relation", "direction": "out" | "in", "node_id", "text"}`` for each edge at this node."""
    superseded_by: int | None = None
    """The newer node that updates this one; ``None`` for current memory."""
    node: dict[str, Any] = field(default_factory=dict)
    """The node's full JSON as extracted (fields added by newer versions included)."""
    valid_from: str | None = None
    """When it was said (ISO 8601; ``None`` when undated)."""
    valid_until: str | None = None
    """When a newer memory replaced it (that memory's ``valid_from``); ``None`` while current."""
    recorded_at: str | None = None
    """When the store received its session (ISO 8601, UTC)."""
    reason: str | None = None
    """Why it was replaced (the update judge's reason); ``None`` while current."""
    sessions: list[str] = field(default_factory=list)
    """Every session that said it: its own first, then those whose saying of it was merged into it."""
    merged_into: int | None = None
    """For a later saying of an already known fact: the memory that stands for both."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Its metadata: its session's (what ``add`` was given with it), or its own once an edit changed it."""
    score_details: dict[str, Any] | None = None
    """How a search ranked it, when asked to explain (:func:`promem_fast.store.hybrid.search`)."""

    def body(self) -> str:
        """What an answerer is shown (:func:`unit_body`): text, details and links."""
        arrows = {"out": "→", "in": "←"}
        return unit_body(self.text, self.details,
                         [f"{e['relation']} {arrows[e['direction']]} {e['text']}" for e in self.edges])

    def key(self) -> str:
        """What is embedded for retrieval (:func:`unit_key`)."""
        return unit_key(self.text, self.details)

    def memory(self) -> dict[str, Any]:
        """The memory as :class:`promem_fast.Memory` hands it out (its module docstring gives the shape)."""
        return {
            "id": self.node_id, "memory": self.text, "user_id": self.user, "session_ids": list(self.sessions),
            "valid_from": self.valid_from, "valid_until": self.valid_until, "recorded_at": self.recorded_at,
            "superseded_by": self.superseded_by, "reason": self.reason,
            "score": None if self.score is None else round(float(self.score), 6),
            "details": list(self.details), "metadata": dict(self.metadata),
            "links": [{"relation": e["relation"], "direction": e["direction"], "id": e["node_id"],
                       "memory": e["text"]} for e in self.edges],
            "edits": [{"text": e["text"], "at": e["at"], **({"metadata": e["metadata"]} if "metadata" in e else {})}
                      for e in self.node.get("edits", [])],
            **({} if self.score_details is None else {"score_details": dict(self.score_details)}),
        }


def unit_key(text: str, details: Sequence[str]) -> str:
    """What is embedded for a memory entry: ``text (a; b)``, so a question about a detail reaches it."""
    return text + (" (" + "; ".join(details) + ")" if details else "")


def unit_body(text: str, details: Sequence[str], links: Sequence[str]) -> str:
    """What the answerer is shown for a memory entry: ``text | details: a; b | links: causal → other; …``."""
    body = text
    if details:
        body += " | details: " + "; ".join(details)
    if links:
        body += " | links: " + "; ".join(links)
    return body
