"""HaluMem's memory-update evaluation: which gold points are update points, and what the update judge sees.

HaluMem's protocol (its ``eval_*.py`` adapters and ``evaluation.py``): right after a session is added, for
every gold point with ``is_update`` and earlier values (``original_memories``), the system is searched with
the point's text and its top 10 memories become ``memories_from_system``; the update judge grades the point
against them. A point with ``is_update`` whose search was not run (no earlier values) or found nothing goes
to the integrity judge instead, like every other point.

Here the search runs over the store's memories of the user's sessions up to and including the point's
session (what the store held at that moment of HaluMem's run, later sessions not yet added), with the
store's vectors and the configured embedder's query embedding: the same ranking as
:meth:`promem_fast.store.MemoryStore.search`, restricted in time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from promem_fast.requests import Embed, Failure, Program

from promem_fast.store.qa import RetrievalIndex, top_k
from .benchmark import EvalUser, GoldMemory

UPDATE_TOP_K = 10
"""Memories retrieved per update point (HaluMem's ``top_k=10``)."""

UPDATE_ROUTINGS: dict[str, str] = {
    "official": "a point with is_update and earlier values goes to the update judge with the store's top-10 "
                "memories for it (HaluMem's own evaluation); one without earlier values, or for which the search "
                "finds nothing, goes to the integrity judge",
    "both": "every point goes to the integrity judge and every is_update point to the update judge as well, "
            "so recall covers all gold points",
}
"""How HaluMem gold points with ``is_update`` are judged (``promem eval halumem --update-points``)."""


def is_searched(point: GoldMemory) -> bool:
    """Whether HaluMem searches the system's memories for ``point``: an update with earlier values."""
    return point.is_update and bool(point.original_memories)


def route_points(points: Sequence[GoldMemory], has_memories: bool,
                 routing: str) -> tuple[list[GoldMemory], list[GoldMemory]]:
    """The gold points of one session for the integrity judge and for the update judge.

    ``has_memories``: whether the store holds any memory of the user up to this session (a search then
    returns something). ``official`` is HaluMem's ``process_user``; ``both`` also grades every point for
    integrity and every ``is_update`` point for its update.
    """
    if routing == "both":
        return list(points), [p for p in points if p.is_update]
    if routing != "official":
        raise ValueError(f"unknown update routing {routing!r}; choose one of: {', '.join(UPDATE_ROUTINGS)}")
    updates = [p for p in points if is_searched(p)] if has_memories else []
    return [p for p in points if not any(p is u for u in updates)], updates


def history(user: EvalUser, session_id: str) -> list[str]:
    """The user's session ids up to and including ``session_id`` (distractor sessions too: HaluMem adds them)."""
    ids = [s.session_id for s in user.sessions]
    return ids[:ids.index(session_id) + 1]


def has_memories(index: RetrievalIndex, session_ids: Sequence[str]) -> bool:
    """Whether any of these sessions has a retrievable memory in ``index``."""
    return any(sid in index.vectors and index.vectors[sid].shape[0] > 0 for sid in session_ids)


def retrieve_program(points: Sequence[GoldMemory], index: RetrievalIndex, session_ids: Sequence[str],
                     k: int = UPDATE_TOP_K) -> Program[list[list[str]]]:
    """For each point, the bodies of the top-``k`` memories of ``session_ids`` for its text, best first (one
    query embedding request for all points). A failed embedding raises: the session's update labels are then
    recorded as failed, never graded against nothing."""
    if not points:
        return []
    units = [u for sid in session_ids if sid in index.vectors for u in index.units.get(sid, [])
             if index.vectors[sid].shape[0]]
    if not units:
        return [[] for _ in points]
    keys = np.concatenate([index.vectors[sid] for sid in session_ids
                           if sid in index.vectors and index.vectors[sid].shape[0]])
    (queries,) = yield [Embed(stage="judge", texts=tuple(p.content for p in points), query=True)]
    if isinstance(queries, Failure):
        raise RuntimeError(f"embedding the update points failed: {queries.error}")
    out = []
    for row in queries:
        order, _ = top_k(row, keys, k)
        out.append([units[i].body for i in order.tolist()])
    return out


def update_inputs(points: Sequence[GoldMemory], index: RetrievalIndex, session_ids: Sequence[str],
                  routing: str) -> Program[tuple[list[GoldMemory], list[GoldMemory], list[list[str]]]]:
    """One session's points for the integrity judge, its points for the update judge, and what the store
    returns for each of the latter."""
    for_integrity, for_update = route_points(points, has_memories(index, session_ids), routing)
    retrieved = yield from retrieve_program(for_update, index, session_ids)
    return for_integrity, for_update, retrieved
