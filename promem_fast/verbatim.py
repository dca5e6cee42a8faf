"""Messages kept as written, with no model called: mem0's ``add(..., infer=False)``.

A program that already holds its facts (a form's answers, a note the user typed) wants them stored and
found, not rewritten by a model. Each message of such a session becomes one memory, its text as given,
grounded in its own turn and dated like it, and marked for what it is: ``verification = "unverified"`` on
each memory and ``mode = "verbatim"`` on the session. The store embeds and finds these like any memory but
judges them against nothing (:func:`promem_fast.persistence.pending.session_entries`): they replace no older
memory and merge into none, as mem0 adds raw messages; a later extracted session may still replace them.
"""

from __future__ import annotations

from promem_fast.times import day_of, iso_time
from promem_fast.types import MemoryEntry, MemoryGraph, RunStats, Session

MODE = "verbatim"
"""The ``MemoryGraph.mode`` (and the stored session's) of a session kept as written."""


def verbatim_graph(session: Session) -> MemoryGraph:
    """One unverified memory per non-empty message, in order; no details, no links."""
    nodes = []
    for turn in session.turns:
        if not turn.text.strip():
            continue
        day = day_of(turn.timestamp) or day_of(session.timestamp)
        nodes.append(MemoryEntry(id=len(nodes), text=turn.text.strip(), origin="draft", verification="unverified",
                                 turn_ids=[turn.turn_id], date=day.isoformat() if day else session.timestamp,
                                 source=turn.text))
    stats = RunStats()
    stats.bump("nodes", len(nodes))
    return MemoryGraph(session_id=session.session_id, user=session.user, nodes=nodes, edges=[], details=[],
                       events=[], stats=stats, timestamp=iso_time(session.timestamp) or session.timestamp,
                       mode=MODE, metadata=dict(session.metadata))
