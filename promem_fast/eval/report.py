"""The evaluation report: every variant's result in ``OUT`` as one markdown file and one chart.

Rows follow :data:`~promem_fast.eval.variants.VARIANTS` (the paper's order); each benchmark has its own
sections, shaped like the paper's tables, plus the cost of extraction (Table 6) and of evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promem_fast.errors import ConfigError
from promem_fast.private import open_private, write_private

from . import metrics
from .judges import UPDATE_ROUTINGS
from .provenance import describe
from .variants import TABLE6_STAGES, VARIANTS, PathLike, stage_key


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


def _judge_name(result: dict[str, Any]) -> str:
    """The judge's model and, when they were not the project's own, whose prompts it graded with."""
    prompts = result.get("config", {}).get("judge_prompts") or {"source": "promem_fast"}
    name = _model_name(result, "judge_llm")
    return name if prompts["source"] == "promem_fast" else f"{name} (HaluMem's prompts)"


def _runs_table(results: Sequence[dict[str, Any]]) -> list[str]:
    rows = []
    for r in results:
        c = r["counts"]
        rows.append([r["label"], str(c["users"]), str(c["sessions"]), str(c["questions"]), str(c["graphs"]),
                     str(c["failed_answers"]), str(c["failed_eval_steps"]), _model_name(r, "llm"),
                     _model_name(r, "qa_llm"), _judge_name(r)])
    return _table(["Method", "Users", "Sessions", "Questions", "Graphs", "Failed answers", "Failed eval steps",
                   "Extraction LLM", "QA LLM", "Judge"], rows)


def _cost_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """The paper's Table 6: extraction tokens per session by stage (with its share), calls, the prompt
    tokens a prefix cache would not serve (:mod:`promem_fast.prefix_cache`) and seconds."""
    extra = {s for r in results if r["cost"]["extraction"] for s in r["cost"]["extraction"]["per_session"]}
    stages = sorted(set(TABLE6_STAGES) | extra, key=stage_key)
    rows = []
    for r in results:
        cost = r["cost"]["extraction"]
        if cost is None:
            rows.append([r["label"]] + ["-"] * (len(stages) + 4))
            continue
        cells = []
        for stage in stages:
            st = cost["per_session"].get(stage)
            cells.append("-" if st is None else
                         f"{_kilo(st['tokens'], 3)} ({_pct(st['share'])}%)")
        rows.append([r["label"], *cells, _kilo(cost["tokens_per_session"]), _num(cost["calls_per_session"]),
                     _kilo(cost.get("uncached_prefill_per_session")),  # absent from older results
                     _num(cost["seconds_per_session"])])
    names = [TABLE6_STAGES.get(s, s.upper() if len(s) <= 3 else s.capitalize()) for s in stages]
    return _table(["Method", *names, "Total", "LLM calls", "Uncached prefill", "Seconds"], rows)


def _eval_cost_table(results: Sequence[dict[str, Any]]) -> list[str]:
    rows = []
    for r in results:
        qa, judge = r["cost"]["evaluation"]["qa"], r["cost"]["evaluation"]["judge"]
        rows.append([r["label"], str(qa["items"]), str(qa["calls"]), _num(qa["tokens_per_item"], 1),
                     str(judge["items"]), str(judge["calls"]), _num(judge["tokens_per_item"], 1)])
    return _table(["Method", "Questions", "QA calls", "QA tokens / question", "Judged items", "Judge calls",
                   "Judge tokens / item"], rows)


def _failed_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """Failed extraction steps per stage (all sessions together) and failed evaluation steps, per result."""
    stages = sorted({s for r in results for s in ((r["cost"]["extraction"] or {}).get("failed_steps") or {})},
                    key=stage_key)
    rows = []
    for r in results:
        cost = r["cost"]["extraction"]
        failed = (cost or {}).get("failed_steps")
        if cost is None or failed is None:  # NativeRAG, or a result written before they were counted
            rows.append([r["label"], *("-" for _ in stages), "-", str(r["counts"]["failed_eval_steps"])])
            continue
        rows.append([r["label"], *(str(failed.get(s, 0)) for s in stages), str(sum(failed.values())),
                     str(r["counts"]["failed_eval_steps"])])
    names = [TABLE6_STAGES.get(s, s.upper() if len(s) <= 3 else s.capitalize()) for s in stages]
    return _table(["Method", *names, "Extraction total", "Evaluation"], rows)


def _recovery_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """Replies cut by their token budget per stage, and what continuing them or full lists brought back."""
    costs = [(r["label"], r["cost"]["extraction"]) for r in results]
    stages = sorted({s for _, c in costs for s in ((c or {}).get("cut_replies") or {})}, key=stage_key)
    rows = []
    for label, cost in costs:
        if not cost or "recovery" not in cost:  # NativeRAG, or a result written before they were counted
            rows.append([label, *("-" for _ in stages), "-", "-", "-", "-"])
            continue
        got = cost["recovery"]
        rows.append([label, *(str(cost["cut_replies"].get(s, 0)) for s in stages),
                     str(got["cut_continued"] + got["list_continuations"]), str(got["continued_items"]),
                     str(got["retried_requests"]), str(got["lists_left_full"])])
    names = [f"Cut: {TABLE6_STAGES.get(s, s.upper() if len(s) <= 3 else s.capitalize())}" for s in stages]
    return _table(["Method", *names, "Asked again", "Items recovered", "Retried requests", "Left full"], rows)


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
    if len({(_model_name(r, "qa_llm"), _judge_name(r)) for r in results}) > 1:
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
    out += ["## Failed steps per stage", "",
            ("Steps the engine could not complete (a reply that never parsed within its attempts, a prompt that "
             "did not fit): each is recorded with its raw replies in the graph's `stats.failures` (extraction) "
             "or the result's `eval_failures` (answering and judging), and its session goes on without it."), ""]
    out += _failed_table(results)
    out += ["## Replies cut or full", "",
            ("Replies that ran out of their token budget (finish reason \"length\") per stage; lists asked again "
             "because their reply was cut or filled its item cap; the items only those requests brought in; "
             "requests sent again after an unusable reply; lists still full when asking had to stop."), ""]
    out += _recovery_table(results)
    out += ["## Provenance", ""]
    for r in results:
        out += [f"**{r['label']}**", ""] + (describe(r["provenance"]) if r.get("provenance") else
                                            ["- not recorded (a result written before provenance was kept)"])
        out += [""]
    if chart is not None:
        out += ["## Variants compared", "", f"![Variants compared]({chart})", ""]
    return "\n".join(out)


def plot_variants(kind: str, results: Sequence[dict[str, Any]], path: Path) -> Path:
    """A grouped bar chart of the headline scores per variant, next to the extraction tokens per session."""
    from promem_fast.deps import require

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
    with open_private(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    return path


def write_report(out_dir: PathLike, kind: str) -> Path:
    """Rebuild ``report-<kind>.md`` and ``variants-<kind>.png`` from every result of ``kind`` in ``out_dir``."""
    out = Path(out_dir)
    results = load_results(out, kind)
    if not results:
        raise ConfigError(f"no result-{kind}-*.json in {out} to report on")
    chart = plot_variants(kind, results, out / f"variants-{kind}.png")
    path = out / f"report-{kind}.md"
    write_private(path, render_report(kind, results, chart.name))
    return path
