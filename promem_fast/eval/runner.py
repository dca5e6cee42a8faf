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
import os
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
from promem_fast.requests import Program
from promem_fast.store.evaluation import evaluation_index
from promem_fast.types import STAGES, MemoryGraph, RunStats, Session, StageStats

from . import metrics
from .datasets import LOADERS, load_benchmark
from .judges import (
    QA_JUDGES, UPDATE_ROUTINGS, accuracy_program, aggregate_halumem, aggregate_locomo, aggregate_longmemeval,
    integrity_program, point_labels, unjudged_qa_label, update_labels, update_program,
)
from .qa import Answer, RetrievalIndex, Source, answer_program, build_index, turn_units, with_stats
from .records import Benchmark, GoldMemory, Question

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

KINDS: tuple[str, ...] = tuple(LOADERS)
"""Benchmarks ``run_eval`` knows: halumem, locomo, longmemeval."""

VARIANTS: dict[str, str] = {
    "full": "ProMem (Full)",
    "no-cc": "w/o CC",
    "no-hv": "w/o HV",
    "no-da": "w/o DA",
    "no-rel": "w/o Rel",
    "one-off": "One-off Extract",
    "native-rag": "NativeRAG",
}
"""Variant name → its row label in the report, in the paper's row order (Table 2, then the baseline)."""

_SWITCH_OFF: dict[str, str] = {
    "no-cc": "completeness_check",
    "no-hv": "hallucination_verification",
    "no-da": "detail_anchoring",
    "no-rel": "relations",
}

TABLE6_STAGES: dict[str, str] = {"draft": "Initial Draft", "cc": "CC", "hv": "HV", "da": "DA", "rel": "REL"}
"""The paper's Table 6 columns. Other extraction stages (``compress``, when LLMLingua-2 runs) get a column
of their own only when a result has them, and always count in the total."""


def variant_config(config: EngineConfig, variant: str) -> EngineConfig:
    """``config`` with the variant's pipeline: ``full`` switches every module on (so the row means what its
    label says, whatever the config file had), ``no-*`` switches one off, ``one-off`` is the single-prompt
    baseline; ``native-rag`` extracts nothing and keeps the config as is."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    if variant == "native-rag":
        return config
    switches: dict[str, Any] = {"mode": "promem", "completeness_check": True, "hallucination_verification": True,
                                "detail_anchoring": True, "relations": True}
    if variant == "one-off":
        switches["mode"] = "one-off"
    elif variant in _SWITCH_OFF:
        switches[_SWITCH_OFF[variant]] = False
    return dataclasses.replace(config, pipeline=dataclasses.replace(config.pipeline, **switches)).validate()


def result_path(out_dir: PathLike, kind: str, variant: str) -> Path:
    return Path(out_dir) / f"result-{kind}-{variant}.json"


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


def _stage_key(name: str) -> tuple[int, str]:
    """Stages in pipeline order (:data:`~promem_fast.types.STAGES`), unknown ones after, by name."""
    return (STAGES.index(name) if name in STAGES else len(STAGES), name)


def extraction_cost(graphs: Sequence[MemoryGraph]) -> dict[str, Any]:
    """Per-stage tokens, calls and seconds per session (the paper's Table 6), from the graphs' statistics."""
    totals: dict[str, StageStats] = {}
    sessions = []
    for graph in graphs:
        row: dict[str, Any] = {}
        for name, st in graph.stats.stages.items():
            totals.setdefault(name, StageStats()).add(st)
            row[name] = {"tokens": st.tokens, "prompt_tokens": st.prompt_tokens,
                         "completion_tokens": st.completion_tokens, "calls": st.calls, "seconds": st.seconds}
        total = graph.stats.total()
        sessions.append({"session_id": graph.session_id, "mode": graph.mode, "stages": row,
                         "tokens": total.tokens, "calls": total.calls, "seconds": total.seconds})
    n = len(graphs)
    grand = StageStats()
    for st in totals.values():
        grand.add(st)
    order = sorted(totals, key=_stage_key)
    per_stage = {
        name: {"tokens": totals[name].tokens / n, "prompt_tokens": totals[name].prompt_tokens / n,
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
        "seconds_per_session": grand.seconds / n if n else None,
        "session_detail": sessions,
    }


def _stage_cost(stats: RunStats, name: str, items: int) -> dict[str, Any]:
    st = stats.stages.get(name, StageStats())
    return {"items": items, "calls": st.calls, "prompt_tokens": st.prompt_tokens,
            "completion_tokens": st.completion_tokens, "embedded_texts": st.embedded_texts,
            "seconds": st.seconds, "tokens_per_item": st.tokens / items if items else None}


# ============================================================================================= QA and judging
def _question_program(kind: str, question: Question, user: str, index: RetrievalIndex, source: Source,
                      ctx: RunContext) -> Program[tuple[Answer, dict[str, Any]]]:
    answer = yield from answer_program(question, user, index, ctx, source=source)
    label = yield from QA_JUDGES[kind](question, answer, ctx)
    return answer, label


def _question_job(kind: str, question: Question, user: str, index: RetrievalIndex, source: Source,
                  ctx: RunContext) -> Program[tuple[tuple[Answer, dict[str, Any]], RunStats]]:
    return with_stats(ctx, _question_program(kind, question, user, index, source, ctx))


def route_points(points: Sequence[GoldMemory], graph: MemoryGraph | None,
                 routing: str) -> tuple[list[GoldMemory], list[GoldMemory]]:
    """The gold points of one session for the integrity judge and for the update judge
    (:data:`~.judges.UPDATE_ROUTINGS`).

    ``official`` is HaluMem's ``process_user``: a point with ``is_update`` for which the system has memories
    goes to the update judge only, every other point to the integrity judge. The session's extracted
    entries are the memories the system has for the point (they are what the judges are shown).
    """
    updates = [p for p in points if p.is_update]
    if routing == "both":
        return list(points), updates
    if graph is None or not graph.nodes:
        return list(points), []
    return [p for p in points if not p.is_update], updates


def _extraction_job(session: Session, points: list[GoldMemory], graph: MemoryGraph | None, routing: str,
                    ctx: RunContext) -> Program[tuple[list[list[dict[str, Any]]], RunStats]]:
    """Integrity, accuracy and updates of one session's extraction, their requests in the same rounds."""
    for_integrity, for_update = route_points(points, graph, routing)
    return with_stats(ctx, gather(integrity_program(session, for_integrity, graph, ctx),
                                  accuracy_program(session, points, graph, ctx),
                                  update_program(session, for_update, graph, ctx)))


def judged_sessions(bench: Benchmark) -> Iterator[tuple[Session, list[GoldMemory]]]:
    """HaluMem sessions whose extraction is judged: those with gold points, distractor sessions left out
    (HaluMem-Long's inserted question-answer sessions carry no memory of the user)."""
    for user in bench.users:
        by_session = user.memory_points_by_session()
        for session in user.sessions:
            points = by_session.get(session.session_id, [])
            if points and not session.metadata.get("distractor"):
                yield session, points


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
                     index: RetrievalIndex, source: Source, update_routing: str = "official") -> _Judged:
    """Every question answered then graded, and (HaluMem with graphs) every session's extraction graded,
    as one engine run so all their requests of a kind share batches; update points are routed by
    ``update_routing`` (:func:`route_points`)."""
    out = _Judged()

    def programs() -> Iterator[tuple[tuple[str, Any], Callable[[RunContext], Program[Any]]]]:
        for user in bench.users:
            for q in user.questions:
                yield ("qa", q), partial(_question_job, kind, q, user.name, index, source)
        if kind == "halumem" and graphs is not None:
            for session, points in judged_sessions(bench):
                yield ("extraction", (session, points)), partial(
                    _extraction_job, session, points, graphs.get(session.session_id), update_routing)

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
            session, points = item
            out.judged_sessions += 1
            if failed:
                log.error("judging the extraction of session %s failed: %s", session.session_id, error)
                for_integrity, for_update = route_points(points, graphs.get(session.session_id) if graphs else None,
                                                         update_routing)
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
             update_routing: str = "official") -> dict[str, Any]:
    """Evaluate one variant on one benchmark and return the result (also written to
    ``OUT/result-<kind>-<variant>.json``); the report of ``OUT`` is rebuilt with it.

    ``limit``: the first N items; ``sessions``: the first N sessions of each (the questions that stay are
    those :meth:`~promem_fast.eval.records.Benchmark.first_sessions` keeps);
    ``graphs_path``: a graphs JSONL to reuse and extend (default ``OUT/graphs-<kind>-<variant>.jsonl``);
    ``llm``: a chat backend to use instead of the configured one (tests inject a deterministic one);
    ``update_routing``: which judges HaluMem's update points go to (:data:`~.judges.UPDATE_ROUTINGS`).
    """
    kind = kind.lower()
    if kind not in KINDS:
        raise ConfigError(f"unknown benchmark {kind!r}; choose one of: {', '.join(KINDS)}")
    if update_routing not in UPDATE_ROUTINGS:
        raise ConfigError(f"unknown update routing {update_routing!r}; choose one of: {', '.join(UPDATE_ROUTINGS)}")
    cfg = variant_config(config, variant)
    # a compressed run is a row of its own, like the paper's LightMem r = 0.4 / 0.6 / 0.8 rows
    tag = f"{variant}-r{cfg.compression.rate:g}" if cfg.compression.enabled and variant != "native-rag" else variant
    bench = load_benchmark(kind, data_path, limit, sessions=sessions)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source: Source = "turns" if variant == "native-rag" else "memory"
    graphs_file = None if source == "turns" else Path(graphs_path or out / f"graphs-{kind}-{tag}.jsonl")

    with Engine(cfg, llm=llm) as engine:
        graphs: dict[str, MemoryGraph] | None = None
        if graphs_file is None:
            index = build_index(engine, {s.session_id: turn_units(s) for s in bench.iter_sessions()})
        else:
            graphs = extract_graphs(engine, bench, graphs_file)
            index = evaluation_index(engine, graphs.values(), out / f"store-{kind}-{tag}.db")
        judged = answer_and_judge(engine, kind, bench, graphs, index, source, update_routing)

    if kind == "halumem":
        aggregates = aggregate_halumem(judged.integrity, judged.accuracy, judged.qa, judged.update, update_routing)
    elif kind == "locomo":
        aggregates = aggregate_locomo(judged.qa)
    else:
        aggregates = aggregate_longmemeval(judged.qa)
    ordered = [graphs[s.session_id] for s in bench.iter_sessions() if graphs and s.session_id in graphs]
    cost = extraction_cost(ordered) if graphs is not None else None
    eval_stats = RunStats()
    eval_stats.merge(index.stats)
    eval_stats.merge(judged.stats)
    judge_items = len(judged.qa) + len(judged.integrity) + len(judged.accuracy) + len(judged.update)
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
                   "failed_answers": sum(a.prediction is None for a in judged.answers),
                   "failed_eval_steps": eval_stats.counts.get("failed_steps", 0)},
        "config": {
            "pipeline": {k: getattr(cfg.pipeline, k) for k in ("mode", "completeness_check",
                         "hallucination_verification", "detail_anchoring", "relations", "tau_comp")},
            "qa_top_k": cfg.qa_top_k,
            "update_routing": update_routing if kind == "halumem" else None,
            "llm": {"backend": cfg.llm.backend, "model": cfg.llm.model},
            "qa_llm": {"backend": cfg.llm_for("qa").backend, "model": cfg.llm_for("qa").model},
            "judge_llm": {"backend": cfg.llm_for("judge").backend, "model": cfg.llm_for("judge").model},
            "embedder": {"backend": cfg.embedder.backend, "model": cfg.embedder.model},
            "nli": {"backend": cfg.nli.backend, "model": cfg.nli.model},
        },
        "headline": {**aggregates["headline"],
                     "tokens_per_session": None if cost is None else cost["tokens_per_session"]},
        "aggregates": aggregates,
        "cost": {
            "extraction": cost,
            "evaluation": {"qa": _stage_cost(eval_stats, "qa", len(judged.qa)),
                           "judge": _stage_cost(eval_stats, "judge", judge_items)},
        },
        "labels": {"integrity": judged.integrity, "accuracy": judged.accuracy, "update": judged.update,
                   "qa": judged.qa},
        "answers": [a.to_dict() for a in judged.answers],
        "eval_failures": eval_stats.to_dict()["failures"],
        "files": files,
    }
    result_file.write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
    write_report(out, kind)
    log.info("wrote %s and %s", files["result"], files["report"])
    return result



# ============================================================================================= the report
def load_results(out_dir: PathLike, kind: str) -> list[dict[str, Any]]:
    """Every ``result-<kind>-*.json`` of ``out_dir``, in the report's row order (:data:`VARIANTS`)."""
    results = []
    for path in sorted(Path(out_dir).glob(f"result-{kind}-*.json")):
        results.append(json.loads(path.read_text(encoding="utf-8")))
    rank = {name: i for i, name in enumerate(VARIANTS)}
    return sorted(results, key=lambda r: (rank.get(r["variant"], len(rank)), r.get("compression_rate") or 2.0,
                                          r["variant"]))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _kilo(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value / 1000:.{digits}f}K"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def _model_name(result: dict[str, Any], key: str) -> str:
    """``backend`` or ``backend model`` of one of a result's models (``-`` when the result does not say)."""
    model = result.get("config", {}).get(key)
    if not model:
        return "-"
    return model["backend"] if not model.get("model") else f"{model['backend']} {model['model']}"


def _runs_table(results: Sequence[dict[str, Any]]) -> list[str]:
    rows = []
    for r in results:
        c = r["counts"]
        rows.append([r["label"], str(c["users"]), str(c["sessions"]), str(c["questions"]), str(c["graphs"]),
                     str(c["failed_answers"]), str(c["failed_eval_steps"]), _model_name(r, "llm"),
                     _model_name(r, "qa_llm"), _model_name(r, "judge_llm")])
    return _table(["Method", "Users", "Sessions", "Questions", "Graphs", "Failed answers", "Failed eval steps",
                   "Extraction LLM", "QA LLM", "Judge"], rows)


def _cost_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """The paper's Table 6: extraction tokens per session by stage (with its share), calls and seconds."""
    extra = {s for r in results if r["cost"]["extraction"] for s in r["cost"]["extraction"]["per_session"]}
    stages = sorted(set(TABLE6_STAGES) | extra, key=_stage_key)
    rows = []
    for r in results:
        cost = r["cost"]["extraction"]
        if cost is None:
            rows.append([r["label"]] + ["-"] * (len(stages) + 3))
            continue
        cells = []
        for stage in stages:
            st = cost["per_session"].get(stage)
            cells.append("-" if st is None else
                         f"{_kilo(st['tokens'], 3)} ({_pct(st['share'])}%)")
        rows.append([r["label"], *cells, _kilo(cost["tokens_per_session"]), _num(cost["calls_per_session"]),
                     _num(cost["seconds_per_session"])])
    names = [TABLE6_STAGES.get(s, s.upper() if len(s) <= 3 else s.capitalize()) for s in stages]
    return _table(["Method", *names, "Total", "LLM calls", "Seconds"], rows)


def _eval_cost_table(results: Sequence[dict[str, Any]]) -> list[str]:
    rows = []
    for r in results:
        qa, judge = r["cost"]["evaluation"]["qa"], r["cost"]["evaluation"]["judge"]
        rows.append([r["label"], str(qa["items"]), str(qa["calls"]), _num(qa["tokens_per_item"], 1),
                     str(judge["items"]), str(judge["calls"]), _num(judge["tokens_per_item"], 1)])
    return _table(["Method", "Questions", "QA calls", "QA tokens / question", "Judged items", "Judge calls",
                   "Judge tokens / item"], rows)


def _update_cells(update: dict[str, Any] | None) -> list[str]:
    """The update columns of the extraction table (``-`` for a result written before updates were judged)."""
    if update is None:
        return ["-"] * 4
    return [f"{update['n_valid']}/{update['n']}", _pct(update["correct"]), _pct(update["hallucination"]),
            _pct(update["omission"])]


def _routing_note(results: Sequence[dict[str, Any]]) -> str:
    """How the results' update points were judged (results written before the choice existed judged them
    ``both`` ways)."""
    used = sorted({_update_routing(r) for r in results if r["aggregates"]["extraction"] is not None})
    return " ".join(f"Update points judged as `{name}`: {UPDATE_ROUTINGS[name]}." for name in used)


def _update_routing(result: dict[str, Any]) -> str:
    return result["aggregates"].get("update_routing") or "both"


def _type_accuracy_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """HaluMem's type-wise accuracy: per memory type, integrity hits + correct updates over its points."""
    tables = [(r["aggregates"]["extraction"] or {}).get("memory_type_accuracy") or {} for r in results]
    rows = []
    for mtype in sorted({t for table in tables for t in table}):
        cells = []
        for table in tables:
            row = table.get(mtype)
            cells.append("-" if row is None else f"{_pct(row['accuracy'])} = {_pct(row['integrity'])} + "
                                                 f"{_pct(row['update'])} (n {row['n']})")
        rows.append([mtype, *cells])
    return _table(["Memory type", *(r["label"] for r in results)], rows)


_JUDGES = ("integrity", "accuracy", "update", "qa")


def _unscored_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """Per judge, the records without a usable grade: count of all and share (``-`` for older results and
    judges with nothing to grade)."""
    rows = []
    for r in results:
        table = r["aggregates"].get("unscored") or {}
        cells = []
        for judge in _JUDGES:
            row = table.get(judge)
            cells.append("-" if not row or not row["n"] else f"{row['unscored']}/{row['n']} ({_pct(row['share'])}%)")
        rows.append([r["label"], *cells])
    return _table(["Method", "Integrity judge", "Accuracy judge", "Update judge", "QA judge"], rows)


def _halumem_sections(results: Sequence[dict[str, Any]], cost: bool = True) -> list[str]:
    heads = [r["headline"] for r in results]
    out = ["## Table 1: memory extraction and QA", ""]
    out += _table(["Method", "Mem. Integrity", "Mem. Accuracy", "Mem. F1", "QA Accuracy", "# Tokens"],
                  [[r["label"], _pct(h["memory_integrity"]), _pct(h["memory_accuracy"]), _pct(h["memory_f1"]),
                    _pct(h["qa_accuracy"]), _kilo(h["tokens_per_session"])]
                   for r, h in zip(results, heads, strict=True)])
    out += ["## Table 2: ablation", ""]
    out += _table(["Method", "Mem. Int.", "Mem. Acc.", "QA Acc.", "QA Halu.", "QA Om."],
                  [[r["label"], _pct(h["memory_integrity"]), _pct(h["memory_accuracy"]), _pct(h["qa_accuracy"]),
                    _pct(h["qa_hallucination"]), _pct(h["qa_omission"])]
                   for r, h in zip(results, heads, strict=True)])
    if cost:
        out += ["## Table 6: extraction cost per session", ""]
        out += _cost_table(results)
    out += ["## Extraction in detail", "",
            "Recall counts gold points scored 2; weighted recall gives 1 point half credit and weights by "
            "importance; false-memory resistance is the share of planted interference points scored 0 "
            "(not absorbed). Target precision averages half-scores over entries the judge matched to a gold "
            "point; weighted accuracy over all entries. Update points (a value that changed) are graded "
            "Correct (the new value is kept), Hallucination (a wrong value) or Omission (the new value is "
            "missing), as shares of all update points. " + _routing_note(results), ""]
    rows = []
    for r in results:
        ext = r["aggregates"]["extraction"]
        if ext is None:
            rows.append([r["label"]] + ["-"] * 12)
            continue
        i, a = ext["integrity"], ext["accuracy"]
        rows.append([r["label"], f"{i['n_valid']}/{i['n']}", _pct(i["recall"]), _pct(i["weighted_recall"]),
                     f"{i['n_interference']}", _pct(i["false_memory_resistance"]),
                     f"{a['n_target']}/{a['n']}", _pct(a["target_precision"]), _pct(a["weighted_accuracy"]),
                     *_update_cells(ext.get("update"))])
    out += _table(["Method", "Gold points (valid/all)", "Recall", "Weighted recall", "Interference points",
                   "False-memory resistance", "Target entries/all", "Target precision", "Weighted accuracy",
                   "Update points (valid/all)", "Update correct", "Update halu.", "Update om."], rows)
    types = sorted({t for r in results for t in r["aggregates"]["qa"]["by_question_type"]})
    out += ["## QA by question type (Acc. / Halu. / Om.)", ""]
    rows = []
    for qtype in types:
        cells = []
        for r in results:
            g = r["aggregates"]["qa"]["by_question_type"].get(qtype)
            cells.append("-" if g is None else
                         f"{_pct(g['correct'])} / {_pct(g['hallucination'])} / {_pct(g['omission'])}")
        rows.append([qtype, *cells])
    out += _table(["Question type", *(r["label"] for r in results)], rows)
    out += ["## Type-wise accuracy (accuracy = integrity + update)", "",
            ("As HaluMem counts it: per memory type, the points scored 2 by the integrity judge (planted "
             "interference points included) plus the update points graded Correct, over all those points."), ""]
    out += _type_accuracy_table(results)
    out += ["## Judge records without a usable grade", "",
            (f"A failed or unparsable grade counts as a miss in the figures above; past "
             f"{100 * metrics.UNSCORED_WARN_SHARE:g}% of a judge's records the report warns."), ""]
    out += _unscored_table(results)
    return out


def _locomo_sections(results: Sequence[dict[str, Any]], cost: bool = True) -> list[str]:
    out = ["## Table 1: QA (categories 1-4; adversarial questions are in the per-category tables)", ""]
    out += _table(["Method", "LLM-judge Acc.", "F1", "Acc. (all 5)", "F1 (all 5)", "# Tokens"],
                  [[r["label"], _pct(h["llm_accuracy"]), _pct(h["f1"]), _pct(h["llm_accuracy_all"]),
                    _pct(h["f1_all"]), _kilo(h["tokens_per_session"])]
                   for r, h in ((r, r["headline"]) for r in results)])
    order = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")  # the paper's column order
    present = [c for c in order if any(c in r["aggregates"]["by_category"] for r in results)]
    for title, key in (("LLM-judge accuracy", "accuracy"), ("F1", "f1")):
        out += [f"## Per category: {title}", ""]
        rows = []
        for category in present:
            n = next(r["aggregates"]["by_category"][category]["n"] for r in results
                     if category in r["aggregates"]["by_category"])
            rows.append([category, str(n), *(_pct(r["aggregates"]["by_category"].get(category, {}).get(key))
                                               for r in results)])
        out += _table(["Category", "n", *(r["label"] for r in results)], rows)
    if cost:
        out += ["## Table 6: extraction cost per session", ""]
        out += _cost_table(results)
    return out


def _longmemeval_sections(results: Sequence[dict[str, Any]], cost: bool = True) -> list[str]:
    out = ["## Table 1: QA", ""]
    out += _table(["Method", "Accuracy", "Task avg.", "Abstention", "# Tokens"],
                  [[r["label"], _pct(h["accuracy"]), _pct(h["task_average"]), _pct(h["abstention"]),
                    _kilo(h["tokens_per_session"])] for r, h in ((r, r["headline"]) for r in results)])
    types = sorted({t for r in results for t in r["aggregates"]["by_type"]})
    rows = []
    for qtype in types:
        n = next(r["aggregates"]["by_type"][qtype]["n"] for r in results if qtype in r["aggregates"]["by_type"])
        rows.append([qtype, str(n), *(_pct(r["aggregates"]["by_type"].get(qtype, {}).get("accuracy"))
                                      for r in results)])
    abstention = [r["aggregates"]["abstention"] for r in results]
    rows.append(["abstention (any type)", str(max(a["n"] for a in abstention)), *(_pct(a["accuracy"])
                                                                                   for a in abstention)])
    out += ["## Per question type: accuracy", ""]
    out += _table(["Question type", "n", *(r["label"] for r in results)], rows)
    if cost:
        out += ["## Table 6: extraction cost per session", ""]
        out += _cost_table(results)
    return out


_TITLES = {"halumem": "HaluMem", "locomo": "LoCoMo", "longmemeval": "LongMemEval"}
_SECTIONS = {"halumem": _halumem_sections, "locomo": _locomo_sections, "longmemeval": _longmemeval_sections}
HEADLINE_METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "halumem": (("Mem. Int.", "memory_integrity"), ("Mem. Acc.", "memory_accuracy"), ("Mem. F1", "memory_f1"),
                ("QA Acc.", "qa_accuracy"), ("QA Halu.", "qa_hallucination"), ("QA Om.", "qa_omission")),
    "locomo": (("LLM-judge Acc.", "llm_accuracy"), ("F1", "f1")),
    "longmemeval": (("Accuracy", "accuracy"), ("Task avg.", "task_average"), ("Abstention", "abstention")),
}
"""Per benchmark, the headline scores (label, key of ``result["headline"]``) the chart and the CLI show."""


def aggregate_sections(kind: str, result: dict[str, Any]) -> list[str]:
    """The score sections of one result's report, without the cost tables: what ``promem eval aggregate``
    can recompute from judge labels alone (``result`` needs ``label``, ``headline`` and ``aggregates``)."""
    return _SECTIONS[kind]([result], cost=False)


def _subset(result: dict[str, Any]) -> str:
    """How much of the benchmark a result covers, e.g. "(first 2 items, first 3 sessions of each)" after a
    space; the session limit is read with ``get`` since results written before it existed lack it."""
    parts = []
    if result["limit"] is not None:
        parts.append(f"first {result['limit']} items")
    if result.get("session_limit") is not None:
        parts.append(f"first {result['session_limit']} sessions of each")
    return f" ({', '.join(parts)})" if parts else ""


def render_report(kind: str, results: Sequence[dict[str, Any]], chart: str | None) -> str:
    """The markdown report of ``results`` (all variants of one benchmark)."""
    first = results[0]
    out = [f"# Evaluation report: {_TITLES[kind]}", "",
           f"Benchmark `{first['benchmark']}` from `{first['data']}`{_subset(first)}"
           + f"; variants: {', '.join(r['variant'] for r in results)}. Scores are percentages; `# Tokens` "
             "and Table 6 count extraction tokens (prompt + completion) per session; `-` marks a number the "
             "variant cannot have (NativeRAG extracts nothing).", ""]
    if len({(r["data"], r["limit"], r.get("session_limit")) for r in results}) > 1:
        out += ["**Warning:** these results come from different data files or limits, so their rows are not "
                "comparable: " + "; ".join(f"{r['variant']}: `{r['data']}` limit {r['limit']} session limit "
                                           f"{r.get('session_limit')}" for r in results), ""]
    if len({(_model_name(r, "qa_llm"), _model_name(r, "judge_llm")) for r in results}) > 1:
        out += ["**Warning:** these results were answered or graded by different models, so their scores are not "
                "comparable (see the QA LLM and Judge columns below).", ""]
    if kind == "halumem" and len({_update_routing(r) for r in results if r["aggregates"]["extraction"]}) > 1:
        out += [("**Warning:** these results judged update points in different ways, so their recall and update "
                 "figures are not comparable (see Extraction in detail)."), ""]
    for r in results:
        for warning in r["aggregates"].get("warnings", []):
            out += [f"**Warning:** {r['label']}: {warning}.", ""]
    out += ["## Runs", ""]
    out += _runs_table(results)
    out += _SECTIONS[kind](results)
    out += ["## Evaluation cost (answering and judging)", ""]
    out += _eval_cost_table(results)
    if chart is not None:
        out += ["## Variants compared", "", f"![Variants compared]({chart})", ""]
    return "\n".join(out)


def plot_variants(kind: str, results: Sequence[dict[str, Any]], path: Path) -> Path:
    """A grouped bar chart of the headline scores per variant, next to the extraction tokens per session."""
    from promem_fast.backends._deps import require

    require("matplotlib", "eval", "matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics = HEADLINE_METRICS[kind]
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    scores, tokens = fig.subplots(1, 2, width_ratios=[3, 1])
    width = 0.8 / max(len(results), 1)
    for i, r in enumerate(results):
        values = [float("nan") if r["headline"][key] is None else 100 * r["headline"][key] for _, key in metrics]
        scores.bar([m + (i - (len(results) - 1) / 2) * width for m in range(len(metrics))], values, width,
                   label=r["label"])
    scores.set_xticks(range(len(metrics)), [name for name, _ in metrics])
    scores.set_ylabel("%")
    scores.set_ylim(0, 118)  # headroom above 100 for the legend
    scores.set_yticks(range(0, 101, 20))
    scores.set_title(f"{_TITLES[kind]}: scores by variant")
    scores.legend(fontsize="small", ncols=min(len(results), 4))
    per_session = [r["headline"]["tokens_per_session"] for r in results]
    tokens.bar(range(len(results)), [float("nan") if t is None else t / 1000 for t in per_session],
               color=[f"C{i}" for i in range(len(results))])
    tokens.set_xticks(range(len(results)), [r["label"] for r in results], rotation=30, ha="right")
    tokens.set_ylabel("K tokens per session")
    tokens.set_title("Extraction cost")
    fig.savefig(path, dpi=110)
    return path


def write_report(out_dir: PathLike, kind: str) -> Path:
    """Rebuild ``report-<kind>.md`` and ``variants-<kind>.png`` from every result of ``kind`` in ``out_dir``."""
    out = Path(out_dir)
    results = load_results(out, kind)
    if not results:
        raise ConfigError(f"no result-{kind}-*.json in {out} to report on")
    chart = plot_variants(kind, results, out / f"variants-{kind}.png")
    path = out / f"report-{kind}.md"
    path.write_text(render_report(kind, results, chart.name), encoding="utf-8")
    return path
