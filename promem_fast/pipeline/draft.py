"""Stage 2a: the initial memory draft over the whole session (§3.3).

With the dialogue in the session block the draft is one request whose item is only the task. A session too
long for the block is chunked by turns, each chunk shown in its request; a chunk that still overflows, or
whose facts fill the list cap, is halved and asked again; nothing is cut."""

from __future__ import annotations

from collections.abc import Callable

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup, dedupe, left_full, listing, statements, window_text
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import render, schema_for, part_before
from promem_fast.requests import Failure, Generate, Program


def chunk_turns(view: DialogueView, groups: list[TurnGroup], ctx: RunContext, budget: int) -> list[str]:
    """Dialogue texts that each fit ``budget`` tokens: whole turns packed in order, a lone oversized turn
    windowed into pieces."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for group in groups:
        text = view.turn(group)
        size = ctx.text_tokens("draft", text) + 1
        if size > budget:
            if current:
                chunks.append("\n".join(current))
                current, used = [], 0
            chunks.extend(window_text(ctx, "draft", text, budget))
            ctx.stats.bump("windowed_turns")
            continue
        if current and used + size > budget:
            chunks.append("\n".join(current))
            current, used = [], 0
        current.append(text)
        used += size
    if current:
        chunks.append("\n".join(current))
    return chunks


def draft_memory(view: DialogueView, groups: list[TurnGroup], ctx: RunContext, stage: str = "draft"
                 ) -> Program[list[str]]:
    cp = ctx.config.pipeline
    schema = schema_for("draft", max_items=cp.max_list_items)
    whole = view.shows_dialogue
    if whole:
        chunks = [view.dialogue(groups)]
    else:
        label = "Part of the dialogue"
        budget = ctx.prompt_budget("draft", render("draft", view.block, user=view.owner, text=part_before(label, "")))
        chunks = chunk_turns(view, groups, ctx, budget)
    ctx.stats.bump("draft_chunks", len(chunks))
    in_view = chunks[0] if whole else None
    """The one text the block already shows (its halves, after a full list, are shown in their requests)."""

    def maker(chunk: str, label: str) -> Callable[[str], Generate]:
        shown = "" if chunk == in_view else part_before("Part of the dialogue", chunk)
        return lambda more: Generate(
            stage=stage, role="draft", schema=schema, max_tokens=cp.max_tokens["draft"], item=label,
            messages=render("draft", view.block, user=view.owner, text=shown, more=more),
            check=statements("facts", chunk, role="draft", owner=view.owner))

    facts: list[str] = []
    while chunks:
        results = yield from listing(ctx, "facts", [maker(chunk, f"draft chunk {i + 1}/{len(chunks)}")
                                                    for i, chunk in enumerate(chunks)])
        retry: list[str] = []
        for chunk, result in zip(chunks, results):
            lines = chunk.split("\n")
            overflow = isinstance(result, Failure) and result.error.startswith("ContextOverflow")
            if isinstance(result, Failure) and not (overflow and len(lines) > 1):
                ctx.fail(result)
                continue
            if isinstance(result, Failure) or (result.full and len(lines) > 1):
                # too long to ask at all, or too many facts to ask for all of them: ask each half
                half = len(lines) // 2
                retry += ["\n".join(lines[:half]), "\n".join(lines[half:])]
                ctx.stats.bump("draft_chunks", 1)
            else:
                left_full(ctx, "draft", result)
            if not isinstance(result, Failure):
                facts.extend(result.items)
        chunks = retry
    facts = dedupe(facts)
    ctx.stats.bump("draft_entries", len(facts))
    return facts
