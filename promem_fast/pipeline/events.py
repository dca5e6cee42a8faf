"""Stage 1b: topic segments → macro events (per segment) → candidate relations between events (§3.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from promem_fast.context import RunContext
from promem_fast.pipeline.common import (
    TurnGroup, ask_whole, dedupe, left_full, listing, statements, window_text,
)
from promem_fast.pipeline.segment import (
    cap_tokens, coarse_boundaries, combine_boundaries, fine_boundaries, segments_from_boundaries,
)
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import numbered, relation_menu, render, schema_for, shown_part
from promem_fast.requests import Attend, Embed, Failure, Generate, Program, ReplyError
from promem_fast.types import Event

Relation = tuple[int, str, int]


def embed_turns(view: DialogueView, groups: list[TurnGroup], stage: str) -> Program[np.ndarray]:
    """Turn embeddings (reused later for grounding, so a session embeds its turns once)."""
    (vectors,) = yield [Embed(stage=stage, texts=tuple(view.turn(g) for g in groups))]
    if isinstance(vectors, Failure):
        raise RuntimeError(f"turn embedding failed: {vectors.error}")
    return vectors


def uses_lightmem(ctx: RunContext) -> bool:
    """Whether topic segments get LightMem's combined cut: asked for, or ``auto`` with a compressor model."""
    cp = ctx.config.pipeline
    return cp.segmenter == "lightmem" or (cp.segmenter == "auto" and ctx.config.compression.model is not None)


def segment(view: DialogueView, groups: list[TurnGroup], vectors: np.ndarray, ctx: RunContext,
            said: list[TurnGroup]) -> Program[list[list[int]]]:
    """Topic segments: our embedding similarity cut, narrowed by LightMem's attention cut when it is used, then
    split where longer than ``pipeline.max_segment_tokens`` of ``said`` (the turns as said: how compression
    shows them changes what the prompts read, not how the session is cut into topics)."""
    cp = ctx.config.pipeline
    cuts = fine_boundaries(vectors, cp.theta_start, cp.theta_step, cp.theta_max)
    if uses_lightmem(ctx) and len(groups) > 2:
        (attention,) = yield [Attend(stage="cc", texts=tuple(view.turn(g) for g in groups))]
        if isinstance(attention, Failure):
            ctx.fail(attention)
        else:
            cuts = combine_boundaries(cuts, coarse_boundaries(attention))
    segments = segments_from_boundaries(len(groups), cuts)
    sizes = [ctx.text_tokens("event", view.turn(g)) for g in said]
    return cap_tokens(segments, sizes.__getitem__, cp.max_segment_tokens)


def abstract_events(view: DialogueView, groups: list[TurnGroup], said: list[TurnGroup], vectors: np.ndarray,
                    ctx: RunContext, with_relations: bool) -> Program[tuple[list[Event], list[Relation]]]:
    """Events of every segment in one round, then (optionally) one relation request over all events.

    ``groups`` are the turns as the prompts show them (compressed when compression is on), ``said`` as they
    were said. When the session block holds the dialogue a segment's request names its turns instead of
    showing them."""
    cp = ctx.config.pipeline
    segments = yield from segment(view, groups, vectors, ctx, said)
    ctx.stats.bump("segments", len(segments))
    schema = schema_for("event", max_items=cp.max_list_items)
    label = "The turns"
    budget = ctx.prompt_budget("event", render("event", view.block, user=view.owner, turns="0",
                                               text=shown_part(label, "")))
    makers: list[Callable[[str], Generate]] = []
    owners: list[int] = []

    def maker(piece: str, shown: str, number: int, turns: str) -> Callable[[str], Generate]:
        return lambda more: Generate(
            stage="cc", role="event", schema=schema, max_tokens=cp.max_tokens["event"], item=f"segment {number}",
            messages=render("event", view.block, user=view.owner, turns=turns, text=shown, more=more),
            check=statements("events", piece, role="event", owner=view.owner))

    for number, members in enumerate(segments):
        text = "\n".join(view.turn(groups[i]) for i in members)
        turns = ", ".join(str(groups[i][0]) for i in members)
        if view.shows_dialogue:
            makers.append(maker(text, "", number, turns))
            owners.append(number)
            continue
        pieces = window_text(ctx, "event", text, budget)
        if len(pieces) > 1:
            ctx.stats.bump("windowed_segments")
        for piece in pieces:
            makers.append(maker(piece, shown_part(label, piece), number, turns))
            owners.append(number)
    results = yield from listing(ctx, "events", makers)
    texts_by_segment: dict[int, list[str]] = {}
    for number, result in zip(owners, results):
        if isinstance(result, Failure):
            ctx.fail(result)
            continue
        left_full(ctx, "event", result)
        texts_by_segment.setdefault(number, []).extend(result.items)
    events: list[Event] = []
    seen: set[str] = set()
    for number in sorted(texts_by_segment):
        for text in dedupe(texts_by_segment[number]):
            if text.lower() in seen:
                continue
            seen.add(text.lower())
            events.append(Event(text=text, segment=number, turn_ids=[groups[i][0] for i in segments[number]]))
    ctx.stats.bump("events", len(events))
    if not with_relations or len(events) < 2:
        return events, []
    relations = yield from infer_relations(view, events, ctx)
    return events, relations


def infer_relations(view: DialogueView, events: list[Event], ctx: RunContext) -> Program[list[Relation]]:
    cp = ctx.config.pipeline
    n = len(events)
    types = tuple(cp.relation_types)
    schema = schema_for("relation", max_items=cp.max_list_items, n_events=n, relation_types=types)

    def check(value: dict[str, Any]) -> tuple[list[Relation], list[str]]:
        """Strict repair: edges naming an event that does not exist, or an event with itself, are dropped."""
        kept: list[Relation] = []
        notes: list[str] = []
        proposed = [tuple(link) for link in value["links"]]
        for s, r, t in proposed:
            if not (0 <= s < n and 0 <= t < n):
                notes.append(f"dropped edge to a missing event ({s} -> {t} of {n})")
            elif s == t:
                notes.append(f"dropped self-loop on event {s}")
            else:
                kept.append((s, r, t))
        if proposed and not kept:
            raise ReplyError("every proposed edge names a missing event")
        return kept, notes

    (result,) = yield from ask_whole(ctx, [Generate(
        stage="rel", role="relation", schema=schema, max_tokens=cp.max_tokens["relation"], check=check,
        messages=render("relation", view.block, user=view.owner, events=numbered([e.text for e in events]),
                        relation_types=relation_menu(types)), item=f"{n} events")])
    if isinstance(result, Failure):
        ctx.fail(result)
        return []
    ctx.stats.bump("relations_inferred", len(result))
    return result
