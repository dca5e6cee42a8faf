"""Token compression of the dialogue before the draft and event prompts (the paper's Appendix C).

Each message is compressed by LLMLingua-2 (one batched request for all sessions in flight). The session block
then shows the compressed dialogue, so the roles that read it (the draft, event abstraction, relation
inference and verification, and the adjudicator as context) see compressed text; details are asked from the
original turns shown in their own request, and grounding, NLI premises, the turn the adjudicator is shown
and anchoring keep the original turns as the source of truth.
"""

from __future__ import annotations

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup
from promem_fast.pipeline.views import DialogueView
from promem_fast.requests import Compress, Failure, Program
from promem_fast.types import Turn


def compress_turns(view: DialogueView, groups: list[TurnGroup], ctx: RunContext) -> Program[list[TurnGroup]]:
    """The turns with compressed texts; the statistics count the tokens of the turns as the prompts show them."""
    texts = tuple(m.text for _, messages in groups for m in messages)
    (compressed,) = yield [Compress(stage="compress", texts=texts)]
    if isinstance(compressed, Failure):
        ctx.fail(compressed)
        return groups
    out: list[TurnGroup] = []
    pos = 0
    for tid, messages in groups:
        new = []
        for m in messages:
            text = compressed[pos].strip() or m.text
            pos += 1
            new.append(Turn(turn_id=m.turn_id, role=m.role, text=text, timestamp=m.timestamp))
        out.append((tid, tuple(new)))
    before = sum(ctx.text_tokens("draft", view.turn(g)) for g in groups)
    after = sum(ctx.text_tokens("draft", view.turn(g)) for g in out)
    ctx.stats.bump("compression_tokens_before", before)
    ctx.stats.bump("compression_tokens_after", after)
    return out
