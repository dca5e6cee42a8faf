"""Loaders of the three benchmarks the paper evaluates on (§4.1), each into a :class:`Benchmark`.

- HaluMem (Chen et al. 2025), the primary benchmark: gold memory points per session, so extraction
  itself can be judged (integrity, accuracy), plus QA.
- LoCoMo (Maharana et al. 2024): long peer-to-peer conversations with QA by category.
- LongMemEval (Wu et al. 2025): one question per haystack of user-assistant sessions.

Every malformed record raises :class:`~promem_fast.errors.InputError` naming the file, the line (JSONL)
or the record index inside the field path (JSON), the session and the field, so it can be found and fixed.
Nothing is silently skipped except what each loader's schema says is optional.

One module per benchmark (:mod:`.halumem`, :mod:`.locomo`, :mod:`.longmemeval`) and what they share
(:mod:`.common`); this package picks the loader by name.
"""

from __future__ import annotations

import logging

from ...errors import ConfigError
from ..benchmark import Benchmark
from .common import PathLike, check_limit
from .halumem import load_halumem
from .locomo import LOCOMO_CATEGORIES, load_locomo
from .longmemeval import load_longmemeval

__all__ = ["LOADERS", "LOCOMO_CATEGORIES", "PathLike", "load_benchmark", "load_halumem", "load_locomo",
           "load_longmemeval"]

log = logging.getLogger(__name__)

LOADERS = {"halumem": load_halumem, "locomo": load_locomo, "longmemeval": load_longmemeval}
"""Benchmark kind → loader, for the CLI and configs that name the benchmark."""


def load_benchmark(kind: str, path: PathLike, limit: int | None = None, *,
                   sessions: int | None = None) -> Benchmark:
    """Load ``path`` with the loader of ``kind`` (``halumem``, ``locomo`` or ``longmemeval``).

    ``limit``: the first N items; ``sessions``: then only the first N sessions of each item, with the gold
    points and questions that stay answerable (the rule is :meth:`Benchmark.first_sessions`).
    """
    try:
        loader = LOADERS[kind.lower()]
    except KeyError:
        raise ConfigError(f"unknown benchmark {kind!r}; expected one of {sorted(LOADERS)}") from None
    check_limit(sessions, "sessions")
    bench = loader(path, limit)
    if sessions is None:
        return bench
    cut = bench.first_sessions(sessions)
    log.info("kept the first %d sessions of each item: %s", sessions, cut.counts())
    return cut
