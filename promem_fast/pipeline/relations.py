"""Stage 4a: necessity-driven relation verification (§3.5).

Candidate edges between events are carried onto the purified entries that cover those events, cleaned
(self-loops, edges to discarded entries and duplicates removed, in one native call for the whole batch)
and probed: the LLM writes a question about the link; if the flat entries already answer it the edge
is implicit and dropped; otherwise it is kept only if the dialogue supports it. The kept set is the paper's
(supported and not implicit); the order is not. The probe and the flat answer work from the entries alone
and get the block without the dialogue, and verification, the last request that reads the dialogue, runs
beside the probe and checks every link, so no reply token of the two necessity steps reads the session's
cached dialogue (on a GPU each one would: 1.06M of the 3.75M KV token reads of a HaluMem session's replies
went to the probe), and the dialogue is not left unreferenced for the probe's wave and the flat answer's
before verification needs it, when vLLM's prefix cache could evict it. Checking the implicit links too costs
a boolean each. When the block holds no dialogue (a session too long for it), each check carries its own part
of the dialogue, so only the links the entries do not answer are checked, after the necessity test, as the
paper orders it.
A link whose necessity test could not run (the probe or the flat answer found no valid reply) is not dropped
for it (``edges_untested``): a failed step costs the necessity test, not the link.
Each of the three steps asks about all of a session's links in one request (numbered items, each answered
once), so relation checking costs three requests per session rather than three per edge. The three prompts
start with the numbered entries, links named by entry number after them, so the entries' text is not
repeated in every link; the probe and the flat answer share their prefix, and verification shows only the
entries its links join (prefilled after the dialogue, they are its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from promem_fast.context import RunContext
from promem_fast.pipeline.words import content_set
from promem_fast.pipeline.common import TurnGroup, ask_whole, gather, without_dialogue
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import link_line, numbered, part_before, render, schema_for
from promem_fast.requests import CleanEdges, Failure, Generate, Program
from promem_fast.types import Edge, Event, MemoryEntry


def map_edges(relations: list[tuple[int, str, int]], events: list[Event], event_to_entry: list[int],
              became: list[list[int]], nodes: list[MemoryEntry], relation_types: tuple[str, ...]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Event-level edges as (source node, relation id, target node) arrays; -1 marks a discarded endpoint.

    An entry that HV split into atomic facts carries each edge on the fact(s) that hold the linked event's
    content (an edge about the move attaches to "Maya moved to Lisbon", not to "Maya has a sister");
    several facts that share the best overlap each get the edge, and when none overlaps the first fact does.
    """
    def nodes_of(event: int) -> list[int]:
        entry = event_to_entry[event] if 0 <= event < len(event_to_entry) else -1
        parts = became[entry] if 0 <= entry < len(became) else []
        if len(parts) <= 1:
            return parts or [-1]
        words = [content_set(nodes[n].text) for n in parts]
        common = frozenset.intersection(*words)  # the subject every fragment repeats tells nothing apart
        linked = content_set(events[event].text)
        overlap = [len((w - common) & linked) for w in words]
        best = max(overlap)
        return [n for n, o in zip(parts, overlap) if o == best] if best > 0 else parts[:1]

    edges = [(s, relation_types.index(r), t) for a, r, b in relations for s in nodes_of(a) for t in nodes_of(b)]
    src = np.array([e[0] for e in edges], np.int64)
    rel = np.array([e[1] for e in edges], np.int64)
    dst = np.array([e[2] for e in edges], np.int64)
    return src, rel, dst


def evidence(view: DialogueView, groups: list[TurnGroup], focus: list[int], ctx: RunContext, budget: int) -> str:
    """The dialogue for verification when the session block cannot hold it: all of it when it fits, else the
    turns nearest the two grounded turns, added outwards until the budget is used (the statistics count
    each narrowed prompt)."""
    texts = [view.turn(g) for g in groups]
    sizes = [ctx.text_tokens("verify_relation", t) + 1 for t in texts]
    if sum(sizes) <= budget:
        return "\n".join(texts)
    ctx.stats.bump("relation_evidence_windowed")
    anchors = [f for f in focus if f >= 0] or [0]
    order = sorted(range(len(groups)), key=lambda i: (min(abs(i - a) for a in anchors), i))
    chosen: list[int] = []
    used = 0
    for i in order:
        if used + sizes[i] > budget:
            continue
        chosen.append(i)
        used += sizes[i]
    return "\n".join(texts[i] for i in sorted(chosen))


def verify_relations(view: DialogueView, groups: list[TurnGroup], nodes: list[MemoryEntry],
                     turn_of_node: list[int], src: np.ndarray, rel: np.ndarray, dst: np.ndarray,
                     ctx: RunContext) -> Program[list[Edge]]:
    cp = ctx.config.pipeline
    types = tuple(cp.relation_types)
    ctx.stats.bump("edges_candidate", len(src))
    if len(src) == 0:
        return []
    symmetric = np.array([t in cp.symmetric_relations for t in types], np.uint8)
    (kept,) = yield [CleanEdges(stage="rel", source=src, relation=rel, target=dst, symmetric=symmetric)]
    edges = [(int(src[k]), types[int(rel[k])], int(dst[k])) for k in kept]
    ctx.stats.bump("edges_cleaned_away", len(src) - len(edges))
    if not edges:
        return []
    entries = numbered([n.text for n in nodes])
    link_lines = "\n".join(link_line(k, s, t, r) for k, (s, r, t) in enumerate(edges))
    probed = dict(entries=entries, links=link_lines)
    labels = [f"edge {s} -{r}-> {t}" for s, r, t in edges]  # each link as a failure record names it
    bare = without_dialogue(view)  # the necessity test works from the entries alone
    # verification reads only the entries its links join, by their numbers (the flat answer needs them all)
    joined = sorted({n for s, _, t in edges for n in (s, t)})
    linked = dict(entries=numbered({n: nodes[n].text for n in joined}), links=link_lines)

    def necessity() -> Program[tuple[list[str | None], list[bool | None]]]:
        """Each link's probe question and whether the flat entries answer it (None: the test could not run)."""
        questions = yield from _each(ctx, "probe", range(len(edges)), probed, bare, labels)
        asked = {k: q for k, q in enumerate(questions) if q is not None}
        answers = yield from _each(ctx, "answer_flat", list(asked), dict(entries=entries, questions=numbered(asked)),
                                   bare, list(asked.values()))
        answerable: list[bool | None] = [None] * len(edges)
        for k, result in zip(asked, answers):
            answerable[k] = result
        return questions, answerable

    def support(links: list[int]) -> Program[list[bool | None]]:
        """Whether what was said supports each of ``links`` (None: the check found no valid reply)."""
        items = [labels[k] for k in links]
        if view.shows_dialogue:
            return (yield from _each(ctx, "verify_relation", links, dict(linked, check=", ".join(map(str, links))),
                                     view, items))
        label = "The dialogue near the two facts"  # each link with the part of the dialogue near its two facts
        widest = str(max(links, default=0))
        budget = ctx.prompt_budget("verify_relation", render("verify_relation", view.block, user=view.owner,
                                                             text=part_before(label, ""), check=widest, **linked))
        singles = []
        for k, item in zip(links, items):
            s, _, t = edges[k]
            near = evidence(view, groups, [turn_of_node[s], turn_of_node[t]], ctx, budget)
            singles.append(_each(ctx, "verify_relation", [k], dict(linked, text=part_before(label, near),
                                                                   check=str(k)), view, [item]))
        return [v for (v,) in (yield from gather(*singles))]

    if view.shows_dialogue:  # checked while the session's cached dialogue is still referenced: every link
        (questions, answerable), checked = yield from gather(necessity(), support(list(range(len(edges)))))
        verdict = dict(enumerate(checked))
    else:  # each check prefills its own part of the dialogue: only the links the entries do not answer
        questions, answerable = yield from necessity()
        links = [k for k, known in enumerate(answerable) if not known]
        verdict = dict(zip(links, (yield from support(links))))
    implicit = sum(known is True for known in answerable)
    if implicit:
        ctx.stats.bump("edges_implicit", implicit)
    untested = sum(known is None for known in answerable)
    if untested:
        ctx.stats.bump("edges_untested", untested)
    out: list[Edge] = []
    for k, (s, r, t) in enumerate(edges):
        result = verdict.get(k)
        if answerable[k] or result is None:
            continue
        if result:
            out.append(Edge(source=s, target=t, relation=r, probe=questions[k]))
        else:
            ctx.stats.bump("edges_unsupported")
    ctx.stats.bump("edges_kept", len(out))
    return out


def _each(ctx: RunContext, role: str, numbers: Sequence[int], fields: dict[str, str], view: DialogueView,
          items: list[str]) -> Program[list[Any]]:
    """The answers to the items ``numbers`` (links or questions, by their numbers in the prompt) asked in one
    request, in that order (None for every item when the request failed, its failure recorded). The reply's
    schema requires each of them (:func:`~promem_fast.prompts.schema_for`), so a reply leaving one out is asked
    again."""
    numbers = list(numbers)
    n = len(numbers)
    if n == 0:
        return []
    cp = ctx.config.pipeline

    def check(value: dict[str, Any]) -> tuple[list[Any], list[str]]:
        return [value[str(i)] for i in numbers], []

    messages = render(role, view.block, user=view.owner, **fields)
    room = ctx.services.context_length(role) - ctx.services.count_tokens(role, messages) - 16
    (result,) = yield from ask_whole(ctx, [Generate(
        stage="rel", role=role, schema=schema_for(role, numbers=numbers), messages=messages, check=check,
        max_tokens=max(cp.max_tokens[role], min(cp.max_tokens[role] * n, room)),
        item=items[0] if n == 1 else f"{n} items: {items[0]} ...")])
    if isinstance(result, Failure):
        ctx.fail(result)
        return [None] * n
    return result
