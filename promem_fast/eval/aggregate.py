"""``promem eval aggregate``: a report recomputed from stored judge labels, without asking a judge again.

Two record formats are read, one JSON object per file:

- ours: a ``result-<kind>-<variant>.json`` written by ``promem eval`` (its ``labels``), or just its
  ``labels`` object (``{"integrity": [...], "accuracy": [...], "update": [...], "qa": [...]}``, HaluMem);
- HaluMem's own (MemTensor/HaluMem ``eval/evaluation.py``): the per-user files its evaluation caches, or
  its ``*_eval_stat_result.json``, with ``memory_integrity_records``, ``memory_accuracy_records``,
  ``memory_update_records`` and ``question_answering_records``.

Several files are pooled (HaluMem writes one per user). Every record is checked before anything is counted,
and a bad one stops with an :class:`~promem_fast.errors.InputError` naming the file, the record
(``memory_integrity_records[12]``) and the field. A grade that is present but unusable (``null``,
``"judge_failed"``, a score of 7) is not an error: the judge failed on that record, so it is counted as
*unscored*, as HaluMem's own aggregation counts it invalid, and the report shows the share.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promem_fast.errors import InputError

from . import metrics
from .judges import UPDATE_ROUTINGS, aggregate_halumem, aggregate_locomo, aggregate_longmemeval
from .provenance import code_version, data_files

PathLike = str | os.PathLike[str]

OFFICIAL_KEYS: dict[str, str] = {
    "integrity": "memory_integrity_records",
    "accuracy": "memory_accuracy_records",
    "update": "memory_update_records",
    "qa": "question_answering_records",
}
"""Our label group → the list holding it in HaluMem's record files."""

_Check = Callable[[Any], "str | None"]
"""A field check: None when the value is fine, else what is wrong with it."""


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) and value.strip() else "must be a non-empty string"


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _weight(value: Any) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return None if ok else "must be a finite number >= 0"


def _flag(value: Any) -> str | None:
    ok = value is None or isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false"))
    return None if ok else 'must be true, false, "true" or "false"'


def _grade(value: Any) -> str | None:
    """A judge's grade: any JSON scalar (an unusable one is counted as unscored, not refused)."""
    return None if value is None or isinstance(value, (bool, int, float, str)) else "must be a string, number or null"


def _category(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5
    return None if ok else "must be a LoCoMo category, 1 to 5"


def _gold(value: Any) -> str | None:
    ok = value is None or (isinstance(value, (int, float, str)) and not isinstance(value, bool))
    return None if ok else "must be a string, number or null"


_FIELDS: dict[tuple[str, str], dict[str, _Check]] = {
    ("halumem", "integrity"): {"memory_integrity_score": _grade, "memory_source": _text, "memory_type": _text,
                               "importance": _weight},
    ("halumem", "accuracy"): {"memory_accuracy_score": _grade, "is_included_in_golden_memories": _flag},
    ("halumem", "update"): {"memory_update_type": _grade, "memory_type": _text, "importance": _weight},
    ("halumem", "qa"): {"result_type": _grade, "question_type": _text},
    ("locomo", "qa"): {"category": _category, "prediction": _string, "answer": _gold, "llm_correct": _grade},
    ("longmemeval", "qa"): {"question_id": _text, "question_type": _text, "label": _grade},
}
"""Required fields of each benchmark's label groups, with their checks (``None`` values are caught by the
check when they are not allowed)."""

def _key_part(value: Any) -> str | None:
    ok = value is None or isinstance(value, (bool, int, float, str))
    return None if ok else "must be a string, number or null"


_OPTIONAL: dict[str, _Check] = {"is_update": _flag, "session_id": _key_part, "index": _key_part,
                                "memory_content": _key_part}
"""Fields checked when present (the last three identify a gold point for :func:`infer_routing`)."""

GROUPS: dict[str, tuple[str, ...]] = {"halumem": ("integrity", "accuracy", "update", "qa"),
                                      "locomo": ("qa",), "longmemeval": ("qa",)}


@dataclass
class LabelSet:
    """The labels of one benchmark pooled from one or more files, as :mod:`.metrics` aggregates them."""

    kind: str
    format: str
    """``promem`` (our result or labels) or ``halumem`` (HaluMem's record files)."""
    update_routing: str | None
    """HaluMem: how update points were judged (:data:`~.judges.UPDATE_ROUTINGS`); None otherwise."""
    labels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)


# ============================================================================================= reading
def _read_json(path: Path) -> Any:
    """The file's JSON document; a missing file, a directory or bad JSON is an error naming it."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a labels file", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", file=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg} (column {exc.colno})", file=str(path), line=exc.lineno) from None
    except RecursionError:
        raise InputError("not JSON this reader accepts: nested too deeply", file=str(path)) from None


def _check_rows(kind: str, group: str, rows: Any, path: Path, where: str) -> list[dict[str, Any]]:
    """``rows`` checked record by record: each an object with the group's required fields, well typed."""
    if not isinstance(rows, list):
        raise InputError("must be a list of records", file=str(path), field=where)
    fields = _FIELDS[(kind, group)]
    for i, row in enumerate(rows):
        name = f"{where}[{i}]"
        if not isinstance(row, dict):
            raise InputError("must be a JSON object", file=str(path), field=name)
        for key, check in fields.items():
            if key not in row:
                raise InputError("missing", file=str(path), field=f"{name}.{key}")
            problem = check(row[key])
            if problem is not None:
                raise InputError(f"{problem}, got {json.dumps(row[key], default=str)[:60]}", file=str(path),
                                 field=f"{name}.{key}")
        for key, check in _OPTIONAL.items():
            problem = check(row[key]) if key in row else None
            if problem is not None:
                raise InputError(problem, file=str(path), field=f"{name}.{key}")
        if "is_update" in row:  # HaluMem writes "True"/"False"; as a bool every consumer reads it alike
            row["is_update"] = _is_set(row["is_update"])
        if kind == "locomo" and row["category"] != 5 and row["answer"] is None:
            raise InputError(f"category {row['category']} needs a gold answer", file=str(path), field=f"{name}.answer")
    return rows


def _is_set(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def infer_routing(integrity: Sequence[dict[str, Any]], update: Sequence[dict[str, Any]]) -> str:
    """``both`` when some update point also has an integrity label (same session, index and text), else
    ``official`` (there an update point judged for its update never reaches the integrity judge). Used for
    labels that do not say: a bare labels object, or a result written before the routing was recorded."""
    judged = {(r.get("session_id"), r.get("index"), r.get("memory_content")) for r in integrity
              if _is_set(r.get("is_update"))}
    return "both" if any((r.get("session_id"), r.get("index"), r.get("memory_content")) in judged
                         for r in update) else "official"


def read_labels(path: PathLike) -> LabelSet:
    """The labels of one file, in either format (see the module docstring), every record checked."""
    path = Path(path)
    doc = _read_json(path)
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object (a promem result, its labels, or HaluMem's records)",
                         file=str(path))
    if any(key in doc for key in OFFICIAL_KEYS.values()):
        labels = {g: _check_rows("halumem", g, doc.get(key, []), path, key) for g, key in OFFICIAL_KEYS.items()}
        return LabelSet("halumem", "halumem", "official", labels, [str(path)])
    if "labels" in doc:
        kind, groups, prefix = doc.get("kind"), doc["labels"], "labels."
        if kind not in GROUPS:
            raise InputError(f"must be one of {', '.join(GROUPS)}, got {json.dumps(kind)[:40]}", file=str(path),
                             field="kind")
    elif doc and set(doc) <= set(GROUPS["halumem"]):
        kind, groups, prefix = "halumem", doc, ""
    else:
        raise InputError("no judge labels found: expected a promem result (with 'labels'), its labels "
                         f"({', '.join(GROUPS['halumem'])}) or HaluMem's records ({', '.join(OFFICIAL_KEYS.values())})",
                         file=str(path))
    if not isinstance(groups, dict):
        raise InputError("must be an object of label lists", file=str(path), field="labels")
    labels = {g: _check_rows(kind, g, groups.get(g, []), path, prefix + g) for g in GROUPS[kind]}
    routing = None
    if kind == "halumem":
        config = doc.get("config")
        routing = config.get("update_routing") if isinstance(config, dict) else None
        routing = routing or infer_routing(labels["integrity"], labels["update"])
        if routing not in UPDATE_ROUTINGS:
            raise InputError(f"must be one of {', '.join(UPDATE_ROUTINGS)}", file=str(path),
                             field="config.update_routing")
    return LabelSet(kind, "promem", routing, labels, [str(path)])


def load_labels(paths: Sequence[PathLike]) -> LabelSet:
    """The labels of every file pooled (HaluMem writes one file per user); the files must be of one
    benchmark, and HaluMem ones judged with one update routing."""
    if not paths:
        raise InputError("no labels file given")
    pooled: LabelSet | None = None
    for path in paths:
        one = read_labels(path)
        if pooled is None:
            pooled = one
            continue
        for what in ("kind", "update_routing"):
            if getattr(one, what) != getattr(pooled, what):
                raise InputError(f"{what} {getattr(one, what)!r} differs from {getattr(pooled, what)!r} of "
                                 f"{pooled.sources[0]}: these labels cannot be pooled", file=str(path))
        for group, rows in one.labels.items():
            pooled.labels[group].extend(rows)
        pooled.sources.extend(one.sources)
        if one.format != pooled.format:
            pooled.format = "mixed"
    assert pooled is not None
    return pooled


# ============================================================================================= aggregating
def aggregate(labels: LabelSet) -> dict[str, Any]:
    """The aggregates of a label set, as ``promem eval`` computes them, plus (HaluMem) the same figures
    under the names of HaluMem's ``overall_score`` so the two can be compared key by key."""
    groups = labels.labels
    if labels.kind == "halumem":
        aggregates = aggregate_halumem(groups["integrity"], groups["accuracy"], groups["qa"], groups["update"],
                                       labels.update_routing or "official")
    elif labels.kind == "locomo":
        aggregates = aggregate_locomo(groups["qa"])
    else:
        aggregates = aggregate_longmemeval(groups["qa"])
    out: dict[str, Any] = {
        "kind": labels.kind, "format": labels.format, "sources": labels.sources,
        "update_routing": labels.update_routing, "counts": {g: len(rows) for g, rows in groups.items()},
        "headline": aggregates["headline"], "aggregates": aggregates,
        "provenance": {"code": code_version(), "labels": data_files(labels.sources)},
    }
    if labels.kind == "halumem":
        out["overall_score"] = halumem_overall_score(aggregates)
    return out


def halumem_overall_score(aggregates: dict[str, Any]) -> dict[str, Any]:
    """Our HaluMem aggregates under the keys of HaluMem's ``overall_score`` (``recall(all)``, …); a ratio
    over nothing is None where HaluMem's code would divide by zero."""
    ext = aggregates["extraction"] or {}
    i, a, u, q = ext.get("integrity", {}), ext.get("accuracy", {}), ext.get("update", {}), aggregates["qa"]
    update: dict[str, Any] = {}
    for name in ("correct", "hallucination", "omission", "other"):
        update[f"{name}_update_memory_ratio(all)"] = u.get(name)
        update[f"{name}_update_memory_ratio(valid)"] = u.get(f"{name}_valid")
    answers: dict[str, Any] = {}
    for name in ("correct", "hallucination", "omission"):
        answers[f"{name}_qa_ratio(all)"] = q[name]
        answers[f"{name}_qa_ratio(valid)"] = q[f"{name}_valid"]
    return {
        "memory_integrity": {
            "recall(all)": i.get("recall"), "recall(valid)": i.get("recall_valid"),
            "weighted_recall(all)": i.get("weighted_recall"), "weighted_recall(valid)": i.get("weighted_recall_valid"),
            "memory_valid_importance_sum": i.get("importance_valid_sum"),
            "memory_importance_sum": i.get("importance_sum"), "memory_valid_num": i.get("n_valid"),
            "memory_num": i.get("n")},
        "memory_accuracy": {
            "interference_accuracy(all)": i.get("false_memory_resistance"),
            "interference_accuracy(valid)": i.get("false_memory_resistance_valid"),
            "interference_memory_valid_num": i.get("n_interference_valid"),
            "interference_memory_num": i.get("n_interference"),
            "target_accuracy(all)": a.get("target_precision"),
            "target_accuracy(valid)": a.get("target_precision_valid"),
            "target_memory_valid_num": a.get("n_target_valid"), "target_memory_num": a.get("n_target"),
            "weighted_accuracy(all)": a.get("weighted_accuracy"),
            "weighted_accuracy(valid)": a.get("weighted_accuracy_valid"),
            "memory_valid_num": a.get("n_valid"), "memory_num": a.get("n")},
        # HaluMem's evaluation.py writes the paper's Mem. F1 under this key, from recall(all) and
        # target_accuracy(all)
        "memory_extraction_f1": metrics.halumem_memory_f1(i.get("recall"), a.get("target_precision")),
        "memory_update": {**update, "update_memory_valid_num": u.get("n_valid"), "update_memory_num": u.get("n")},
        "question_answering": {**answers, "qa_valid_num": q["n_valid"], "qa_num": q["n"]},
        "memory_type_accuracy": {
            t: {"memory_integrity_acc": row["integrity"], "memory_update_acc": row["update"],
                "total_num": row["n"], "memory_acc": row["accuracy"]}
            for t, row in ext.get("memory_type_accuracy", {}).items()},
    }


def render(result: dict[str, Any]) -> str:
    """The markdown report of an aggregated label set: the benchmark's score tables, without cost."""
    from .report import aggregate_sections

    sources = result["sources"]
    named = ", ".join(f"`{s}`" for s in sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
    routing = result["update_routing"]
    out = [f"# Judge labels aggregated: {result['kind']}", "",
           f"Recomputed from {named} ({result['format']} record format"
           + (f"; update points judged as `{routing}`: {UPDATE_ROUTINGS[routing]}" if routing else "")
           + "). Scores are percentages.", ""]
    for warning in result["aggregates"].get("warnings", []):
        out += [f"**Warning:** {warning}.", ""]
    out += aggregate_sections(result["kind"], {"label": "labels", "headline": {**result["headline"],
                                                                               "tokens_per_session": None},
                                               "aggregates": result["aggregates"]})
    return "\n".join(out)
