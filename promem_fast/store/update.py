"""Update verdicts: what each entry of a new session means for a user's older memories.

For each new entry, its nearest older memories of the same user (current ones, from the sessions before it
in the canonical order, so said no later; cosine at least ``update_min_cosine``, at most
``update_neighbours``) are candidates; the configured model judges each (older, newer) pair:

* ``llm``: the chat model answers ``add`` / ``update`` / ``duplicate`` with a reason;
* ``nli``: the NLI model reads the newer entry as premise: it contradicts the older → ``update``, the two
  entail each other → ``duplicate``, else ``add``.

An entry that duplicates an older memory is merged into it (the older one then lists both sessions) and
replaces nothing; otherwise it supersedes every older memory judged ``update`` (each older memory by the
first new entry that claims it). Nothing is deleted. The sessions of one call are judged in one engine
run, so their requests share batches.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from promem_fast.backends.base import TIE_TOLERANCE
from promem_fast.context import RunContext
from promem_fast.requests import Failure, Generate, Program

from promem_fast.persistence import pending as judging
from promem_fast.persistence.timeline import UNDATED, day_label

from .prompts import STORE_TEMPLATES, UPDATE_MAX_TOKENS, UPDATE_SCHEMA, VERDICTS

if TYPE_CHECKING:
    from promem_fast.engine import Engine

    from .protocol import StoreView

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Pair:
    old: int
    old_text: str
    old_from: str | None
    new: int
    new_text: str
    new_from: str | None


@dataclass(slots=True)
class Outcome:
    """The links one session's entries make: merges (new → kept) and supersedes (old → new), with reasons."""

    merges: list[tuple[int, int, str]] = field(default_factory=list)
    supersedes: list[tuple[int, int, str]] = field(default_factory=list)


SCORE_MARGIN = 1e-4
"""A gap between two exact scores that no kernel's rounding bridges. A vector search rounds a float32 dot
product of unit vectors differently by where a row sits in the index (the order it arrived in) and by
kernel, by some float32 ulps, far less than this: so every memory scoring more than this above the last one
fetched was fetched, in whichever order the sessions arrived."""


def candidate_pairs(store: StoreView, user_pk: int, session_pk: int, *, also: Sequence[int] = (),
                    wider: int = 1) -> list[Pair]:
    """The (older, newer) pairs to judge for one session's entries, against the user's memory as it stood
    after every session judged before it (``judged = 1``: the sessions before it in the canonical order).

    ``also`` (pending sessions taken as judged, with every entry current) and ``wider`` (times as many
    neighbours) give a guess for a session whose predecessors are not judged yet (:mod:`.ordering`).

    The same sessions give the same pairs whatever order they arrived in: the search is exact (an
    approximate index's answer depends on the order its vectors were added in), and the candidates are
    scored again in one rounding, taken up to a gap in the scores (:data:`SCORE_MARGIN`) and ordered, on
    equal scores, by when and what was said rather than by node ids (which follow arrival)."""
    m, floor = store.update_neighbours * wider, store.update_min_cosine
    dim = store.dim()
    fresh, vectors = judging.session_entries(store.db, session_pk, dim)
    if not fresh:
        return []
    total = store.db.vector_count(user_pk)
    pairs: list[Pair] = []
    first = store.db.nearest_many(user_pk, vectors, 4 * m, exact=True)  # the stored vectors read once
    for (new_id, new_text, new_from), vector, (ids, _) in zip(fresh, vectors, first, strict=True):
        wanted = 4 * m
        while True:
            ranked = exact_ranking(judging.vectors_of(store.db, ids.tolist(), dim), ids.tolist(), vector)
            closed = _closed_prefix(store, user_pk, session_pk, also, ranked, m, floor,
                                    complete=len(ids) < wanted or len(ids) >= total)
            if closed is not None:
                break
            wanted *= 4
            ids, _ = store.db.nearest(user_pk, vector, wanted, exact=True)
        found, details = closed
        best = sorted(found, key=lambda c: (-c[0], *details[c[1]]))[:m]
        pairs.extend(Pair(old, details[old][1], None if details[old][0] == UNDATED else details[old][0],
                          new_id, new_text, new_from) for _, old in best)
    return pairs


def exact_ranking(found: np.ndarray, ids: list[int], query: np.ndarray) -> list[tuple[float, int]]:
    """``(score, id)`` best first, each score the inner product rounded once (``math.fsum`` over the float64
    products, which hold a float32 product exactly): the same number in any order and on any kernel."""
    products = (found.astype(np.float64) * np.asarray(query, np.float64)).tolist()
    return sorted(((math.fsum(row), node) for row, node in zip(products, ids, strict=True)),
                  key=lambda c: -c[0])


def _closed_prefix(store: StoreView, user_pk: int, session_pk: int, also: Sequence[int],
                   ranked: list[tuple[float, int]], m: int, floor: float, *, complete: bool
                   ) -> tuple[list[tuple[float, int]], dict[int, tuple[str, str, str, int]]] | None:
    """The eligible candidates at or above ``floor`` of the shortest prefix of ``ranked`` that holds every
    memory scoring as high as its last (it ends at a gap of :data:`SCORE_MARGIN`, or at the user's last
    vector) and either ``m`` of them or its last below ``floor``; with their tie-break keys. ``None``:
    no such prefix was fetched (ask for more)."""
    floor -= TIE_TOLERANCE  # a cosine of exactly the floor passes, however a kernel rounded it
    above = [c for c in ranked if c[0] >= floor]
    details = judging.eligible(store.db, user_pk, session_pk, also, [node for _, node in above])
    found: list[tuple[float, int]] = []
    for at, (score, node) in enumerate(ranked):
        if score >= floor and node in details:
            found.append((score, node))
        ends = complete if at + 1 == len(ranked) else score - ranked[at + 1][0] > SCORE_MARGIN
        if ends and (len(found) >= m or score < floor):
            return found, details
    return (found, details) if complete else None


def judge_program(user: str, pairs: Sequence[Pair], how: str, ctx: RunContext) -> Program[list[tuple[str, str]]]:
    """One round for all pairs: ``(verdict, reason)`` each; a failed step counts as ``add``."""
    if how == "nli":
        from promem_fast.pipeline.common import entail_requests

        # for each pair the newer as premise, then the other way round
        requests: list[Any] = entail_requests(
            ctx, "update", [q for p in pairs for q in ((p.new_text, p.old_text), (p.old_text, p.new_text))],
            [p.old_text for p in pairs for _ in range(2)])
    else:
        template = STORE_TEMPLATES["store_update"]
        requests = [Generate(stage="update", role="update", schema=UPDATE_SCHEMA, item=p.old_text,
                             max_tokens=max(UPDATE_MAX_TOKENS, ctx.config.pipeline.max_tokens["update"]),
                             messages=template.render(user=user, old=p.old_text, new=p.new_text,
                                                      old_date=day_label(p.old_from) or "undated",
                                                      new_date=day_label(p.new_from) or "undated"))
                    for p in pairs]
    replies = yield requests
    for reply in replies:
        if isinstance(reply, Failure):
            log.warning("update judge could not decide about %r (%s); kept current", reply.item, reply.error)
            ctx.fail(reply)
    if how == "nli":
        return [_nli_verdict(replies[2 * i], replies[2 * i + 1]) for i in range(len(pairs))]
    return [_chat_verdict(reply) for reply in replies]


def _label(reply: Any) -> str | None:
    if isinstance(reply, Failure):
        return None
    return str(reply.label if hasattr(reply, "label") else reply["label"])


def _nli_verdict(forward: Any, backward: Any) -> tuple[str, str]:
    ahead, back = _label(forward), _label(backward)
    if ahead == "contradiction":
        return "update", "nli: the new entry contradicts the earlier one"
    if ahead == "entailment" and back == "entailment":
        return "duplicate", "nli: each entry entails the other"
    return "add", f"nli: new → earlier {ahead or 'failed'}, earlier → new {back or 'failed'}"


def _chat_verdict(reply: Any) -> tuple[str, str]:
    if isinstance(reply, Failure):
        return "add", f"judge failed: {reply.error}"
    verdict = str(reply.get("verdict", "")).strip().lower()
    reason = str(reply.get("reason", "")).strip()
    if verdict not in VERDICTS:
        log.warning("update judge answered %r, not one of %s; kept current", verdict, ", ".join(VERDICTS))
        return "add", f"unreadable verdict {verdict!r}"
    return verdict, reason


def decide(pairs: Sequence[Pair], verdicts: Sequence[tuple[str, str]]) -> Outcome:
    """The links of one session from its pairs' verdicts (see the module for the rules)."""
    by_new: dict[int, list[tuple[Pair, str, str]]] = {}
    for pair, (verdict, reason) in zip(pairs, verdicts, strict=True):
        by_new.setdefault(pair.new, []).append((pair, verdict, reason))
    outcome = Outcome()
    taken: set[int] = set()
    for new, judged in by_new.items():  # in the session's node order
        same = [(p, reason) for p, verdict, reason in judged if verdict == "duplicate"]
        if same:
            outcome.merges.append((new, same[0][0].old, same[0][1]))
            continue
        for pair, verdict, reason in judged:
            if verdict == "update" and pair.old not in taken:
                taken.add(pair.old)
                outcome.supersedes.append((pair.old, new, reason))
    return outcome


def judge_pairs(store: StoreView, jobs: Sequence[tuple[Any, str, Sequence[Pair]]], engine: Engine | None
                ) -> dict[Any, list[tuple[str, str]] | None]:
    """The verdicts of each job ``(key, user name, pairs)``, all in one engine run; ``None`` for a job whose
    program crashed (logged)."""
    runner = engine or store.engine()
    found: dict[Any, list[tuple[str, str]] | None] = {}

    def programs() -> Iterable[tuple[int, Callable[[RunContext], Program[Any]]]]:
        for position, (_, user, pairs) in enumerate(jobs):
            yield position, partial(judge_program, user, pairs, store.update_judge)

    for position, outcome in runner.run(programs()):
        if isinstance(outcome, BaseException):
            log.error("update check of %s failed: %s", jobs[position][1], outcome)
            found[jobs[position][0]] = None
        else:
            found[jobs[position][0]] = outcome
    return found
