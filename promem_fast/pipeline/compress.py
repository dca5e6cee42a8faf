"""Token compression of the dialogue the session block shows (the paper's Appendix C).

Messages are compressed by LLMLingua-2 (one batched request for all sessions in flight), by default only the
other speaker's (``compression.speakers``): in an assistant dialogue its lines are most of the tokens and are
context, while the owner's words, which memories and details are taken from, stay verbatim. The session block
then shows the compressed dialogue, so every role that reads it (the draft, event abstraction, relation
inference and verification, and the adjudicator as context) sees it. When the words details are taken from
are compressed too (``speakers: all``, or details from both speakers), details are asked from the original
turns shown in their own request (:func:`details_need_originals`). Grounding, NLI premises, the turn the
adjudicator is shown and anchoring keep the original turns as the source of truth.
"""

from __future__ import annotations

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup, with_block
from promem_fast.pipeline.views import DialogueView
from promem_fast.requests import Compress, Failure, Program
from promem_fast.types import Turn


def compress_turns(view: DialogueView, groups: list[TurnGroup], ctx: RunContext) -> Program[list[TurnGroup]]:
    """The turns with the chosen speakers' messages compressed (a message compressed to nothing keeps its text);
    the statistics count the tokens of the turns as the prompts show them."""
    everyone = ctx.config.compression.speakers == "all"

    def chosen(m: Turn) -> bool:
        return everyone or m.role != view.owner_role

    texts = tuple(m.text for _, messages in groups for m in messages if chosen(m))
    if not texts:
        return groups
    (compressed,) = yield [Compress(stage="compress", texts=texts)]
    if isinstance(compressed, Failure):
        ctx.fail(compressed)
        return groups
    shorter = iter(compressed)

    def shown(m: Turn) -> Turn:
        if not chosen(m):
            return m
        return Turn(turn_id=m.turn_id, role=m.role, text=next(shorter).strip() or m.text, timestamp=m.timestamp)

    out: list[TurnGroup] = [(tid, tuple(shown(m) for m in messages)) for tid, messages in groups]
    before = sum(ctx.text_tokens("draft", view.turn(g)) for g in groups)
    after = sum(ctx.text_tokens("draft", view.turn(g)) for g in out)
    ctx.stats.bump("compression_tokens_before", before)
    ctx.stats.bump("compression_tokens_after", after)
    return out


def block_view(view: DialogueView, groups: list[TurnGroup], ctx: RunContext
               ) -> Program[tuple[DialogueView, list[TurnGroup]]]:
    """The view with the session block every prompt starts with, and the turns that block shows (compressed
    when ``compression.enabled``)."""
    if not ctx.config.compression.enabled:
        return with_block(view, groups, ctx), groups
    shown = yield from compress_turns(view, groups, ctx)
    compressed = shown is not groups
    return with_block(view, shown, ctx, compressed, compressed and details_need_originals(ctx)), shown


def details_need_originals(ctx: RunContext) -> bool:
    """Whether compression reaches the words details are taken from (then they are asked from the original
    turns): it compresses every speaker, or details are taken from both speakers' words."""
    return ctx.config.compression.speakers == "all" or ctx.config.pipeline.detail_source != "speaker"
