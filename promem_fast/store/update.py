"""Updates across sessions: which older entries of a user a new session's entries replace.

For each new entry, its nearest older entries of the same user (current ones, from sessions dated no later,
cosine at least ``update_min_cosine``, at most ``update_neighbours``) are candidates; a judge then decides
each (older, newer) pair: the chat model asked whether the newer replaces the older (``llm``), or the NLI
model finding that the newer contradicts it (``nli``). All pairs of a batch of sessions are one engine run,
so their requests share batches. The store then marks each replaced entry superseded, linked to the newer
one; nothing is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from promem_fast.context import RunContext
from promem_fast.io import parse_timestamp
from promem_fast.requests import Failure, Generate, Program

from . import rows
from .prompts import STORE_TEMPLATES, UPDATE_SCHEMA

if TYPE_CHECKING:
    from promem_fast.engine import Engine
    from promem_fast.types import MemoryGraph

    from .view import StoreView

log = logging.getLogger(__name__)

NodeRef = Union[int, tuple[int, int]]
"""A stored node (its id) or a node of a graph being added (its position in the batch, its id in the graph)."""


@dataclass(frozen=True, slots=True)
class Pair:
    old: NodeRef
    old_text: str
    old_date: str | None
    new_local: int
    new_text: str
    new_date: str | None


def _older(old_date: str | None, new_date: str | None) -> bool:
    """Whether an entry dated ``old_date`` may be replaced by one dated ``new_date`` (undated: by order)."""
    if old_date is None or new_date is None:
        return True
    a, b = parse_timestamp(old_date), parse_timestamp(new_date)
    if a is None or b is None:
        return True
    try:
        return a <= b
    except TypeError:  # one aware, one naive
        return True


def candidate_pairs(store: StoreView, tenant: str, graphs: Sequence[MemoryGraph],
                    vectors: Sequence[np.ndarray]) -> list[list[Pair]]:
    """The (older, newer) pairs to judge for each graph: stored neighbours and earlier graphs of the batch."""
    m, floor = store.update_neighbours, store.update_min_cosine
    out: list[list[Pair]] = []
    for position, (graph, block) in enumerate(zip(graphs, vectors, strict=True)):
        pairs: list[Pair] = []
        user_pk = store._user_pk(tenant, graph.user)
        index = None if user_pk is None else store.index(user_pk)
        earlier = [(p, graphs[p], vectors[p]) for p in range(position) if graphs[p].user == graph.user]
        for row, node in enumerate(graph.nodes):
            found: list[tuple[float, NodeRef, str, str | None]] = []
            if index is not None:
                ids, scores = index.search(block[row], 4 * m)
                keep = scores >= floor
                ids, scores = ids[keep], scores[keep]
                if len(ids):
                    info = {i: (text, date) for i, text, date in store._db.execute(
                        "SELECT n.id, n.text, n.date FROM nodes n WHERE n.superseded_by IS NULL AND "
                        f"n.id IN ({rows.placeholders(len(ids))})", tuple(ids.tolist()))}
                    found.extend((float(s), int(i), *info[int(i)]) for i, s in zip(ids, scores, strict=True)
                                 if int(i) in info)
            for p, other, keys in earlier:
                for j, score in enumerate((keys @ block[row]).tolist() if len(keys) else []):
                    if score >= floor:
                        found.append((score, (p, other.nodes[j].id), other.nodes[j].text, other.timestamp))
            new_date = getattr(node, "date", None) or graph.timestamp
            found = [f for f in found if _older(f[3], new_date)]
            found.sort(key=lambda f: -f[0])
            pairs.extend(Pair(ref, text, date, node.id, node.text, new_date) for _, ref, text, date in found[:m])
        out.append(pairs)
    return out


def judge_program(user: str, pairs: Sequence[Pair], how: str, ctx: RunContext) -> Program[list[bool]]:
    """One request per pair, all in one round; a failed step counts as "does not replace"."""
    if how == "nli":
        from promem_fast.pipeline.common import entail_requests

        requests = entail_requests(ctx, "update", [(p.new_text, p.old_text) for p in pairs],
                                   [p.old_text for p in pairs])
    else:
        template = STORE_TEMPLATES["store_update"]
        requests = [Generate(stage="update", role="nli", schema=UPDATE_SCHEMA, item=p.old_text,
                             max_tokens=ctx.config.pipeline.max_tokens["nli"],
                             messages=template.render(user=user, old=p.old_text, new=p.new_text,
                                                      old_date=p.old_date or "undated",
                                                      new_date=p.new_date or "undated"))
                    for p in pairs]
    replies = yield requests
    verdicts = []
    for reply in replies:
        if isinstance(reply, Failure):
            log.warning("update judge could not decide about %r (%s); kept current", reply.item, reply.error)
            ctx.fail(reply)
            verdicts.append(False)
        elif how == "nli":
            label = reply.label if hasattr(reply, "label") else reply["label"]
            verdicts.append(label == "contradiction")
        else:
            verdicts.append(bool(reply["replaces"]))
    return verdicts


def find_updates(store: StoreView, tenant: str, graphs: Sequence[MemoryGraph], vectors: Sequence[np.ndarray],
                 engine: Engine | None) -> dict[int, list[tuple[NodeRef, int, str]]]:
    """For each graph position, ``(older node, newer node id in the graph, reason)`` of the entries it
    replaces; an older entry that several newer ones replace goes to the first (sessions in batch order)."""
    pairs = candidate_pairs(store, tenant, graphs, vectors)
    if not any(pairs):
        return {}
    runner = engine or store.engine()

    def programs() -> Iterable[tuple[int, Callable[[RunContext], Program[Any]]]]:
        for position, todo in enumerate(pairs):
            if todo:
                yield position, partial(judge_program, graphs[position].user, todo, store.update_judge)

    links: dict[int, list[tuple[NodeRef, int, str]]] = {}
    taken: set[NodeRef] = set()
    for position, outcome in runner.run(programs()):
        if isinstance(outcome, BaseException):
            log.error("update check of session %s failed; its entries supersede nothing: %s",
                      graphs[position].session_id, outcome)
            continue
        for pair, replaces in zip(pairs[position], outcome, strict=True):
            if replaces and pair.old not in taken:
                taken.add(pair.old)
                links.setdefault(position, []).append((pair.old, pair.new_local, store.update_judge))
    return links
