"""Stage 2a: the initial memory draft over the whole session (§3.3), chunked by turns when the session
does not fit the model's context. A chunk that still overflows is halved and asked again; nothing is cut."""

from __future__ import annotations

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup, dedupe, statements, turn_text, window_text
from promem_fast.prompts import render, schema_for
from promem_fast.requests import Failure, Generate, Program
from promem_fast.types import Session


def chunk_turns(groups: list[TurnGroup], ctx: RunContext, budget: int) -> list[str]:
    """Dialogue texts that each fit ``budget`` tokens: whole turns packed in order, a lone oversized turn
    windowed into pieces."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for group in groups:
        text = turn_text(group)
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


def draft_memory(session: Session, groups: list[TurnGroup], ctx: RunContext, stage: str = "draft"
                 ) -> Program[list[str]]:
    cp = ctx.config.pipeline
    schema = schema_for("draft", max_items=cp.max_list_items)
    budget = ctx.prompt_budget("draft", render("draft", user=session.user, dialogue=""))
    chunks = chunk_turns(groups, ctx, budget)
    ctx.stats.bump("draft_chunks", len(chunks))
    facts: list[str] = []
    while chunks:
        requests = [Generate(stage=stage, role="draft", schema=schema, max_tokens=cp.max_tokens["draft"],
                             messages=render("draft", user=session.user, dialogue=chunk),
                             item=f"draft chunk {i + 1}/{len(chunks)}", check=statements("facts", chunk))
                    for i, chunk in enumerate(chunks)]
        results = yield requests
        retry: list[str] = []
        for chunk, result in zip(chunks, results):
            if isinstance(result, Failure):
                lines = chunk.split("\n")
                if result.error.startswith("ContextOverflow") and len(lines) > 1:
                    half = len(lines) // 2
                    retry += ["\n".join(lines[:half]), "\n".join(lines[half:])]
                    ctx.stats.bump("draft_chunks", 1)
                else:
                    ctx.fail(result)
                continue
            facts.extend(result["facts"])
        chunks = retry
    facts = dedupe(facts)
    ctx.stats.bump("draft_entries", len(facts))
    return facts
