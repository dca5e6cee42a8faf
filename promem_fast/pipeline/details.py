"""Stage 1a: fine-grained details, extracted turn by turn (P_detail in the paper, §3.2)."""

from __future__ import annotations

from collections.abc import Callable

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup, dedupe, left_full, listing, statements, window_text
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import render, schema_for
from promem_fast.requests import Failure, Generate, Program
from promem_fast.types import Detail


def extract_details(view: DialogueView, groups: list[TurnGroup], ctx: RunContext) -> Program[list[Detail]]:
    """One request per turn (per window of a turn too long for the context); details deduplicated per turn."""
    cp = ctx.config.pipeline
    schema = schema_for("detail", max_items=cp.max_list_items)
    budget = ctx.prompt_budget("detail", render("detail", user=view.owner, when=view.when, turn=""))
    makers: list[Callable[[str], Generate]] = []
    owners: list[int] = []

    def maker(piece: str, tid: int | str) -> Callable[[str], Generate]:
        return lambda more: Generate(
            stage="da", role="detail", schema=schema, max_tokens=cp.max_tokens["detail"], item=f"turn {tid}",
            messages=render("detail", user=view.owner, when=view.when, turn=piece, more=more),
            check=statements("details", piece, min_words=1, role="detail"))

    for index, group in enumerate(groups):
        pieces = window_text(ctx, "detail", view.turn(group), budget)
        if len(pieces) > 1:
            ctx.stats.bump("windowed_turns")
        for piece in pieces:
            makers.append(maker(piece, group[0]))
            owners.append(index)
    results = yield from listing(ctx, "details", makers)
    per_turn: dict[int, list[str]] = {}
    for index, result in zip(owners, results):
        if isinstance(result, Failure):
            ctx.fail(result)
            continue
        left_full(ctx, "detail", result)
        per_turn.setdefault(index, []).extend(result.items)
    details: list[Detail] = []
    for index in sorted(per_turn):
        details.extend(Detail(text=t, turn_id=groups[index][0]) for t in dedupe(per_turn[index]))
    ctx.stats.bump("details", len(details))
    return details
