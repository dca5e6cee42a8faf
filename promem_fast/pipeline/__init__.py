"""The ProMem pipeline of one session, written as the paper's algorithm (§3), one stage per module:

=====================  ==========================  ==========================================
stage                  module                      paper
=====================  ==========================  ==========================================
compression (opt.)     :mod:`.compress`            App. C LLMLingua-2 of the block's dialogue
details per turn       :mod:`.details`             §3.2 fine-grained detail extraction
topic segments         :mod:`.segment`             §3.2 topic clustering (ours; LightMem's cut on top)
events, relations      :mod:`.events`              §3.2 event abstraction, relation inference
initial draft          :mod:`.draft`               §3.3 M_draft
completeness check     :mod:`.completeness`        §3.3 cross-reference matrix, E_miss
hallucination check    :mod:`.verify`              §3.4 grounding, NLI, atomic facts, adjudication
relation verification  :mod:`.relations`           §3.5 probe questions, R_valid
detail anchoring       :mod:`.anchor`              §3.5 A_attr by turn id
=====================  ==========================  ==========================================

Stages never call a model: they yield requests, which the engine batches across sessions.
"""

from __future__ import annotations

from promem_fast.context import RunContext
from promem_fast.pipeline.anchor import anchor_details
from promem_fast.pipeline.common import gather
from promem_fast.pipeline.compress import block_view
from promem_fast.pipeline.completeness import check_completeness
from promem_fast.pipeline.details import extract_details
from promem_fast.pipeline.draft import draft_memory
from promem_fast.pipeline.events import abstract_events, embed_turns
from promem_fast.pipeline.relations import map_edges, verify_relations
from promem_fast.pipeline.verify import ground, verify_entries
from promem_fast.pipeline.views import DialogueView
from promem_fast.requests import Program
from promem_fast.times import iso_time
from promem_fast.types import Detail, Edge, Event, MemoryEntry, MemoryGraph, Session
from promem_fast.verbatim import verbatim_graph


def session_program(session: Session, ctx: RunContext) -> Program[MemoryGraph]:
    """Extract the verified memory graph G = (V, E, A) of one session (or keep its messages as written)."""
    if not session.infer:
        return verbatim_graph(session)
    cp = ctx.config.pipeline
    groups = session.turn_groups()
    view = DialogueView.of(session)
    ordinal = {tid: i for i, (tid, _) in enumerate(groups)}

    view, prompt_groups = yield from block_view(view, groups, ctx)

    if cp.mode == "one-off":
        draft = yield from draft_memory(view, prompt_groups, ctx)
        nodes = [MemoryEntry(id=i, text=t, origin="draft", verification="unverified", turn_ids=[], date=view.date)
                 for i, t in enumerate(draft)]
        return _graph(session, nodes, [], [], [], ctx, mode="one-off")

    need_events = cp.completeness_check or cp.relations

    def events_branch() -> Program[tuple[list[Event], list[tuple[int, str, int]], object]]:
        vectors = yield from embed_turns(view, groups, "cc" if need_events else "hv")
        if not need_events:
            return [], [], vectors
        events, relations = yield from abstract_events(view, prompt_groups, groups, vectors, ctx,
                                                       with_relations=cp.relations)
        return events, relations, vectors

    def details_branch() -> Program[list[Detail]]:
        if not cp.detail_anchoring:
            return []
        return (yield from extract_details(view, groups, ctx))

    (events, relations, turn_vecs), details, draft = yield from gather(
        events_branch(), details_branch(), draft_memory(view, prompt_groups, ctx))

    completed = yield from check_completeness(events, draft, ctx, recover=cp.completeness_check)
    turn_of, score = yield from ground(completed.vectors, turn_vecs)
    nodes, became = yield from verify_entries(view, groups, completed.entries, turn_of, score, ctx,
                                              enabled=cp.hallucination_verification)

    def relations_branch() -> Program[list[Edge]]:
        if not (cp.relations and relations):
            return []
        src, rel, dst = map_edges(relations, events, completed.event_to_entry, became, nodes,
                                  tuple(cp.relation_types))
        turn_of_node = [ordinal[n.turn_ids[0]] if n.turn_ids else -1 for n in nodes]
        return (yield from verify_relations(view, groups, nodes, turn_of_node, src, rel, dst, ctx))

    def anchor_branch() -> Program[int]:
        if not cp.detail_anchoring:
            return 0
        return (yield from anchor_details(details, nodes, ordinal))

    edges, anchored = yield from gather(relations_branch(), anchor_branch())
    ctx.stats.bump("details_anchored", anchored)
    return _graph(session, nodes, edges, details, events, ctx, mode="promem")


def _graph(session: Session, nodes: list[MemoryEntry], edges: list[Edge], details: list[Detail],
           events: list[Event], ctx: RunContext, mode: str) -> MemoryGraph:
    ctx.stats.bump("nodes", len(nodes))
    said, heard = _words_by_turn(session)
    for node in nodes:  # the words a reader checks the memory against (the page's card shows them)
        node.source = "\n".join(said[t] for t in node.turn_ids if t in said) or None
        if ctx.config.pipeline.keep_exchange:
            node.exchange = "\n".join(dict.fromkeys(h for t in node.turn_ids for h in heard.get(t, ()))) or None
    # the one kept form, also for a Session built by hand or by a benchmark loader with the dataset's own
    # form (one no form reads is kept as given)
    stamp = iso_time(session.timestamp) or session.timestamp
    return MemoryGraph(session_id=session.session_id, user=session.user, timestamp=stamp,
                       nodes=nodes, edges=edges, details=details, events=events, stats=ctx.stats, mode=mode,
                       metadata=dict(session.metadata))


def _words_by_turn(session: Session) -> tuple[dict[int | str, str], dict[int | str, list[str]]]:
    """Per turn id: the owner's words (the whole turn if they said none), and the other speaker's words of its
    exchange (:attr:`MemoryEntry.exchange`): theirs in the turn, and the turns next to it that hold only theirs."""
    groups = session.turn_groups()
    theirs = ["\n".join(m.text for m in group if m.role != session.owner_role) for _, group in groups]
    owned = [any(m.role == session.owner_role for m in group) for _, group in groups]
    said: dict[int | str, str] = {}
    heard: dict[int | str, list[str]] = {}
    for k, (tid, group) in enumerate(groups):
        said[tid] = "\n".join(m.text for m in group if m.role == session.owner_role or not owned[k])
        around = [j for j in (k - 1, k + 1) if 0 <= j < len(groups) and not owned[j]]
        heard[tid] = [text for text in ([theirs[k]] if owned[k] else []) + [theirs[j] for j in around] if text]
    return said, heard


__all__ = ["session_program"]
