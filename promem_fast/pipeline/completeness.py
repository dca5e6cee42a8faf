"""Stage 2b: the explicit completeness check (§3.3).

The cross-reference matrix S(e_i, m_j) is the cosine between every event and every draft entry; an
event whose best match is at most tau_comp is missing from the draft and is appended as a recovered
entry: M_comp = M_draft ∪ E_miss. The same matrix maps each event onto the entry that covers it, which is
how relation edges inferred between events land on memory entries later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from promem_fast.context import RunContext
from promem_fast.requests import Embed, Failure, Match, Program
from promem_fast.types import Event, Origin


@dataclass
class Candidate:
    """An entry before verification."""

    text: str
    origin: Origin


@dataclass
class Completed:
    entries: list[Candidate]
    vectors: np.ndarray
    """Embeddings of ``entries`` (reused for grounding)."""
    event_to_entry: list[int]
    """For each event, the entry that covers it (its best draft match, or its own recovered entry)."""


def check_completeness(events: list[Event], draft: list[str], ctx: RunContext, recover: bool
                       ) -> Program[Completed]:
    entries = [Candidate(text, "draft") for text in draft]
    texts = tuple([e.text for e in events] + draft)
    if not texts:
        return Completed(entries, np.zeros((0, 0), np.float32), [])
    (vectors,) = yield [Embed(stage="cc" if events else "hv", texts=texts)]
    if isinstance(vectors, Failure):
        raise RuntimeError(f"embedding for the completeness check failed: {vectors.error}")
    event_vecs, draft_vecs = vectors[:len(events)], vectors[len(events):]
    if not events:
        return Completed(entries, draft_vecs, [])
    (match,) = yield [Match(stage="cc", queries=event_vecs, keys=draft_vecs)]
    if isinstance(match, Failure):
        raise RuntimeError(f"cross-reference matrix failed: {match.error}")
    best, score = match
    tau = ctx.config.pipeline.tau_comp
    event_to_entry: list[int] = []
    extra: list[np.ndarray] = []
    for i, event in enumerate(events):
        if best[i] >= 0 and score[i] > tau:
            event_to_entry.append(int(best[i]))
        elif recover:
            event_to_entry.append(len(entries))
            entries.append(Candidate(event.text, "recovered"))
            extra.append(event_vecs[i])
        else:
            event_to_entry.append(int(best[i]) if best[i] >= 0 else -1)
    recovered = len(extra)
    ctx.stats.bump("recovered", recovered)
    all_vecs = np.vstack([draft_vecs, *extra]) if extra else draft_vecs
    return Completed(entries, all_vecs, event_to_entry)
