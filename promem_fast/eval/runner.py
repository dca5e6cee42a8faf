"""One evaluation run: extract (or reuse) graphs, answer, judge, aggregate, write the result and the report.

``run_eval("halumem", path, config, variant="no-cc", out_dir=OUT)`` does, in order:

1. load the benchmark (:func:`~promem_fast.eval.datasets.load_benchmark`);
2. apply the variant to the config (:func:`variant_config`; the paper's Table 2 rows and NativeRAG);
3. extract every session's graph into ``OUT/graphs-<kind>-<variant>.jsonl`` (or the given graphs file),
   skipping sessions already in it, as ``promem extract --resume`` does; NativeRAG extracts nothing;
4. put every session's graph into a memory store (``OUT/store-<kind>-<variant>.db``) and read its QA units
   back, so evaluation retrieves through the store as its users do (NativeRAG embeds raw turns instead),
   then answer and judge every question and (HaluMem) judge every session's extraction (integrity,
   accuracy, updates), all in one batched engine run;
5. aggregate with :mod:`.metrics` and write ``OUT/result-<kind>-<variant>.json`` (every raw label, the
   aggregates, the per-stage cost of every session) and rebuild ``OUT/report-<kind>.md`` plus
   ``OUT/variants-<kind>.png`` from all the variant results present in ``OUT`` (:func:`write_report`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from promem_fast.backends.base import LLMBackend
from promem_fast.config import EngineConfig
from promem_fast.context import RunContext
from promem_fast.engine import Engine
from promem_fast.errors import ConfigError
from promem_fast.io import GraphWriter, read_graphs
from promem_fast.pipeline.common import gather
from promem_fast.private import private_dirs, write_private
from promem_fast.requests import Program
from promem_fast.eval.store_index import evaluation_index
from promem_fast.types import MemoryGraph, RunStats, Session, StageStats
from promem_fast.store.qa import Answer, RetrievalIndex, Source, answer_program, build_index, turn_units, with_stats

from .datasets import load_benchmark
from .judge_prompts import OWN, JudgePrompts, judge_prompts
from .judges import (
    QA_JUDGES,
    accuracy_program,
    aggregate_halumem,
    aggregate_locomo,
    aggregate_longmemeval,
    integrity_program,
    point_labels,
    unjudged_qa_label,
    update_labels,
    update_program,
)
from .provenance import provenance
from .benchmark import Benchmark, EvalUser, GoldMemory, Question
from .report import write_report
from .split import apply_tau, select_users
from .updates import UPDATE_ROUTINGS, has_memories, history, route_points, update_inputs
from .variants import KINDS, VARIANTS, PathLike, result_path, stage_key, variant_config

log = logging.getLogger(__name__)


# ============================================================================================= extraction
def extract_graphs(engine: Engine, bench: Benchmark, path: Path) -> dict[str, MemoryGraph]:
    """The graph of every session of ``bench``, extracting only those not yet in ``path`` (appended and
    flushed one by one, so an interrupted evaluation resumes where it stopped)."""
    config = engine.config
    writer = GraphWriter(path, resume=path.exists(), fsync=config.fsync, timings=config.record_timings)
    sessions = bench.sessions
    todo = [s for s in sessions if s.session_id not in writer.done]
    if len(todo) < len(sessions):
        log.info("%s: %d of %d sessions already extracted", path, len(sessions) - len(todo), len(sessions))
    try:
        for graph in engine.extract_stream(todo, total=len(todo)):
            writer.write(graph)
    finally:
        writer.close()
    wanted = {s.session_id for s in sessions}
    graphs = {g.session_id: g for g in read_graphs(path) if g.session_id in wanted}
    expected = "one-off" if config.pipeline.mode == "one-off" else "promem"
    odd = sorted(sid for sid, g in graphs.items() if g.mode != expected)
    if odd:
        log.warning("%s: %d graphs were extracted in another mode than %s (e.g. %s)", path, len(odd), expected,
                    odd[0])
    missing = len(wanted) - len(graphs)
    if missing:
        log.warning("%d sessions have no graph (extraction failed; see the log): their memory is empty", missing)
    return graphs


RECOVERY_COUNTS = ("cut_continued", "list_continuations", "continued_items", "retried_requests", "lists_left_full")
"""Run counters (all sessions together) of replies that were cut or full and what asking again brought back."""


def extraction_cost(graphs: Sequence[MemoryGraph]) -> dict[str, Any]:
    """Per-stage tokens, calls and seconds per session (the paper's Table 6), from the graphs' statistics,
    and the steps that failed (a reply that never parsed, a prompt too long), counted per stage."""
    totals: dict[str, StageStats] = {}
    failed: dict[str, int] = {}
    recovery = dict.fromkeys(RECOVERY_COUNTS, 0)
    sessions = []
    for graph in graphs:
        for failure in graph.stats.failures:
            failed[failure.stage] = failed.get(failure.stage, 0) + 1
        for key in RECOVERY_COUNTS:
            recovery[key] += graph.stats.counts.get(key, 0)
        row: dict[str, Any] = {}
        for name, st in graph.stats.stages.items():
            totals.setdefault(name, StageStats()).add(st)
            row[name] = {"tokens": st.tokens, "prompt_tokens": st.prompt_tokens,
                         "uncached_prefill_tokens": st.uncached_prefill_tokens,
                         "completion_tokens": st.completion_tokens, "calls": st.calls, "seconds": st.seconds}
        total = graph.stats.total()
        sessions.append({"session_id": graph.session_id, "mode": graph.mode, "stages": row,
                         "tokens": total.tokens, "calls": total.calls, "seconds": total.seconds,
                         "failed_steps": len(graph.stats.failures)})
    n = len(graphs)
    grand = StageStats()
    for st in totals.values():
        grand.add(st)
    order = sorted(totals, key=stage_key)
    per_stage = {
        name: {"tokens": totals[name].tokens / n, "prompt_tokens": totals[name].prompt_tokens / n,
               "uncached_prefill_tokens": totals[name].uncached_prefill_tokens / n,
               "completion_tokens": totals[name].completion_tokens / n, "calls": totals[name].calls / n,
               "seconds": totals[name].seconds / n,
               "share": totals[name].tokens / grand.tokens if grand.tokens else None}
        for name in order
    } if n else {}
    return {
        "sessions": n,
        "per_session": per_stage,
        "tokens_per_session": grand.tokens / n if n else None,
        "calls_per_session": grand.calls / n if n else None,
        "uncached_prefill_per_session": grand.uncached_prefill_tokens / n if n else None,
        "seconds_per_session": grand.seconds / n if n else None,
        "failed_steps": {name: failed[name] for name in sorted(failed, key=stage_key)},
        "cut_replies": {name: totals[name].cut_replies for name in order},
        "recovery": recovery,
        "session_detail": sessions,
    }


def _stage_cost(stats: RunStats, name: str, items: int) -> dict[str, Any]:
    st = stats.stages.get(name, StageStats())
    return {"items": items, "calls": st.calls, "prompt_tokens": st.prompt_tokens,
            "completion_tokens": st.completion_tokens, "embedded_texts": st.embedded_texts,
            "seconds": st.seconds, "tokens_per_item": st.tokens / items if items else None}


# ============================================================================================= QA and judging
def _question_program(kind: str, question: Question, user: str, index: RetrievalIndex, source: Source,
                      prompts: JudgePrompts, ctx: RunContext) -> Program[tuple[Answer, dict[str, Any]]]:
    answer = yield from answer_program(question, user, index, ctx, source=source)
    judge = QA_JUDGES[kind]
    label = yield from (judge(question, answer, ctx, prompts) if kind == "halumem" else judge(question, answer, ctx))
    return answer, label


def _question_job(kind: str, question: Question, user: str, index: RetrievalIndex, source: Source,
                  prompts: JudgePrompts, ctx: RunContext) -> Program[tuple[tuple[Answer, dict[str, Any]], RunStats]]:
    return with_stats(ctx, _question_program(kind, question, user, index, source, prompts, ctx))


def _extraction_program(session: Session, points: list[GoldMemory], graph: MemoryGraph | None,
                        index: RetrievalIndex, session_ids: list[str], routing: str, prompts: JudgePrompts,
                        ctx: RunContext) -> Program[list[list[dict[str, Any]]]]:
    """Integrity, accuracy and updates of one session's extraction: the update points' memories retrieved
    first (:mod:`.updates`), then the three judges' requests in the same rounds."""
    for_integrity, for_update, retrieved = yield from update_inputs(points, index, session_ids, routing)
    return (yield from gather(integrity_program(session, for_integrity, graph, ctx, prompts),
                              accuracy_program(session, points, graph, ctx, prompts),
                              update_program(session, for_update, retrieved, ctx, prompts)))


def _extraction_job(session: Session, points: list[GoldMemory], graph: MemoryGraph | None, index: RetrievalIndex,
                    session_ids: list[str], routing: str, prompts: JudgePrompts,
                    ctx: RunContext) -> Program[tuple[list[list[dict[str, Any]]], RunStats]]:
    return with_stats(ctx, _extraction_program(session, points, graph, index, session_ids, routing, prompts, ctx))


def judged_sessions(bench: Benchmark) -> Iterator[tuple[EvalUser, Session, list[GoldMemory]]]:
    """HaluMem sessions whose extraction is judged, with their user: those with gold points, distractor
    sessions left out (HaluMem-Long's inserted question-answer sessions carry no memory of the user)."""
    for user in bench.users:
        by_session = user.memory_points_by_session()
        for session in user.sessions:
            points = by_session.get(session.session_id, [])
            if points and not session.metadata.get("distractor"):
                yield user, session, points


@dataclasses.dataclass
class _Judged:
    answers: list[Answer] = dataclasses.field(default_factory=list)
    qa: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    integrity: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    accuracy: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    update: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stats: RunStats = dataclasses.field(default_factory=RunStats)
    judged_sessions: int = 0


def answer_and_judge(engine: Engine, kind: str, bench: Benchmark, graphs: dict[str, MemoryGraph] | None,
                     index: RetrievalIndex, source: Source, update_routing: str = "official",
                     prompts: JudgePrompts = OWN) -> _Judged:
    """Every question answered then graded, and (HaluMem with graphs) every session's extraction graded,
    as one engine run so all their requests of a kind share batches; update points are routed by
    ``update_routing`` (:func:`~.updates.route_points`); HaluMem's judges use ``prompts``."""
    out = _Judged()

    def programs() -> Iterator[tuple[tuple[str, Any], Callable[[RunContext], Program[Any]]]]:
        for user in bench.users:
            for q in user.questions:
                about = q.metadata.get("about", user.name)  # LoCoMo: the speaker the question names
                yield ("qa", q), partial(_question_job, kind, q, about, index, source, prompts)
        if kind == "halumem" and graphs is not None:
            for user, session, points in judged_sessions(bench):
                ids = history(user, session.session_id)
                yield ("extraction", (session, points, has_memories(index, ids))), partial(
                    _extraction_job, session, points, graphs.get(session.session_id), index, ids, update_routing,
                    prompts)

    for (what, item), outcome in engine.run(programs()):
        failed = isinstance(outcome, BaseException)
        error = f"{type(outcome).__name__}: {outcome}" if failed else None
        if what == "qa":
            if failed:
                log.error("question %s failed: %s", item.question_id, error)
                out.answers.append(Answer(item.question_id, item.question, item.question_type, item.answer,
                                          None, source, error=error))
                out.qa.append(unjudged_qa_label(kind, item, str(error)))
                continue
            (answer, label), stats = outcome
            out.answers.append(answer)
            out.qa.append(label)
        else:
            session, points, remembered = item
            out.judged_sessions += 1
            if failed:
                log.error("judging the extraction of session %s failed: %s", session.session_id, error)
                for_integrity, for_update = route_points(points, remembered, update_routing)
                out.integrity.extend({**b, "memory_integrity_score": None, "judge_reply": None, "error": error}
                                     for b in point_labels(session, for_integrity))
                out.update.extend({**b, "memory_update_type": None, "judge_reply": None, "error": error}
                                  for b in update_labels(session, for_update))
                continue
            (integrity, accuracy, update), stats = outcome
            out.integrity.extend(integrity)
            out.accuracy.extend(accuracy)
            out.update.extend(update)
        out.stats.merge(stats)
    return out


# ============================================================================================= the run
def run_eval(kind: str, data_path: PathLike, config: EngineConfig, *, limit: int | None = None,
             sessions: int | None = None, variant: str = "full", out_dir: PathLike = "eval-out",
             graphs_path: PathLike | None = None, llm: LLMBackend | None = None,
             update_routing: str = "official", judge_prompts_path: PathLike | None = None,
             users: str | None = None, tau_path: PathLike | None = None) -> dict[str, Any]:
    """Evaluate one variant on one benchmark and return the result (also written to
    ``OUT/result-<kind>-<variant>.json``); the report of ``OUT`` is rebuilt with it.

    ``limit``: the first N items; ``sessions``: the first N sessions of each (the questions that stay are
    those :meth:`~promem_fast.eval.benchmark.Benchmark.first_sessions` keeps);
    ``graphs_path``: a graphs JSONL to reuse and extend (default ``OUT/graphs-<kind>-<variant>.jsonl``);
    ``llm``: a chat backend to use instead of the configured one (tests inject a deterministic one);
    ``update_routing``: which judges HaluMem's update points go to (:data:`~.updates.UPDATE_ROUTINGS`);
    ``judge_prompts_path``: a checkout of the HaluMem repository whose official judge prompts grade the run
    (:mod:`.judge_prompts`; the project's own prompts when None); ``users``: ``START:END`` positions of the
    users to evaluate; ``tau_path``: a tau record of ``promem calibrate tau -o``, applied after checking it
    was calibrated for this embedder on other users (:mod:`.split`).
    """
    kind = _checked(kind.lower(), update_routing)
    prompts = judge_prompts(judge_prompts_path, kind)
    cfg = variant_config(config, variant)
    # a compressed run is a row of its own, like the paper's LightMem r = 0.4 / 0.6 / 0.8 rows
    tag = f"{variant}-r{cfg.compression.rate:g}" if cfg.compression.enabled and variant != "native-rag" else variant
    bench = select_users(load_benchmark(kind, data_path, limit, sessions=sessions), users)
    cfg, tau = apply_tau(cfg, tau_path, bench) if tau_path is not None else (cfg, None)
    out = private_dirs(out_dir)
    source: Source = "turns" if variant == "native-rag" else "memory"
    graphs_file = None if source == "turns" else Path(graphs_path or out / f"graphs-{kind}-{tag}.jsonl")

    with Engine(cfg, llm=llm) as engine:
        graphs: dict[str, MemoryGraph] | None = None
        if graphs_file is None:
            index = build_index(engine, {s.session_id: turn_units(s) for s in bench.iter_sessions()})
        else:
            graphs = extract_graphs(engine, bench, graphs_file)
            index = evaluation_index(engine, graphs.values(), out / f"store-{kind}-{tag}.db")
        judged = answer_and_judge(engine, kind, bench, graphs, index, source, update_routing, prompts)

    aggregates = _aggregates(kind, judged, update_routing)
    ordered = [graphs[s.session_id] for s in bench.iter_sessions() if graphs and s.session_id in graphs]
    cost = extraction_cost(ordered) if graphs is not None else None
    eval_stats = RunStats()
    eval_stats.merge(index.stats)
    eval_stats.merge(judged.stats)
    result_file = result_path(out, kind, tag)
    files = {"result": str(result_file), "report": str(out / f"report-{kind}.md"),
             "chart": str(out / f"variants-{kind}.png"), "graphs": None if graphs_file is None else str(graphs_file)}
    result: dict[str, Any] = {
        "kind": kind,
        "benchmark": bench.name,
        "variant": variant,
        "tag": tag,
        "label": VARIANTS[variant] + (f" (r={cfg.compression.rate:g})" if tag != variant else ""),
        "compression_rate": cfg.compression.rate if tag != variant else None,
        "data": str(data_path),
        "limit": limit,
        "session_limit": sessions,
        "counts": {**bench.counts(), "graphs": len(ordered), "judged_sessions": judged.judged_sessions,
                   "unembedded_sessions": len(index.failed),
                   "failed_answers": sum(a.prediction is None and a.abstained is None for a in judged.answers),
                   "abstained_answers": sum(a.abstained is not None for a in judged.answers),
                   "failed_eval_steps": eval_stats.counts.get("failed_steps", 0)},
        "config": {**_settings(cfg, update_routing if kind == "halumem" else None),
                   "judge_prompts": prompts.record(), "users": users, "tau_calibration": tau},
        "provenance": provenance(cfg, [data_path], judge_prompts=prompts.record()),
        "headline": {**aggregates["headline"],
                     "tokens_per_session": None if cost is None else cost["tokens_per_session"]},
        "aggregates": aggregates,
        "cost": {"extraction": cost, "evaluation": _evaluation_cost(eval_stats, judged)},
        "labels": {"integrity": judged.integrity, "accuracy": judged.accuracy, "update": judged.update,
                   "qa": judged.qa},
        "answers": [a.to_dict() for a in judged.answers],
        "eval_failures": eval_stats.to_dict()["failures"],
        "files": files,
    }
    write_private(result_file, json.dumps(result, ensure_ascii=False, indent=1))
    write_report(out, kind)
    log.info("wrote %s and %s", files["result"], files["report"])
    return result


def _checked(kind: str, update_routing: str) -> str:
    """``kind``, once it and the update routing are known names (a one-line error naming the choices)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown benchmark {kind!r}; choose one of: {', '.join(KINDS)}")
    if update_routing not in UPDATE_ROUTINGS:
        raise ConfigError(f"unknown update routing {update_routing!r}; choose one of: {', '.join(UPDATE_ROUTINGS)}")
    return kind


def _aggregates(kind: str, judged: _Judged, update_routing: str) -> dict[str, Any]:
    """The benchmark's own aggregates of the judged labels and answers."""
    if kind == "halumem":
        return aggregate_halumem(judged.integrity, judged.accuracy, judged.qa, judged.update, update_routing)
    if kind == "locomo":
        return aggregate_locomo(judged.qa)
    return aggregate_longmemeval(judged.qa)


def _settings(cfg: EngineConfig, update_routing: str | None) -> dict[str, Any]:
    """The settings a result is compared by: the pipeline switches, the update routing (HaluMem) and the
    model of each role."""
    return {
        "pipeline": {k: getattr(cfg.pipeline, k) for k in ("mode", "completeness_check",
                     "hallucination_verification", "detail_anchoring", "relations", "tau_comp")},
        "qa_top_k": cfg.qa_top_k,
        "update_routing": update_routing,
        "llm": {"backend": cfg.llm.backend, "model": cfg.llm.model},
        "qa_llm": {"backend": cfg.llm_for("qa").backend, "model": cfg.llm_for("qa").model},
        "judge_llm": {"backend": cfg.llm_for("judge").backend, "model": cfg.llm_for("judge").model},
        "embedder": {"backend": cfg.embedder.backend, "model": cfg.embedder.model},
        "nli": {"backend": cfg.nli.backend, "model": cfg.nli.model},
    }


def _evaluation_cost(stats: RunStats, judged: _Judged) -> dict[str, Any]:
    """What answering and judging cost, per answer and per judged item."""
    judge_items = len(judged.qa) + len(judged.integrity) + len(judged.accuracy) + len(judged.update)
    return {"qa": _stage_cost(stats, "qa", len(judged.qa)), "judge": _stage_cost(stats, "judge", judge_items)}
