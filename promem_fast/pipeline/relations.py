"""Stage 4a: necessity-driven relation verification (§3.5).

Candidate edges between events are carried onto the purified entries that cover those events, cleaned
(self-loops, edges to discarded entries and duplicates removed, in one native call for the whole batch)
and probed: the LLM writes a question about the link; if the flat entries already answer it the edge
is implicit and dropped; otherwise the link is checked against the dialogue and kept only if supported.
"""

from __future__ import annotations

import numpy as np

from promem_fast.context import RunContext
from promem_fast.pipeline.common import TurnGroup, ask, turn_text
from promem_fast.prompts import numbered, render, schema_for
from promem_fast.requests import CleanEdges, Failure, Generate, Program
from promem_fast.types import Edge, MemoryEntry, Session


def map_edges(relations: list[tuple[int, str, int]], event_to_entry: list[int], became: list[list[int]],
              relation_types: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Event-level edges as (source node, relation id, target node) arrays; -1 marks a discarded endpoint.

    An entry that HV split maps to its first surviving node, the one that carries the entry's subject.
    """
    def node_of(event: int) -> int:
        entry = event_to_entry[event] if 0 <= event < len(event_to_entry) else -1
        return became[entry][0] if 0 <= entry < len(became) and became[entry] else -1

    src = np.array([node_of(s) for s, _, _ in relations], np.int64)
    rel = np.array([relation_types.index(r) for _, r, _ in relations], np.int64)
    dst = np.array([node_of(t) for _, _, t in relations], np.int64)
    return src, rel, dst


def evidence(groups: list[TurnGroup], focus: list[int], ctx: RunContext, budget: int) -> str:
    """The dialogue for verification: all of it when it fits, else the turns nearest the two grounded
    turns, added outwards until the budget is used (the statistics count each narrowed prompt)."""
    texts = [turn_text(g) for g in groups]
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


def verify_relations(session: Session, groups: list[TurnGroup], nodes: list[MemoryEntry],
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
    probes = yield [Generate(stage="rel", role="probe", schema=schema_for("probe"), max_tokens=cp.max_tokens["probe"],
                             messages=render("probe", user=session.user, source=nodes[s].text,
                                             target=nodes[t].text, relation=r), item=f"edge {s} -{r}-> {t}")
                    for s, r, t in edges]
    flat = numbered([n.text for n in nodes])
    asked: list[tuple[tuple[int, str, int], str]] = []
    for edge, result in zip(edges, probes):
        if isinstance(result, Failure):
            ctx.fail(result)
            continue
        asked.append((edge, result["question"]))
    answers = yield from ask([
        Generate(stage="rel", role="answer_flat", schema=schema_for("answer_flat"),
                 max_tokens=cp.max_tokens["answer_flat"], messages=render("answer_flat", entries=flat, question=q),
                 item=q) for _, q in asked])
    open_questions: list[tuple[tuple[int, str, int], str]] = []
    for (edge, question), result in zip(asked, answers):
        if isinstance(result, Failure):
            ctx.fail(result)
        elif result["answerable"]:
            ctx.stats.bump("edges_implicit")
        else:
            open_questions.append((edge, question))
    empty = render("verify_relation", user=session.user, dialogue="", source="", target="", relation="", question="")
    budget = ctx.prompt_budget("verify_relation", empty)
    requests = []
    for (s, r, t), question in open_questions:
        dialogue = evidence(groups, [turn_of_node[s], turn_of_node[t]], ctx,
                            budget - ctx.text_tokens("verify_relation", nodes[s].text + nodes[t].text + question))
        requests.append(Generate(stage="rel", role="verify_relation", schema=schema_for("verify_relation"),
                                 max_tokens=cp.max_tokens["verify_relation"], item=question,
                                 messages=render("verify_relation", user=session.user, dialogue=dialogue,
                                                 source=nodes[s].text, target=nodes[t].text, relation=r,
                                                 question=question)))
    verdicts = yield from ask(requests)
    out: list[Edge] = []
    for ((s, r, t), question), result in zip(open_questions, verdicts):
        if isinstance(result, Failure):
            ctx.fail(result)
        elif result["supported"]:
            out.append(Edge(source=s, target=t, relation=r, probe=question))
        else:
            ctx.stats.bump("edges_unsupported")
    ctx.stats.bump("edges_kept", len(out))
    return out
