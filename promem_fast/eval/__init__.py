"""Evaluation on the paper's benchmarks (HaluMem, LoCoMo, LongMemEval): loaders, records and metrics.

Only light modules are imported here; the one optional library (``nltk``, for LoCoMo's stemmed F1) is
imported when a LoCoMo score is first computed.
"""

from __future__ import annotations

from .datasets import LOCOMO_CATEGORIES, load_benchmark, load_halumem, load_locomo, load_longmemeval
from .benchmark import Benchmark, EvalUser, GoldMemory, Question

__all__ = [
    "LOCOMO_CATEGORIES",
    "Benchmark",
    "EvalUser",
    "GoldMemory",
    "Question",
    "load_benchmark",
    "load_halumem",
    "load_locomo",
    "load_longmemeval",
]
