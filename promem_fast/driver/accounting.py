"""What the drivers count per stage as answers settle: the seconds of each backend call, the uncached prefill.

Both are shares of something measured per call or per step, spread over the stages of the requests in it;
a session's statistics are written only on the driver's thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from promem_fast.backends.base import Completion
from promem_fast.config import EngineConfig
from promem_fast.driver.kinds import Job
from promem_fast.driver.state import SessionRun
from promem_fast.prefix_cache import PrefixCacheModel
from promem_fast.services import Services


def share(jobs: Sequence[Job], outcomes: Sequence[Any], seconds: float) -> None:
    """Spread a call's wall time over its requests' stages (by tokens for generation, evenly otherwise)."""
    if not jobs:
        return
    weights = [_weight(job, out) for job, out in zip(jobs, outcomes)]
    total = float(sum(weights))
    for job, weight in zip(jobs, weights):
        part = seconds * weight / total if total > 0 else seconds / len(jobs)
        job.run.ctx.stats.stage(job.run.pending[job.slot].stage).seconds += part


def _weight(job: Job, outcome: Any) -> float:
    if job.kind == "generate":
        return float(outcome.prompt_tokens + outcome.completion_tokens) if isinstance(outcome, Completion) else 0.0
    if job.kind in ("embed", "compress"):
        return float(len(job.payload.texts))
    return 1.0


def count_prefill(run: SessionRun, config: EngineConfig, services: Services) -> None:
    """The step's uncached prefill per stage, replies taken in slot and attempt order through the
    session's prefix cache of their backend (every prompt token when the backend gave no ids, and the stage's
    ``prefill_counted`` not raised)."""
    for _, _, stage, role, hashes, n_tokens, _ in sorted(run.prefill, key=lambda entry: entry[:2]):
        uncached = n_tokens
        if hashes is not None:
            backend = id(services.llm(role))  # type: ignore[arg-type]
            cache = run.caches.get(backend)
            if cache is None:
                cache = run.caches[backend] = PrefixCacheModel(config.llm_for(role).prefix_cache_tokens)
            uncached = cache.admit(hashes, n_tokens)
            run.ctx.stats.stage(stage).prefill_counted += 1
        run.ctx.stats.stage(stage).uncached_prefill_tokens += uncached
    run.prefill.clear()
