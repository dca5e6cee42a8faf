"""Picking the completeness threshold tau_comp for the configured embedder (``promem calibrate tau``).

The paper's tau_comp = 0.6 was set for Qwen3-Embedding-8B; cosines of other embedders sit on other
scales, so the same number recovers far more or far fewer events. Calibration runs the two stages the
threshold sits between, the draft and event abstraction, on a HaluMem-format sample, and for every
candidate tau counts what the completeness check would recover: a recovered event is *useful* when the
gold point nearest to it is reached by no draft entry and no earlier recovered event (it adds a point the
draft missed) and *redundant* otherwise (it repeats one). The chosen tau maximises useful minus redundant
recoveries (the lowest such tau on ties: fewer entries to verify).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from promem_fast.context import RunContext
from promem_fast.pipeline.common import gather
from promem_fast.pipeline.compress import block_view
from promem_fast.pipeline.draft import draft_memory
from promem_fast.pipeline.events import abstract_events, embed_turns
from promem_fast.pipeline.views import DialogueView
from promem_fast.requests import Program
from promem_fast.types import Session

log = logging.getLogger(__name__)

TAUS: tuple[float, ...] = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))
"""The thresholds tried: 0.30 to 0.95 in steps of 0.05."""


@dataclass
class SessionVectors:
    events: np.ndarray
    draft: np.ndarray
    gold: np.ndarray


@dataclass(frozen=True)
class Point:
    """One row of the calibration curve."""

    tau: float
    recovered: int
    useful: int
    redundant: int
    gold_reached: int
    gold_total: int

    @property
    def score(self) -> int:
        return self.useful - self.redundant


def candidates_program(session: Session, ctx: RunContext) -> Program[tuple[list[str], list[str]]]:
    """The events and the draft of one session, made exactly as the pipeline makes them."""
    view = DialogueView.of(session)
    groups = session.turn_groups()
    view, prompt_groups = yield from block_view(view, groups, ctx)  # compressed as in the pipeline

    def events_branch() -> Program[list[str]]:
        vectors = yield from embed_turns(view, groups, "cc")
        events, _ = yield from abstract_events(view, prompt_groups, groups, vectors, ctx, with_relations=False)
        return [e.text for e in events]

    events, draft = yield from gather(events_branch(), draft_memory(view, prompt_groups, ctx))
    if ctx.stats.failures:  # a failed step leaves out what it would have listed: the curve should say so
        log.warning("session %s: %d step(s) failed (first: %s); its draft and events are incomplete",
                    session.session_id, len(ctx.stats.failures), ctx.stats.failures[0].error)
    return events, draft


def curve(sessions: Iterable[SessionVectors], taus: Sequence[float] = TAUS) -> list[Point]:
    """The calibration curve over ``taus`` for sessions of normalised embedding rows."""
    sessions = list(sessions)
    rows = []
    for tau in taus:
        recovered = useful = redundant = reached_total = gold_total = 0
        for s in sessions:
            if len(s.gold) == 0:
                continue
            gold_total += len(s.gold)
            reached = set(_nearest(s.draft, s.gold).tolist())
            best = (s.events @ s.draft.T).max(axis=1) if len(s.draft) and len(s.events) else \
                np.full(len(s.events), -1.0)
            nearest = _nearest(s.events, s.gold)
            for i in np.flatnonzero(best <= tau + 1e-9).tolist():
                recovered += 1
                if int(nearest[i]) in reached:
                    redundant += 1
                else:
                    useful += 1
                    reached.add(int(nearest[i]))
            reached_total += len(reached)
        rows.append(Point(tau, recovered, useful, redundant, reached_total, gold_total))
    return rows


def choose(points: Sequence[Point]) -> Point:
    """The point with the most useful-minus-redundant recoveries; the lowest tau among equals."""
    return max(points, key=lambda p: (p.score, -p.tau))


def table(points: Sequence[Point], chosen: Point) -> str:
    lines = ["tau   recovered  useful  redundant  gold reached", "----  ---------  ------  ---------  ------------"]
    for p in points:
        mark = "  <- chosen" if p is chosen else ""
        lines.append(f"{p.tau:.2f}  {p.recovered:9d}  {p.useful:6d}  {p.redundant:9d}  "
                     f"{p.gold_reached:5d}/{p.gold_total:<6d}{mark}")
    return "\n".join(lines)


def _nearest(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if len(queries) == 0:
        return np.zeros(0, np.int64)
    return np.asarray((queries @ keys.T).argmax(axis=1), np.int64)
