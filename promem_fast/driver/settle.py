"""Settling answers on the driver's thread: a reply parsed and checked into its session's slot, or a retry.

:meth:`Settler.settle` takes one job's outcome (a completion, another backend's answer, or the exception
that request raised alone) and fills the session's slot: a parsed and checked value, a :class:`Cut` value
when the reply ran out of tokens, or a :class:`Failure` after the last attempt; it says when the request is
to be sent again. The step's statistics are counted as it goes (:mod:`.accounting`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from promem_fast.backends.base import Completion
from promem_fast.config import EngineConfig
from promem_fast.driver.accounting import count_prefill
from promem_fast.driver.kinds import Job
from promem_fast.driver.state import SessionRun
from promem_fast.driver.window import step_working_set
from promem_fast.errors import ContextOverflow
from promem_fast.loops import looping
from promem_fast.parsing import parse_reply
from promem_fast.requests import Cut, Embed, Entail, Failure, Generate, ReplyError
from promem_fast.services import Services

BACKEND_ROLE = {"entail": "nli", "embed": "embed", "match": "match", "compress": "compress", "attend": "attend"}
"""The role a failure of a non-generation request is recorded under: the backend that failed."""


class Settler:
    """Settles the outcomes of one engine's jobs (its config's attempts, its services' prefix caches)."""

    def __init__(self, config: EngineConfig, services: Services,
                 observe: Callable[[SessionRun, int], None] | None = None) -> None:
        self.config = config
        self.services = services
        self.observe = observe
        """Told each completed step's KV working set (:meth:`.kinds.Kinds.observe`), or None."""

    def settle(self, job: Job, outcome: Any) -> bool:
        """Put ``outcome`` in the job's slot. False: the request is to be sent again (a retry)."""
        run, slot = job.run, job.slot
        request = run.pending[slot]
        stats = run.ctx.stats
        if isinstance(request, Entail):  # counted per attempt sent, answered or not
            stats.stage(request.stage).nli_pairs += 1
        elif isinstance(request, Embed):
            stats.stage(request.stage).embedded_texts += len(request.texts)
        if isinstance(outcome, BaseException):
            role = request.role if isinstance(request, Generate) else BACKEND_ROLE.get(job.kind, job.kind)
            done = self._error(run, slot, outcome, role)
        elif isinstance(request, Generate):
            run.prefill.append((slot, run.attempts[slot], request.stage, request.role, job.hashes,
                                outcome.prompt_tokens if job.hashes is None else job.n_ids,
                                outcome.completion_tokens))
            done = self._settle_reply(run, slot, request, outcome)
        else:
            run.settle(slot, outcome)
            done = True
        if run.ready and run.prefill:
            if self.observe is not None:  # the step's KV working set, for the auto window
                self.observe(run, step_working_set((hashes, n, reply) for *_, hashes, n, reply in run.prefill))
            count_prefill(run, self.config, self.services)
        return done

    def _settle_reply(self, run: SessionRun, slot: int, request: Generate, outcome: Completion) -> bool:
        stage = run.ctx.stats.stage(request.stage)
        stage.calls += 1
        stage.prompt_tokens += outcome.prompt_tokens
        stage.completion_tokens += outcome.completion_tokens
        run.raws[slot].append(outcome.text)
        cut = outcome.finish_reason != "stop"
        looped = outcome.finish_reason == "loop" or (cut and looping(outcome.text))
        stage.cut_replies += cut
        if looped:
            run.ctx.stats.bump("looped_replies")
        try:
            value, repairs = parse_reply(outcome.text, request.schema)
            if request.check is not None:
                value, more = request.check(value)
                repairs = repairs + more
        except ReplyError as exc:
            if cut and request.cut_aware:  # nothing usable before the cut: the program asks with more room
                run.settle(slot, Cut(None, looped))
                return True
            return self._error(run, slot, exc, request.role)
        if repairs:
            run.ctx.stats.bump("repaired_replies")
        run.settle(slot, Cut(value, looped) if cut and request.cut_aware else value)
        return True

    def _error(self, run: SessionRun, slot: int, exc: BaseException, role: str) -> bool:
        """A request that failed: to be retried, or a :class:`Failure` after its last attempt."""
        request = run.pending[slot]
        if isinstance(exc, ContextOverflow) and isinstance(request, Generate):
            run.ctx.stats.bump("context_overflows")
        run.attempts[slot] += 1
        if run.attempts[slot] < self.config.pipeline.max_attempts and not isinstance(exc, ContextOverflow):
            run.ctx.stats.bump("retried_requests")
            return False
        run.settle(slot, Failure(stage=request.stage, role=role, error=f"{type(exc).__name__}: {exc}",
                                 raw=list(run.raws[slot]), item=getattr(request, "item", None)))
        return True
