"""Retrieval-only evaluation: does the memory a question needs reach the top k, before any model answers?

``promem eval locomo --retrieval`` extracts (or reuses) the graphs, puts them in the store as ``promem eval``
does, then for every question with evidence ranks the memories of its history exactly as the answer step
ranks them (query embedding against the stored vectors, LoCoMo's two per-speaker copies of a memory counted
once) and records the rank of the first memory its evidence grounds. Evidence recall@k is the share of
questions with such a memory among the top k, per question category and overall.

What "grounded in the evidence" means depends on what the benchmark annotates:

- LoCoMo (``turn`` level): a memory counts when one of the dialogue turns it is grounded in (its
  ``turn_ids``, the ``dia_id`` of the turn) is one of the question's evidence turns;
- HaluMem and LongMemEval (``session`` level): the evidence is gold memory points or answer sessions, not
  turns, so a memory counts when it comes from a session that holds the evidence. That is a coarser figure
  (any memory of the right session), stated as such.

It measures the retrieval stack (extraction, embedder, store, ranking), not answers. ``--time-aware``
adds the same table with each question seeing only the memories that held at its time (the store's
``as_of``: said by then and not yet replaced). The evaluation store judges no updates across sessions, so
the two differ only where a question's time precedes memories of its history.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.config import EngineConfig
from promem_fast.context import RunContext
from promem_fast.engine import Engine
from promem_fast.errors import ConfigError
from promem_fast.private import private_dirs, write_private
from promem_fast.requests import Embed, Failure, Program
from promem_fast.store import MemoryStore
from promem_fast.store.evaluation import evaluation_index
from promem_fast.times import iso_time
from promem_fast.types import MemoryGraph

from .datasets import load_benchmark
from .provenance import provenance
from promem_fast.store.qa import RetrievalIndex, Unit, top_k, unit_key, with_stats
from .benchmark import Benchmark, Question
from .split import apply_tau, select_users
from .variants import KINDS, PathLike

RECALL_KS: tuple[int, ...] = (1, 5, 10, 20)
"""The k of recall@k reported by default (20 is the paper's QA top-k)."""


def evidence_level(kind: str) -> str:
    return "turn" if kind == "locomo" else "session"


def unit_turns(graphs: Sequence[MemoryGraph]) -> dict[tuple[str, str], set[str]]:
    """(session, retrieval key) → the turns the memory is grounded in, from the graphs (the store keeps a
    node's first turn only); two memories of one session with the same key share their turns."""
    turns: dict[tuple[str, str], set[str]] = {}
    for graph in graphs:
        for node, details in graph.iter_anchored():
            key = unit_key(node.text, [d.text for d in details])
            turns.setdefault((graph.session_id, key), set()).update(str(t) for t in node.turn_ids)
    return turns


def grounded(unit: Unit, question: Question, level: str, turns: dict[tuple[str, str], set[str]]) -> bool:
    """Whether ``unit`` is grounded in ``question``'s evidence (see the module docstring)."""
    if level == "session":
        return unit.session_id in question.evidence_session_ids
    return bool(turns.get((unit.session_id, unit.key), set()) & {str(e) for e in question.evidence})


def ranked(question: Question, index: RetrievalIndex, query: np.ndarray, depth: int) -> list[Unit]:
    """The ``depth`` best units of ``question``'s history for ``query``, best first, a unit shown twice in
    one dated session (LoCoMo's per-speaker copies) kept once, as the answer step ranks them."""
    n = len(question.session_ids)
    dates = list(question.session_dates[:n]) + [None] * (n - len(question.session_dates))
    pool: list[tuple[Unit, str | None]] = []
    blocks = []
    for sid, date in zip(question.session_ids, dates, strict=True):
        vectors = index.vectors.get(sid)
        if vectors is not None and sid not in index.failed and vectors.shape[0]:
            blocks.append(vectors)
            pool.extend((unit, date) for unit in index.units[sid])
    if not pool:
        return []
    order, _ = top_k(query, np.concatenate(blocks), len(pool))
    out: list[Unit] = []
    seen: set[tuple[str | None, str]] = set()
    for i in order.tolist():
        unit, date = pool[i]
        if (date, unit.body) in seen:
            continue
        seen.add((date, unit.body))
        out.append(unit)
        if len(out) == depth:
            break
    return out


def first_hit_program(question: Question, index: RetrievalIndex, level: str,
                      turns: dict[tuple[str, str], set[str]], depth: int) -> Program[int | None]:
    """The 1-based rank of the first memory grounded in ``question``'s evidence within ``depth``, or None."""
    (query,) = yield [Embed(stage="qa", texts=(question.question,), query=True)]
    if isinstance(query, Failure):
        raise RuntimeError(f"query embedding failed: {query.error}")
    for rank, unit in enumerate(ranked(question, index, query[0], depth), 1):
        if grounded(unit, question, level, turns):
            return rank
    return None


def _first_hit_job(question: Question, index: RetrievalIndex, level: str, turns: dict[tuple[str, str], set[str]],
                   depth: int, ctx: RunContext) -> Program[tuple[int | None, Any]]:
    return with_stats(ctx, first_hit_program(question, index, level, turns, depth))


def _has_evidence(question: Question, level: str) -> bool:
    return bool(question.evidence if level == "turn" else question.evidence_session_ids)


def recall_table(rows: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """Recall@k overall and per category from per-question rows (``category``, ``rank``: 1-based or None)."""
    def recall(part: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(part), **{f"recall@{k}": (sum(r["rank"] is not None and r["rank"] <= k for r in part)
                                                   / len(part) if part else None) for k in ks}}

    categories = sorted({r["category"] for r in rows})
    return {"overall": recall(rows), "by_category": {c: recall([r for r in rows if r["category"] == c])
                                                     for c in categories}}


def evidence_recall(engine: Engine, bench: Benchmark, graphs: Sequence[MemoryGraph],
                    index: RetrievalIndex | Callable[[Question], RetrievalIndex], *, kind: str,
                    ks: Sequence[int] = RECALL_KS) -> dict[str, Any]:
    """Per-question first-hit ranks and recall@k tables for every question of ``bench`` with evidence;
    ``index`` is the store's memory, or a function giving the memory each question sees (time-aware)."""
    level = evidence_level(kind)
    turns = unit_turns(graphs)
    asked = [q for q in bench.questions if _has_evidence(q, level)]
    depth = max(ks)

    def programs() -> Iterator[tuple[Question, Callable[[RunContext], Program[Any]]]]:
        for q in asked:
            seen = index(q) if callable(index) else index
            yield q, partial(_first_hit_job, q, seen, level, turns, depth)

    rows = []
    for q, outcome in engine.run(programs()):
        if isinstance(outcome, BaseException):
            raise outcome
        rank, _ = outcome
        rows.append({"question_id": q.question_id, "category": q.question_type, "question": q.question,
                     "evidence": [str(e) for e in q.evidence] if level == "turn" else list(q.evidence_session_ids),
                     "rank": rank})
    return {"level": level, "ks": list(ks), "questions_without_evidence": len(bench.questions) - len(asked),
            **recall_table(rows, ks), "questions": rows}


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
    """The markdown table of a retrieval result: recall@k per category, without time-aware ranking."""
    plain = result["without_time"]
    what = ("one of its evidence turns grounds one of the top-k memories" if plain["level"] == "turn" else
            "one of the top-k memories comes from a session holding its evidence (HaluMem and LongMemEval "
            "annotate evidence per point or session, not per turn: a coarser, session-level figure)")
    lines = [f"# Evidence recall@k: {result['benchmark']}", "",
             f"A retrieval-stack figure (extraction, embedder, store, ranking; no answer is generated): the share "
             f"of questions for which {what}. Data `{result['data']}`; "
             f"{plain['questions_without_evidence']} questions without evidence left out.", "",
             *_recall_rows(plain)]
    timed = result.get("with_time")
    if timed is None:
        return "\n".join(lines + ["", "Time-aware retrieval: not asked for (`--time-aware`).", ""])
    lines += ["", "Time-aware: only the memories holding at each question's time (the store's `as_of`: said "
                  "by then and not yet replaced), ranked the same way.", "",
              *_recall_rows(timed)]
    return "\n".join(lines + [""])


def _recall_rows(table: dict[str, Any]) -> list[str]:
    """A recall table as markdown rows: one per category, then all questions."""
    ks = table["ks"]
    lines = ["| Category | n | " + " | ".join(f"recall@{k}" for k in ks) + " |",
             "| --- | --- | " + " | ".join("---" for _ in ks) + " |"]
    for name, row in [*table["by_category"].items(), ("all", table["overall"])]:
        cells = ["-" if row[f"recall@{k}"] is None else f"{100 * row[f'recall@{k}']:.2f}" for k in ks]
        lines.append(f"| {name} | {row['n']} | " + " | ".join(cells) + " |")
    return lines
