"""Stage 1a: fine-grained details (P_detail in the paper, §3.2), several turns per request.

The paper extracts details turn by turn. With the dialogue in the session's leading block a request only
names its turns, so asking for several turns at once costs a line of item text instead of one request per
turn; each turn still gets its own list, kept by turn id for anchoring. By default details come from what
the owner says (the other speaker's lines are context), ``pipeline.detail_source = "turn"`` takes both
speakers. A session too long for the block is asked turn by turn (window by window for a long turn), each
request showing its turn.

Details that only repeat words of the prompt (a pronoun, a speaker's name, a turn label, the instructions'
own words) are dropped at the end and counted as ``details_from_prompt`` (:mod:`.detail_check`).

A reply that ran out of its budget or filled a turn's list is continued for the turns it did not finish:
those after the last turn it reached, and any whose list reached ``max_list_items``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from promem_fast.context import RunContext
from promem_fast.pipeline.common import (
    MAX_CONTINUATIONS, MAX_GROWTH, TurnGroup, ask, cut_error, dedupe, item_key, repeats_itself, statements, window_text,
)
from promem_fast.pipeline.detail_check import DetailCheck, instruction_text
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import (
    ANY_WORDS, DETAILS_MANY, DETAILS_ONE, OWNER_WORDS, more_text, render, schema_for, shown_part,
)
from promem_fast.requests import Cut, Failure, Generate, Program, ReplyError
from promem_fast.types import Detail

log = logging.getLogger(__name__)


@dataclass
class _Ask:
    turns: list[int]
    """Ordinals of the turns this request names, in dialogue order."""
    text: str = ""
    """The turn's text when the block has no dialogue."""
    growth: int = 0
    """How many times the budget was doubled after a cut reply of which nothing parsed."""
    first: bool = True


def extract_details(view: DialogueView, groups: list[TurnGroup], ctx: RunContext) -> Program[list[Detail]]:
    """Details of every turn, deduplicated per turn, in turn order."""
    cp = ctx.config.pipeline
    source = OWNER_WORDS.format(user=view.owner) if cp.detail_source == "speaker" else ANY_WORDS
    asks: list[_Ask] = []
    step = cp.detail_turns_per_request or len(groups)
    runs = [list(range(i, min(i + step, len(groups)))) for i in range(0, len(groups), step)]
    if view.shows_dialogue and not view.detail_originals:
        asks = [_Ask(turns) for turns in runs]
    elif view.detail_originals and all(_fits(view, groups, ctx, source, turns) for turns in runs):
        asks = [_Ask(turns, shown_part("The turns", view.dialogue([groups[i] for i in turns]))) for turns in runs]
    else:
        empty = render("detail", view.block, user=view.owner, source=source, turns="0",
                       text=shown_part("The turn", ""), reply=DETAILS_ONE)
        budget = ctx.prompt_budget("detail", empty)
        for index, group in enumerate(groups):
            pieces = window_text(ctx, "detail", view.turn(group), budget)
            if len(pieces) > 1:
                ctx.stats.bump("windowed_turns")
            asks.extend(_Ask([index], shown_part("The turn", piece)) for piece in pieces)
    found: dict[int, list[str]] = {}
    todo = asks
    for _ in range(MAX_CONTINUATIONS + 1):
        replied: dict[int, int] = {}
        results = yield from ask([_request(view, groups, ctx, source, a, found, replied) for a in todo])
        todo = [again for a, result in zip(todo, results)
                for again in _settle(ctx, a, result, found, replied)]
        ctx.stats.bump("list_continuations", len(todo))
        if not todo:
            break
    if todo:
        log.warning("session %s: details of %d turn(s) still cut when asking for more had to stop",
                    ctx.session, sum(len(a.turns) for a in todo))
        ctx.stats.bump("lists_left_full", len(todo))
    check = DetailCheck(instruction_text("detail", view.owner, source),
                        {view.owner, view.owner_role, *(m.role for _, said in groups for m in said)})
    details: list[Detail] = []
    for index in sorted(found):
        listed = dedupe(found[index])
        said = "\n".join(m.text for m in view.said(groups[index], cp.detail_source))
        kept = check.keep(listed, said)
        if len(kept) < len(listed):
            ctx.stats.bump("details_from_prompt", len(listed) - len(kept))
        details.extend(Detail(text=t, turn_id=groups[index][0]) for t in kept)
    ctx.stats.bump("details", len(details))
    return details


def _fits(view: DialogueView, groups: list[TurnGroup], ctx: RunContext, source: str, turns: list[int]) -> bool:
    """Whether the original text of ``turns`` fits one detail request beside their replies' budget."""
    text = shown_part("The turns", view.dialogue([groups[i] for i in turns]))
    messages = render("detail", view.block, user=view.owner, source=source, turns="0", text=text,
                      reply=DETAILS_MANY)
    need = ctx.config.pipeline.max_tokens["detail"] * len(turns) + 16
    return ctx.services.count_tokens("detail", messages) + need <= ctx.services.context_length("detail")


def _label(groups: list[TurnGroup], index: int) -> str:
    return str(groups[index][0])


def _request(view: DialogueView, groups: list[TurnGroup], ctx: RunContext, source: str, a: _Ask,
             found: dict[int, list[str]], replied: dict[int, int]) -> Generate:
    cp = ctx.config.pipeline
    labels = [_label(groups, i) for i in a.turns]
    listed = [f"turn {labels[k]}: {t}" for k, i in enumerate(a.turns) for t in found.get(i, [])]
    one = len(labels) == 1
    listed = [t.split(": ", 1)[1] for t in listed] if one else listed
    messages = render("detail", view.block, user=view.owner, source=source, turns=", ".join(labels), text=a.text,
                      reply=DETAILS_ONE if one else DETAILS_MANY, more=more_text(listed))
    room = ctx.services.context_length("detail") - ctx.services.count_tokens("detail", messages) - 16
    budget = max(16, min((cp.max_tokens["detail"] * len(a.turns)) << a.growth, room))
    return Generate(stage="da", role="detail", messages=messages, max_tokens=budget, cut_aware=True,
                    schema=schema_for("detail", max_items=cp.max_list_items, turns=labels),
                    check=_check(view, groups, cp.detail_source, a, replied),
                    item=f"turn {labels[0]}" if len(labels) == 1 else f"turns {labels[0]}-{labels[-1]}")


def _check(view: DialogueView, groups: list[TurnGroup], mode: str, a: _Ask, replied: dict[int, int]) -> Any:
    """Each turn's list checked like a list of statements against that turn's words (fragments of one word
    allowed); the value (a list for one turn, else lists keyed by turn label) becomes ``{ordinal: details}``
    in the order the reply gave the turns."""
    ordinal = {_label(groups, i): i for i in a.turns}

    def check(value: dict[str, Any]) -> tuple[dict[int, list[str]], list[str]]:
        out: dict[int, list[str]] = {}
        notes: list[str] = []
        lists = value if len(a.turns) > 1 else {_label(groups, a.turns[0]): value["details"]}
        for label, listed in lists.items():
            i = ordinal[label]  # the schema admits only the turns asked
            evidence = a.text or "\n".join(m.text for m in view.said(groups[i], mode))
            replied[i] = replied.get(i, 0) + len(listed)
            try:
                kept, more = statements("details", evidence, min_words=1, role="detail", owner=view.owner)(
                    {"details": listed})
            except ReplyError as exc:
                raise ReplyError(f"turn {label}: {exc}") from exc
            out.setdefault(i, []).extend(kept["details"])
            notes += more
        return out, notes

    return check


def _settle(ctx: RunContext, a: _Ask, result: Any, found: dict[int, list[str]], replied: dict[int, int]
            ) -> list[_Ask]:
    """Store one reply's details; the asks still to send for the turns it did not finish."""
    cut = isinstance(result, Cut)
    looped = cut and result.looped
    if cut:
        if not looped:
            ctx.stats.bump("cut_continued")
        if result.value is None:  # nothing complete before the cut: the same turns with twice the budget
            if a.growth < MAX_GROWTH and not looped:
                return [_Ask(a.turns, a.text, a.growth + 1, a.first)]
            result = Failure(stage="da", role="detail", item=f"turns {a.turns}", error=cut_error(result))
        else:
            result = result.value
    if isinstance(result, Failure):
        if a.first or not result.error.startswith("ContextOverflow"):
            ctx.fail(result)
        return []
    cap = ctx.config.pipeline.max_list_items
    fresh: dict[int, bool] = {}
    for i, items in result.items():
        seen = {item_key(t) for t in found.get(i, [])}
        new = [t for t in items if item_key(t) not in seen]
        found.setdefault(i, []).extend(new)
        fresh[i] = bool(new) and not repeats_itself(items)
        if not a.first or a.growth:  # items a cut or full first reply would have lost
            ctx.stats.bump("continued_items", len(new))
    redo = [i for i in a.turns if replied.get(i, 0) >= cap and fresh.get(i)]
    if cut and result:
        last = max(a.turns.index(i) for i in result)
        if looped:  # the turn it was repeating itself on keeps what it has; the turns after it are asked
            redo = [i for i in redo if i != a.turns[last]]
            last += 1
        redo += [i for i in a.turns[last:] if i not in redo and (i not in result or fresh.get(i))]
    elif cut:
        redo = list(a.turns[1:] if looped else a.turns)
    redo.sort()
    return [_Ask(redo, a.text, a.growth, first=False)] if redo else []
