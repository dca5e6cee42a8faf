"""Helpers shared by the stage programs: running sub-programs side by side, continued lists, NLI requests."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from promem_fast.pipeline.words import content_set, content_words
from promem_fast.backends.base import NLIResult
from promem_fast.parsing import dominant_script
from promem_fast.context import RunContext
from promem_fast.pipeline.views import DialogueView, TurnGroup
from promem_fast.prompts import PREAMBLE, example_names, example_of, more_text, render, schema_for, session_block
from promem_fast.requests import Cut, Entail, Failure, Generate, Program, ReplyError, Request

log = logging.getLogger(__name__)

__all__ = ["TurnGroup", "Listed", "gather", "ask", "ask_whole", "listing", "left_full", "entail_requests",
           "entailed", "window_text", "dedupe", "statements", "same_language", "with_block",
           "without_dialogue"]

ROOM_FOR_ITEMS = 2048
"""Tokens kept free beside the dialogue in the session block for the longest role's instructions and item
(the flat entry list of relation probing is the longest), on top of the largest reply budget."""


def with_block(view: DialogueView, groups: Sequence[TurnGroup], ctx: RunContext, compressed: bool = False,
               detail_originals: bool = False) -> DialogueView:
    """``view`` with the session block that shows ``groups`` (the compressed turns when ``compressed``: every
    role that reads the block then reads them; ``detail_originals`` when the words details are taken from are
    among the compressed ones, so details are asked from the original turns shown in their own requests), or
    the header alone when the dialogue does not fit the model's context beside the longest reply and item, or
    when ``pipeline.dialogue_in_block`` is off (each prompt then shows the part of the dialogue it needs)."""
    cp = ctx.config.pipeline
    block = session_block(view.owner, view.when, view.dialogue(groups)) if compressed else view.block
    room = max(cp.max_tokens[r] for r in ("detail", "event", "draft", "relation", "verify_relation"))
    fits = ctx.text_tokens("draft", block) + room + ROOM_FOR_ITEMS <= ctx.services.context_length("draft")
    if fits and cp.dialogue_in_block:
        return replace(view, block=block, shows_dialogue=True, detail_originals=detail_originals)
    return replace(without_dialogue(view), detail_originals=detail_originals)


def without_dialogue(view: DialogueView) -> DialogueView:
    """``view`` with the session block's header alone (owner, date, rules): for the roles that work from the
    entries, and for sessions whose dialogue the block cannot hold."""
    return replace(view, block=session_block(view.owner, view.when, None), shows_dialogue=False)


def gather(*programs: Program[Any]) -> Program[list[Any]]:
    """Run sub-programs in lockstep: each round yields all their pending requests as one list.

    This is how a session runs detail extraction, event abstraction and the draft in parallel (§3.2):
    their requests travel in the same engine round instead of one after the other.
    """
    values: list[Any] = [None] * len(programs)
    pending: dict[int, list[Request]] = {}
    for i, program in enumerate(programs):
        try:
            pending[i] = next(program)
        except StopIteration as stop:
            values[i] = stop.value
    while pending:
        order = list(pending)
        flat = [req for i in order for req in pending[i]]
        results = yield flat
        pos = 0
        for i in order:
            n = len(pending[i])
            part, pos = results[pos:pos + n], pos + n
            try:
                pending[i] = programs[i].send(part)
            except StopIteration as stop:
                values[i] = stop.value
                del pending[i]
    return values


def ask(requests: list[Request]) -> Program[list[Any]]:
    """Yield ``requests`` unless there are none (a program must never yield an empty list)."""
    if not requests:
        return []
    return (yield requests)


MAX_GROWTH = 2
"""How many times a reply cut by its token budget is asked again, each time with twice the budget."""


def ask_whole(ctx: RunContext, requests: list[Generate]) -> Program[list[Any]]:
    """Results of ``requests``, a reply cut by its token budget asked again with twice the budget (at most
    :data:`MAX_GROWTH` times). A reply still cut after that keeps what parsed of it, counted as
    ``cut_kept``; one that never parsed becomes a recorded failure."""
    results: list[Any] = yield from ask([replace(r, cut_aware=True) for r in requests])
    for growth in range(1, MAX_GROWTH + 1):
        again = [i for i, r in enumerate(results) if isinstance(r, Cut) and not r.looped]
        if not again:
            break
        ctx.stats.bump("cut_retried", len(again))
        retried = yield from ask([replace(requests[i], cut_aware=True, max_tokens=requests[i].max_tokens << growth)
                                  for i in again])
        for i, result in zip(again, retried):
            if isinstance(result, Failure) and result.error.startswith("ContextOverflow"):
                continue  # no room for a larger budget: the cut reply stands
            results[i] = result
    out: list[Any] = []
    for request, result in zip(requests, results):
        if isinstance(result, Cut):
            if result.value is None:
                result = Failure(stage=request.stage, role=request.role, item=request.item,
                                 error=cut_error(result, "before any usable part"))
            else:
                ctx.stats.bump("cut_kept")
                result = result.value
        out.append(result)
    return out


def entail_requests(ctx: RunContext, stage: str, pairs: Sequence[tuple[str, str]],
                    items: Sequence[str | None], block: str = PREAMBLE) -> list[Request]:
    """NLI requests for (premise, hypothesis) pairs: NLI-model requests, or the chat model as judge (its
    prompts after ``block``: the session block, or the preamble alone for checks outside a session)."""
    if ctx.config.nli.backend != "llm":
        return [Entail(stage=stage, premise=p, hypothesis=h, item=it) for (p, h), it in zip(pairs, items)]
    max_tokens = ctx.config.pipeline.max_tokens["nli"]
    schema = schema_for("nli")
    return [Generate(stage=stage, role="nli", messages=render("nli", block, premise=p, hypothesis=h), schema=schema,
                     max_tokens=max_tokens, item=it) for (p, h), it in zip(pairs, items)]


def entailed(ctx: RunContext, result: Any) -> bool | None:
    """True/False for an NLI answer of either kind; None (recorded as a failure) when the step failed."""
    if isinstance(result, Failure):
        ctx.fail(result)
        return None
    if isinstance(result, NLIResult):
        return result.label == "entailment"
    return result["label"] == "entailment"


def cut_error(cut: Cut, tail: str = "") -> str:
    """The failure of a request none of whose replies gave a usable part."""
    why = "the reply repeated itself" if cut.looped else "every reply ran out of its token budget"
    return f"Cut: {why}" + (f" {tail}" if tail else "")


def item_key(text: str) -> str:
    """What two list items are compared by: case and spacing ignored."""
    return " ".join(text.split()).lower()


def repeats_itself(items: Sequence[str]) -> bool:
    """Whether a reply's list names one item twice: the model has started over, and asking it for the
    rest would get more of the same (:mod:`promem_fast.loops`)."""
    keys = [item_key(t) for t in items]
    return len(set(keys)) < len(keys)


MAX_CONTINUATIONS = 3
"""How many times a cut list is asked for the rest (bounds a looping model)."""


@dataclass
class Listed:
    """The items of one list request and its continuations."""

    items: list[str]
    full: bool = False
    """The last reply still filled the cap: its continuation did not fit the context, failed, or the
    bound on continuations was reached, so there may be more to ask for."""


def listing(ctx: RunContext, key: str, makers: Sequence[Callable[[str], Generate]]
            ) -> Program[list[Listed | Failure]]:
    """The ``key`` lists of several list requests, each asked again while its reply may have been cut.

    ``makers[i](more)`` builds request i with ``more`` as its continuation tail (empty the first time).
    A reply that ran out of its token budget (finish reason "length") or reached ``max_list_items`` was
    cut, so the same prompt is sent again with the items so far, asking only for what is missing, until a
    reply ends on its own below the cap or adds nothing; a cut reply of which nothing parsed is asked again
    with twice the budget. A request whose first reply failed gives its :class:`Failure`; a continuation
    that failed keeps the items already listed, is recorded (unless it merely did not fit the context) and
    marks them ``full``.
    """
    cap = ctx.config.pipeline.max_list_items
    got = [Listed([]) for _ in makers]
    # items in each latest reply before its check dropped any: a reply cut at the cap may lose a fragment
    # or an example copy to the check and still have been cut
    replied = [0] * len(makers)
    growth = [0] * len(makers)
    failed: dict[int, Failure] = {}

    def counted(i: int, request: Generate) -> Generate:
        inner = request.check

        def check(value: Any) -> tuple[Any, list[str]]:
            replied[i] = len(value[key])
            return inner(value) if inner is not None else (value, [])

        return replace(request, check=check, cut_aware=True, max_tokens=request.max_tokens << growth[i])

    todo = list(range(len(makers)))
    for again_no in range(MAX_CONTINUATIONS + 1):
        results = yield from ask([counted(i, makers[i](more_text(got[i].items))) for i in todo])
        again: list[int] = []
        for i, result in zip(todo, results):
            cut = isinstance(result, Cut)
            looped = cut and result.looped
            if cut:
                if not looped:
                    ctx.stats.bump("cut_continued")
                if result.value is None:  # nothing complete before the cut: ask again with more room
                    if growth[i] < MAX_GROWTH and not looped:
                        growth[i] += 1
                        again.append(i)
                    elif not got[i].items:
                        failed[i] = Failure(stage=makers[i]("").stage, role=makers[i]("").role,
                                            item=makers[i]("").item, error=cut_error(result))
                    else:
                        got[i].full = not looped
                    continue
                result = result.value
            if isinstance(result, Failure):
                if not got[i].items:
                    failed[i] = result
                    continue
                if not result.error.startswith("ContextOverflow"):
                    ctx.fail(result)
                got[i].full = True
                continue
            seen = {item_key(t) for t in got[i].items}
            fresh = []
            for text in result[key]:  # a list that names an item twice keeps it once
                if (norm := item_key(text)) not in seen:
                    seen.add(norm)
                    fresh.append(text)
            got[i].items.extend(fresh)
            if again_no:  # items a cut or full first reply would have lost
                ctx.stats.bump("continued_items", len(fresh))
            looped = looped or repeats_itself(result[key])
            got[i].full = (cut or replied[i] >= cap) and bool(fresh) and not looped
            if got[i].full:
                again.append(i)
        ctx.stats.bump("list_continuations", len(again))
        todo = again
        if not todo:
            break
    return [failed.get(i, got[i]) for i in range(len(makers))]


def left_full(ctx: RunContext, role: str, listed: Listed) -> None:
    """Say (log and count) that a list still filled its cap when asking for more had to stop."""
    if listed.full:
        log.warning("session %s: the %s list still filled the cap of %d items; its rest was not asked for",
                    ctx.session, role, ctx.config.pipeline.max_list_items)
        ctx.stats.bump("lists_left_full")


def window_text(ctx: RunContext, role: str, text: str, budget: int) -> list[str]:
    """``text`` cut into consecutive pieces of at most ``budget`` tokens at whitespace (never dropped)."""
    if budget <= 0:
        raise ValueError(f"no room left in the {role} prompt for any text")
    if ctx.text_tokens(role, text) <= budget:
        return [text]
    words = text.split(" ")
    pieces: list[str] = []
    current: list[str] = []
    for word in words:
        trial = " ".join(current + [word])
        if current and ctx.text_tokens(role, trial) > budget:
            pieces.append(" ".join(current))
            current = [word]
        else:
            current.append(word)
    if current:
        pieces.append(" ".join(current))
    oversized = [p for p in pieces if ctx.text_tokens(role, p) > budget]
    if oversized:  # a single "word" longer than the budget (no spaces): cut it by characters
        out: list[str] = []
        for piece in pieces:
            while ctx.text_tokens(role, piece) > budget:
                cut = max(1, len(piece) * budget // max(ctx.text_tokens(role, piece), 1))
                out.append(piece[:cut])
                piece = piece[cut:]
            if piece:
                out.append(piece)
        pieces = out
    return pieces


def dedupe(texts: Sequence[str]) -> list[str]:
    """Distinct non-empty texts (case and surrounding space ignored), first occurrence kept."""
    seen: set[str] = set()
    out: list[str] = []
    for text in texts:
        key = item_key(text)
        if key and key not in seen:
            seen.add(key)
            out.append(" ".join(text.split()))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


PLACEHOLDERS = frozenset({"sentence", "fragment", "...", "detail", "fact", "event"})
"""The example words of our reply formats: a small model that copies them back said nothing."""

_LIST_MARK = re.compile(r"^\s*(?:\d{1,3}[.)]|[-*\u2022])\s+")
"""A list number or bullet a model wrote inside a list item ("1. Maya moved ..."): formatting, not content."""


@lru_cache(maxsize=64)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str]:
    """One pattern finding any of ``names`` as a whole word (compiled once per set of names)."""
    return re.compile(r"\b(" + "|".join(sorted(map(re.escape, names))) + r")\b")


def copied_from_example(role: str | None, source: str, owner: str = "") -> Callable[[str], bool]:
    """Whether an item repeats a prompt's example rather than the dialogue: at least half of its content
    words are ``role``'s example's and not the source's (small models copy "40 euros a month" from the
    example), or it names someone or somewhere only an example names (a reworded "Tom starts a new job at
    the bakery"), that is neither in the source nor the memory's ``owner``."""
    example = content_set(example_of(role)) if role else frozenset()
    have = content_set(source)
    foreign = example_names() - set(_names_pattern(example_names()).findall(f"{source}\n{owner}".lower()))
    names = _names_pattern(foreign) if foreign else None

    def copied(item: str) -> bool:
        words = content_words(item)
        if names is not None and names.search(item.lower()):
            return True
        return bool(words) and 2 * sum(w in example and w not in have for w in words) >= len(words)

    return copied


def statements(key: str, source: str, min_words: int = 3, role: str | None = None, owner: str = ""
               ) -> Callable[[Any], tuple[Any, list[str]]]:
    """A reply check for lists of memory statements: items shorter than ``min_words`` words, copied from
    the format's placeholder or from an example (:func:`copied_from_example`) are dropped (a strict
    repair: nothing is added), then the language check runs. A reply left with no statement at all is
    retried when it had items to begin with. Every list a model returns as memory goes through it."""
    language = same_language(source)
    copied = copied_from_example(role, source, owner)

    def check(value: Any) -> tuple[Any, list[str]]:
        items = value[key]
        bare = [_LIST_MARK.sub("", t, count=1) for t in items]
        notes = [f"list numbering removed from items of {key!r}"] if bare != items else []
        kept = [t for t in bare if t.strip().lower() not in PLACEHOLDERS and len(t.split()) >= min_words
                and not copied(t)]
        if items and not kept:
            raise ReplyError(f"no item of {key!r} is a statement (placeholders or fragments only)")
        if len(kept) < len(items):
            notes.append(f"dropped {len(items) - len(kept)} non-statement or example item(s) of {key!r}")
        value = {**value, key: kept}
        value, more = language(value)
        return value, notes + more

    return check


def same_language(source: str) -> Callable[[Any], tuple[Any, list[str]]]:
    """A reply check: the reply must be written in the script of the text it was made from.

    Small models sometimes answer in another language; such a reply is retried rather than stored,
    since translating it back would mean inventing wording. Judged on the first 2,000 characters.
    """
    expected = dominant_script(source[:2000])

    def check(value: Any) -> tuple[Any, list[str]]:
        got = dominant_script(" ".join(_strings(value))[:2000])
        if expected and got and got != expected:
            raise ReplyError(f"reply written in {got} script, its source in {expected}")
        return value, []

    return check
