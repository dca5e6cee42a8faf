"""Retrieval-only evaluation: does the memory a question needs reach the top k, before any model answers?

``promem eval KIND --retrieval`` extracts (or reuses) the graphs, puts them in the store as ``promem eval``
does, then for every question with evidence ranks the memories of its history exactly as the answer step
ranks them (the hybrid ranking of :mod:`promem_fast.store.ranking`, LoCoMo's two per-speaker copies of a
memory counted once) and records the rank of the first memory grounded in its evidence. Evidence recall@k
is the share of questions with such a memory among the top k, per question category and overall.

The headline is at turn level: a memory counts when one of the turns it is anchored to is an evidence
turn (:mod:`.evidence` says how each benchmark's evidence becomes turns; HaluMem's is text, placed on the
turn saying most of it). Beside it: the session-level figure (any memory of a session holding evidence,
the coarser figure earlier versions reported), the figure a random order of the same pool reaches
(expected value, exact), and the turn-level figure under each ranking variant, so each part's gain is
seen alone (:func:`ranking_variants`).

It measures the retrieval stack (extraction, embedder, store, ranking), not answers. ``--time-aware``
adds the same table with each question seeing only the memories that held at its time (the store's
``as_of``: said by then and not yet replaced). The evaluation store judges no updates across sessions, so
the two differ only where a question's time precedes memories of its history.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from promem_fast.config import EngineConfig
from promem_fast.config_ranking import RankingConfig
from promem_fast.context import RunContext
from promem_fast.engine import Engine
from promem_fast.errors import ConfigError
from promem_fast.private import private_dirs, write_private
from promem_fast.requests import Embed, Failure, Program
from promem_fast.store import MemoryStore
from promem_fast.eval.store_index import evaluation_index
from promem_fast.times import iso_time
from promem_fast.types import MemoryGraph

from promem_fast.store.qa import RetrievalIndex, Unit, gather, prepared_query, rank, unit_key, with_stats

from .datasets import load_benchmark
from .evidence import TurnRef, all_evidence_turns, grounded_in
from .provenance import provenance
from .benchmark import Benchmark, Question
from .split import apply_tau, select_users
from .variants import KINDS, PathLike

RECALL_KS: tuple[int, ...] = (1, 5, 10, 20)
"""The k of recall@k reported by default (20 is the paper's QA top-k)."""


def unit_turns(graphs: Sequence[MemoryGraph]) -> dict[tuple[str, str], set[str]]:
    """(session, retrieval key) → the turns the memory is grounded in, from the graphs (the store keeps a
    node's first turn only); two memories of one session with the same key share their turns."""
    turns: dict[tuple[str, str], set[str]] = {}
    for graph in graphs:
        for node, details in graph.iter_anchored():
            key = unit_key(node.text, [d.text for d in details])
            turns.setdefault((graph.session_id, key), set()).update(str(t) for t in node.turn_ids)
    return turns


def grounded(unit: Unit, evidence: set[TurnRef], turns: dict[tuple[str, str], set[str]]) -> bool:
    """Whether ``unit`` is anchored to one of the evidence turns (see :mod:`.evidence`)."""
    return grounded_in(turns.get((unit.session_id, unit.key), set()), unit.session_id, evidence)


PARTS: tuple[str, ...] = ("lexical", "names", "speaker", "dedup", "when")
"""The ranking parts measured one by one (each a switch of :class:`RankingConfig`); ``dense`` is the base."""


def ranking_variants(config: RankingConfig) -> dict[str, RankingConfig]:
    """The rankings a retrieval run compares, by name: ``dense`` alone (the ranking before the hybrid one),
    ``lexical`` (BM25) alone, ``dense+PART`` (dense with one part), ``all`` (the configured ranking: every part
    the config turns on) and ``all-PART`` (all but one part); the lexical side's reading of the memories'
    sources, and of their exchanges, is left out alone of BM25 alone (``lexical-source``, ``lexical-exchange``)
    and of all (``all-source``, ``all-exchange``)."""
    none = {part: False for part in PARTS}
    variants = {"dense": replace(config, **none), "lexical": replace(config, **(none | {"lexical": True}),
                                                                     dense=False)}
    variants |= {f"dense+{part}": replace(config, **(none | {part: True})) for part in PARTS}
    variants["all"] = config
    variants |= {f"all-{part}": replace(config, **{part: False}) for part in PARTS if getattr(config, part)}
    for part in ("source", "exchange"):  # parts of the lexical side: each left out of it alone
        if config.lexical and getattr(config, part):
            variants[f"lexical-{part}"] = replace(variants["lexical"], **{part: False})
            variants[f"all-{part}"] = replace(config, **{part: False})
    return variants


def random_recall(pool: int, hits: int, k: int) -> float:
    """The chance that a random order of ``pool`` distinct memories, ``hits`` of them grounded, puts one of
    the grounded ones among the first ``k``: 1 - C(pool - hits, k) / C(pool, k)."""
    if hits <= 0 or pool <= 0:
        return 0.0
    return 1.0 - (math.comb(pool - hits, k) / math.comb(pool, k) if k <= pool - hits else 0.0)


def first_hit_program(question: Question, user: str, index: RetrievalIndex, evidence: set[TurnRef],
                      turns: dict[tuple[str, str], set[str]], variants: dict[str, RankingConfig],
                      depth: int) -> Program[dict[str, Any]]:
    """For each ranking variant, the 1-based rank of the first memory grounded in ``question``'s evidence
    turns and in its evidence sessions within ``depth`` (None when none is); with the pool's size and how many
    of its distinct memories are grounded (what a random order's figure is computed from)."""
    pool = gather(question, index)
    queries = {name: prepared_query(question, user, index, config) for name, config in variants.items()}
    texts = list(dict.fromkeys(q.text for q in queries.values()))
    (vectors,) = yield [Embed(stage="qa", texts=tuple(texts), query=True)]
    if isinstance(vectors, Failure):
        raise RuntimeError(f"query embedding failed: {vectors.error}")
    out: dict[str, Any] = {"ranks": {}}
    for name, config in variants.items():
        ranked = rank(question, index, pool, queries[name], vectors[texts.index(queries[name].text)], config, depth)
        units = [pool.entries[i][0] for i, _ in ranked.order]
        out["ranks"][name] = {
            "turn": next((r for r, u in enumerate(units, 1) if grounded(u, evidence, turns)), None),
            "session": next((r for r, u in enumerate(units, 1) if u.session_id in question.evidence_session_ids),
                            None)}
    distinct = {(date, unit.body): unit for unit, date, _ in pool.entries}.values()
    out |= {"pool": len(distinct), "grounded": sum(grounded(u, evidence, turns) for u in distinct),
            "grounded_sessions": sum(u.session_id in question.evidence_session_ids for u in distinct)}
    return out


def _first_hit_job(question: Question, user: str, index: RetrievalIndex, evidence: set[TurnRef],
                   turns: dict[tuple[str, str], set[str]], variants: dict[str, RankingConfig], depth: int,
                   ctx: RunContext) -> Program[tuple[dict[str, Any], Any]]:
    return with_stats(ctx, first_hit_program(question, user, index, evidence, turns, variants, depth))


def recall_table(rows: Sequence[dict[str, Any]], ks: Sequence[int], rank: str = "rank") -> dict[str, Any]:
    """Recall@k overall and per category from per-question rows (``category`` and ``rank``: 1-based or None)."""
    def recall(part: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(part), **{f"recall@{k}": (sum(r[rank] is not None and r[rank] <= k for r in part)
                                                   / len(part) if part else None) for k in ks}}

    categories = sorted({r["category"] for r in rows})
    return {"overall": recall(rows), "by_category": {c: recall([r for r in rows if r["category"] == c])
                                                     for c in categories}}


def random_table(rows: Sequence[dict[str, Any]], ks: Sequence[int], grounded_key: str) -> dict[str, Any]:
    """What a random order of each question's pool reaches, overall and per category (expected recall@k)."""
    def recall(part: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(part), **{f"recall@{k}": (sum(random_recall(r["pool"], r[grounded_key], k) for r in part)
                                                   / len(part) if part else None) for k in ks}}

    categories = sorted({r["category"] for r in rows})
    return {"overall": recall(rows), "by_category": {c: recall([r for r in rows if r["category"] == c])
                                                     for c in categories}}


def evidence_recall(engine: Engine, bench: Benchmark, graphs: Sequence[MemoryGraph],
                    index: RetrievalIndex | Callable[[Question], RetrievalIndex], *, kind: str,
                    ks: Sequence[int] = RECALL_KS, ranking: RankingConfig | None = None) -> dict[str, Any]:
    """Evidence recall@k of every question of ``bench`` with evidence turns, at turn level (the headline,
    ranked by ``ranking``, default the engine's), at session level, for a random order, and for every
    ranking variant (:func:`ranking_variants`); ``index`` is the store's memory, or a function giving the
    memory each question sees (time-aware)."""
    turns = unit_turns(graphs)
    evidence = all_evidence_turns(kind, bench)
    owner = {q.question_id: u.name for u in bench.users for q in u.questions}
    asked = [q for q in bench.questions if evidence[q.question_id]]
    depth = max(ks)
    variants = ranking_variants(ranking or engine.config.ranking)

    def programs() -> Iterator[tuple[Question, Callable[[RunContext], Program[Any]]]]:
        for q in asked:
            seen = index(q) if callable(index) else index
            about = q.metadata.get("about") or owner.get(q.question_id, "")
            yield q, partial(_first_hit_job, q, about, seen, evidence[q.question_id], turns, variants, depth)

    rows = []
    for q, outcome in engine.run(programs()):
        if isinstance(outcome, BaseException):
            raise outcome
        found, _ = outcome
        rows.append({"question_id": q.question_id, "category": q.question_type, "question": q.question,
                     "evidence": sorted(f"{sid}#{t}" if sid else t for sid, t in evidence[q.question_id]),
                     "rank": found["ranks"]["all"]["turn"], "session_rank": found["ranks"]["all"]["session"],
                     **{k: found[k] for k in ("pool", "grounded", "grounded_sessions")},
                     "variants": {name: r["turn"] for name, r in found["ranks"].items()}})
    parts = {name: recall_table([{**r, "rank": r["variants"][name]} for r in rows], ks)["overall"]
             for name in variants}
    return {"level": "turn", "ks": list(ks), "questions_without_evidence": len(bench.questions) - len(asked),
            **recall_table(rows, ks), "session_level": recall_table(rows, ks, "session_rank"),
            "random": random_table(rows, ks, "grounded"), "random_session": random_table(rows, ks, "grounded_sessions"),
            "variants": parts, "questions": rows}


def _as_of(store: MemoryStore, graphs: dict[str, MemoryGraph]) -> Callable[[Question], RetrievalIndex]:
    """For a question, the store's memories holding at its time (one index per distinct time, reused); a
    question whose time cannot be read sees the current memories (counted in the result)."""
    cache: dict[str | None, RetrievalIndex] = {}
    sessions = list(graphs)

    def index(question: Question) -> RetrievalIndex:
        when = iso_time(question.question_time)
        if when not in cache:
            cache[when] = store.retrieval_index(sessions, tenant="eval", as_of=when)
        return cache[when]

    return index


def run_retrieval(kind: str, data_path: PathLike, config: EngineConfig, *, out_dir: PathLike = "eval-out",
                  limit: int | None = None, sessions: int | None = None, graphs_path: PathLike | None = None,
                  ks: Sequence[int] = RECALL_KS, time_aware: bool = False, llm: Any = None,
                  users: str | None = None, tau_path: PathLike | None = None) -> dict[str, Any]:
    """Extract (or reuse) the graphs of ``kind``'s benchmark, store them, and measure evidence recall@k;
    writes ``OUT/retrieval-<kind>.json`` and ``OUT/retrieval-<kind>.md``. ``users`` and ``tau_path`` as
    for :func:`~.runner.run_eval`."""
    from .runner import extract_graphs

    if kind not in KINDS:
        raise ConfigError(f"unknown benchmark {kind!r}; choose one of: {', '.join(KINDS)}")
    if not ks or any(k < 1 for k in ks):
        raise ConfigError("--k takes positive integers, e.g. 1,5,10,20")
    bench = select_users(load_benchmark(kind, data_path, limit, sessions=sessions), users)
    if tau_path is not None:
        config, _ = apply_tau(config, tau_path, bench)
    out = private_dirs(out_dir)
    tag = f"full-r{config.compression.rate:g}" if config.compression.enabled else "full"  # as run_eval names it
    graphs_file = Path(graphs_path or out / f"graphs-{kind}-{tag}.jsonl")
    ks = sorted(set(ks))
    store_path = out / f"store-{kind}-retrieval.db"
    timed: dict[str, Any] | None = None
    with Engine(config, llm=llm) as engine:
        graphs = extract_graphs(engine, bench, graphs_file)
        index = evaluation_index(engine, graphs.values(), store_path)
        plain = evidence_recall(engine, bench, list(graphs.values()), index, kind=kind, ks=ks)
        if time_aware:
            with MemoryStore(store_path, engine.config, embedder=engine.services.embedder, update_judge="off",
                             read_only=True) as store:
                undated = sum(iso_time(q.question_time) is None for q in bench.questions)
                timed = {"measured": True, "questions_without_a_readable_time": undated,
                         **evidence_recall(engine, bench, list(graphs.values()), _as_of(store, graphs), kind=kind,
                                           ks=ks)}
    result = {"kind": kind, "benchmark": bench.name, "data": str(data_path), "limit": limit,
              "session_limit": sessions, "graphs": str(graphs_file), "without_time": plain, "with_time": timed,
              "provenance": provenance(config, [data_path])}
    write_private(out / f"retrieval-{kind}.json", json.dumps(result, ensure_ascii=False, indent=1))
    write_private(out / f"retrieval-{kind}.md", render(result))
    return result


def render(result: dict[str, Any]) -> str:
    """The markdown tables of a retrieval result: turn-level recall@k per category, the session-level and
    random-order figures beside it, each ranking variant, and the time-aware table when measured."""
    plain = result["without_time"]
    lines = [f"# Evidence recall@k: {result['benchmark']}", "",
             "A retrieval-stack figure (extraction, embedder, store, ranking; no answer is generated): the share "
             "of questions for which one of the top-k memories is anchored to one of its evidence turns (HaluMem "
             "gives evidence as text: each point is placed on the turn of its session that says most of it). "
             f"Data `{result['data']}`; {plain['questions_without_evidence']} questions without evidence turns "
             "left out.", "", *_recall_rows(plain, plain["ks"]), "",
             "Beside it, per category: turn level / session level (any memory of a session holding evidence) / a "
             "random order of the same memories (expected value).", "", *_beside_rows(plain), "",
             "Each ranking variant, all questions (turn level): `dense` alone is the ranking before the hybrid one, "
             "`dense+X` adds one part, `all-X` leaves one out.",
             "", *_variant_rows(plain)]
    timed = result.get("with_time")
    if timed is None:
        return "\n".join(lines + ["", "Time-aware retrieval: not asked for (`--time-aware`).", ""])
    lines += ["", "Time-aware: only the memories holding at each question's time (the store's `as_of`: said "
                  "by then and not yet replaced), ranked the same way.", "",
              *_recall_rows(timed, timed["ks"])]
    return "\n".join(lines + [""])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _recall_rows(table: dict[str, Any], ks: Sequence[int]) -> list[str]:
    """A recall table as markdown rows: one per category, then all questions."""
    lines = ["| Category | n | " + " | ".join(f"recall@{k}" for k in ks) + " |",
             "| --- | --- | " + " | ".join("---" for _ in ks) + " |"]
    for name, row in [*table["by_category"].items(), ("all", table["overall"])]:
        lines.append(f"| {name} | {row['n']} | " + " | ".join(_pct(row[f"recall@{k}"]) for k in ks) + " |")
    return lines


def _beside_rows(table: dict[str, Any]) -> list[str]:
    ks = table["ks"]
    lines = ["| Category | n | " + " | ".join(f"@{k} turn / session / random" for k in ks) + " |",
             "| --- | --- | " + " | ".join("---" for _ in ks) + " |"]
    for name in [*table["by_category"], "all"]:
        rows = [t["overall"] if name == "all" else t["by_category"][name]
                for t in (table, table["session_level"], table["random"])]
        cells = [" / ".join(_pct(r[f"recall@{k}"]) for r in rows) for k in ks]
        lines.append(f"| {name} | {rows[0]['n']} | " + " | ".join(cells) + " |")
    return lines


def _variant_rows(table: dict[str, Any]) -> list[str]:
    ks = table["ks"]
    lines = ["| Ranking | " + " | ".join(f"recall@{k}" for k in ks) + " |",
             "| --- | " + " | ".join("---" for _ in ks) + " |"]
    for name, row in table["variants"].items():
        lines.append(f"| {name} | " + " | ".join(_pct(row[f"recall@{k}"]) for k in ks) + " |")
    lines.append("| random order | " + " | ".join(_pct(table["random"]["overall"][f"recall@{k}"]) for k in ks) + " |")
    return lines
