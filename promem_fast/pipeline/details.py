"""Stage 1a: fine-grained details, extracted turn by turn (P_detail in the paper, §3.2)."""

from __future__ import annotations

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup, ask, dedupe, same_language, turn_text, window_text
from promem_fast.prompts import render, schema_for
from promem_fast.requests import Failure, Generate, Program
from promem_fast.types import Detail


def extract_details(groups: list[TurnGroup], ctx: RunContext) -> Program[list[Detail]]:
    """One request per turn (per window of a turn too long for the context); details deduplicated per turn."""
    cp = ctx.config.pipeline
    schema = schema_for("detail", max_items=cp.max_list_items)
    budget = ctx.prompt_budget("detail", render("detail", turn=""))
    requests: list[Generate] = []
    owners: list[int] = []
    for index, group in enumerate(groups):
        pieces = window_text(ctx, "detail", turn_text(group), budget)
        if len(pieces) > 1:
            ctx.stats.bump("windowed_turns")
        for piece in pieces:
            requests.append(Generate(stage="da", role="detail", messages=render("detail", turn=piece),
                                     schema=schema, max_tokens=cp.max_tokens["detail"], item=f"turn {group[0]}",
                                     check=same_language(piece)))
            owners.append(index)
    results = yield from ask(requests)
    per_turn: dict[int, list[str]] = {}
    for index, result in zip(owners, results):
        if isinstance(result, Failure):
            ctx.fail(result)
            continue
        per_turn.setdefault(index, []).extend(result["details"])
    details: list[Detail] = []
    for index in sorted(per_turn):
        details.extend(Detail(text=t, turn_id=groups[index][0]) for t in dedupe(per_turn[index]))
    ctx.stats.bump("details", len(details))
    return details
