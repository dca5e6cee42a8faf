"""The evaluation's variants (the paper's Table 2 rows and the NativeRAG baseline) and the names that the
runner and the report share: benchmark kinds, Table 6 stage columns, result file names."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from promem_fast.config import EngineConfig
from promem_fast.errors import ConfigError
from promem_fast.types import STAGES

from .datasets import LOADERS

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


def stage_key(name: str) -> tuple[int, str]:
    """Stages in pipeline order (:data:`~promem_fast.types.STAGES`), unknown ones after, by name."""
    return (STAGES.index(name) if name in STAGES else len(STAGES), name)
