"""Stage 3: hallucination verification through NLI and atomic decomposition (§3.4).

Each entry is grounded to its best turn by cosine and checked with NLI (turn ⊨ entry; by default the
premise is what the owner said in the turn, relative dates resolved to calendar days). An entry that is not
entailed is split into atomic facts; each fact is checked on its own, entailed facts are kept and the
others go to the LLM adjudicator, which revises or discards them. So one bad part never costs the
whole entry. An entry the split leaves whole was already atomic: its first verdict stands and it goes
straight to adjudication, without a second NLI call on the same pair.

The split and the NLI judge (the chat model, when it is one) carry all they need, the entry and the premise,
so they get the session block without the dialogue: on a GPU each token they write would otherwise read the
session's whole cached dialogue. The adjudicator is shown the fact and its source turn, as in the paper, after
the block with the dialogue: a turn's "she" or "the job" is read with the turns before it, and a wrong
DISCARD loses memory.

Only a model's explicit DISCARD removes content. A step that fails (an NLI call, a decomposition or an
adjudication that errored or never parsed) keeps what it was checking, marked ``unverified``, with the
failure in ``stats.failures`` (its ``item`` is the text) and counted as ``hv_unverified``: a flaky backend
must not quietly delete memory.
"""

from __future__ import annotations

import numpy as np

from promem_fast.context import RunContext
from promem_fast.pipeline.common import (
    TurnGroup, ask, ask_whole, dedupe, entail_requests, entailed, item_key, same_language, statements,
    without_dialogue,
)
from promem_fast.pipeline.completeness import Candidate
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import render, schema_for
from promem_fast.requests import Failure, Generate, Match, Program
from promem_fast.types import MemoryEntry


def ground(entry_vecs: np.ndarray, turn_vecs: np.ndarray) -> Program[tuple[np.ndarray, np.ndarray]]:
    """Best turn (ordinal) and its cosine for each entry."""
    if len(entry_vecs) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    (match,) = yield [Match(stage="hv", queries=entry_vecs, keys=turn_vecs)]
    if isinstance(match, Failure):
        raise RuntimeError(f"grounding failed: {match.error}")
    return match


def verify_entries(view: DialogueView, groups: list[TurnGroup], entries: list[Candidate], turn_of: np.ndarray,
                   grounding: np.ndarray, ctx: RunContext, enabled: bool
                   ) -> Program[tuple[list[MemoryEntry], list[list[int]]]]:
    """Purified nodes and, for each candidate entry, the indices of the nodes it became."""
    nodes: list[MemoryEntry] = []
    became: list[list[int]] = [[] for _ in entries]

    texts: set[str] = set()

    def add(entry_index: int, text: str, origin: str, verification: str, parent: int | None) -> None:
        key = item_key(text)
        if key in texts:  # two facts revised into the same sentence, or a fact equal to another entry
            ctx.stats.bump("hv_duplicates_merged")
            return
        texts.add(key)
        turn = int(turn_of[entry_index])
        became[entry_index].append(len(nodes))
        nodes.append(MemoryEntry(id=len(nodes), text=text, origin=origin, verification=verification,  # type: ignore[arg-type]
                                 turn_ids=[groups[turn][0]] if turn >= 0 else [],
                                 grounding_score=round(float(grounding[entry_index]), 6) if turn >= 0 else None,
                                 parent=parent, date=view.turn_date(groups[turn]) if turn >= 0 else view.date))

    if not enabled:
        for i, entry in enumerate(entries):
            add(i, entry.text, entry.origin, "unverified", None)
        return nodes, became

    cp = ctx.config.pipeline
    bare = without_dialogue(view).block  # for the split and the NLI judge (see the docstring)
    premises = [view.premise(groups[int(t)], cp.premise) if t >= 0 else "" for t in turn_of]
    ctx.stats.bump("hv_checked", len(entries))
    first = yield from ask(entail_requests(ctx, "hv", [(premises[i], e.text) for i, e in enumerate(entries)],
                                           [e.text for e in entries], bare))
    suspect: list[int] = []
    for i, result in enumerate(first):
        verdict = entailed(ctx, result)
        if verdict:
            add(i, entries[i].text, entries[i].origin, "entailed", None)
            ctx.stats.bump("hv_entailed")
        elif verdict is False:
            suspect.append(i)
        else:
            add(i, entries[i].text, entries[i].origin, "unverified", None)
            ctx.stats.bump("hv_unverified")
    if not suspect:
        return _ordered(nodes, became)

    schema = schema_for("decompose", max_items=cp.max_list_items)
    decomposed = yield from ask_whole(ctx, [
        Generate(stage="hv", role="decompose", schema=schema, max_tokens=cp.max_tokens["decompose"],
                 messages=render("decompose", bare, user=view.owner, entry=entries[i].text),
                 item=entries[i].text, check=statements("facts", entries[i].text, min_words=2, role="decompose",
                                                                owner=view.owner))
        for i in suspect])
    facts: list[tuple[int, str]] = []
    flagged: list[tuple[int, str]] = []
    for i, result in zip(suspect, decomposed):
        if isinstance(result, Failure):
            ctx.fail(result)
            add(i, entries[i].text, entries[i].origin, "unverified", None)
            ctx.stats.bump("hv_unverified")
            continue
        parts = [f for f in dedupe(result["facts"]) if " ".join(f.split()).lower() != " ".join(entries[i].text.split()).lower()]
        ctx.stats.bump("hv_split")
        facts.extend((i, f) for f in parts)
        if not parts:  # the entry was already atomic: its first NLI verdict stands, straight to adjudication
            flagged.append((i, entries[i].text))
            ctx.stats.bump("hv_atomic_flagged")
    second = yield from ask(entail_requests(ctx, "hv", [(premises[i], f) for i, f in facts], [f for _, f in facts],
                                            bare))
    for (i, fact), result in zip(facts, second):
        verdict = entailed(ctx, result)
        if verdict:
            add(i, fact, entries[i].origin, "atomic", i)
            ctx.stats.bump("atomic_kept")
        elif verdict is False:
            flagged.append((i, fact))
        else:
            add(i, fact, entries[i].origin, "unverified", i)
            ctx.stats.bump("hv_unverified")
    if flagged:
        schema = schema_for("adjudicate")
        rulings = yield from ask_whole(ctx, [
            Generate(stage="hv", role="adjudicate", schema=schema, max_tokens=cp.max_tokens["adjudicate"],
                     messages=render("adjudicate", view.block, user=view.owner, fact=fact,
                                     turn=view.turn(groups[int(turn_of[i])]) if turn_of[i] >= 0 else ""),
                     item=fact, check=same_language(fact))
            for i, fact in flagged])
        for (i, fact), result in zip(flagged, rulings):
            if isinstance(result, Failure):
                ctx.fail(result)
                add(i, fact, entries[i].origin, "unverified", i)
                ctx.stats.bump("hv_unverified")
                continue
            revised = (result.get("revised_fact") or "").strip()
            if result["action"] == "REVISE" and revised:
                add(i, revised, "revised", "revised", i)
                ctx.stats.bump("revised")
            elif result["action"] == "REVISE":  # a revision with no text removes nothing: only DISCARD does
                ctx.fail(Failure(stage="hv", role="adjudicate", error="REVISE without a revised fact", item=fact))
                add(i, fact, entries[i].origin, "unverified", i)
                ctx.stats.bump("hv_unverified")
            else:
                ctx.stats.bump("discarded")
    return _ordered(nodes, became)


def _ordered(nodes: list[MemoryEntry], became: list[list[int]]) -> tuple[list[MemoryEntry], list[list[int]]]:
    """Renumber nodes in candidate order (so ids read top to bottom like the draft), keeping the maps."""
    order = [n for group in became for n in group]
    new_id = {old: new for new, old in enumerate(order)}
    out = []
    for old in order:
        node = nodes[old]
        node.id = new_id[old]
        out.append(node)
    return out, [[new_id[n] for n in group] for group in became]
