"""What each request kind costs the drivers: building the backend's input, calling it, settling the answer.

Split in three so both drivers share it: :meth:`Kinds.job` (the driver's thread) turns a posted request into
a :class:`Job`; :meth:`Kinds.call` (any thread; it touches no session state) runs a batch of jobs on the
backend with fault isolation and returns one outcome per job; :meth:`Kinds.settle` (the driver's thread
again) parses and checks the outcome into the session's results and statistics, or says to send the
request again. The round driver runs the three back to back per kind; the continuous driver runs ``call``
on the kind's own thread while it settles other answers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from promem_fast import native
from promem_fast.backends.base import Completion, Encoder, GenerationRequest, LLMBackend
from promem_fast.config import ROLES, EngineConfig
from promem_fast.driver.state import SessionRun
from promem_fast.driver.window import WindowSizer, resolve_window, step_working_set
from promem_fast.errors import ContextOverflow, PromemError
from promem_fast.isolation import FaultIsolation
from promem_fast.parsing import parse_reply
from promem_fast.prefix_cache import PrefixCacheModel, block_hashes
from promem_fast.requests import (
    Anchor, Attend, CleanEdges, Compress, Cut, Embed, Entail, Failure, Generate, Match, ReplyError, Request,
)
from promem_fast.services import Services
from promem_fast.summary import RunSummary

KIND_NAMES: dict[type, str] = {
    Generate: "generate", Entail: "entail", Embed: "embed", Match: "match", Anchor: "anchor",
    CleanEdges: "clean_edges", Compress: "compress", Attend: "attend",
}
"""Request type → kind name, in the order the round driver serves the kinds of one round."""

_ROLE = {"entail": "nli", "embed": "embed", "match": "match", "compress": "compress", "attend": "attend"}


@dataclass(eq=False, slots=True)
class Job:
    """One attempt at one posted request: who asked (``run``, ``slot``) and what the backend gets."""

    run: SessionRun
    slot: int
    kind: str
    payload: Any
    hashes: list[int] | None = None
    """The prompt's block hashes (:func:`~promem_fast.prefix_cache.block_hashes`), set where its ids are
    made (:func:`prepare_job`, on the generation thread); None when the backend keeps its ids to itself."""
    n_ids: int = 0
    """Its number of ids (what the hashes cover, whole blocks and the rest)."""


def session_date(timestamp: str | None) -> str | None:
    """The ``YYYY-MM-DD`` day of a session timestamp, for the chat template's own date (None if absent)."""
    if not timestamp or len(timestamp) < 10 or timestamp[4] != "-" or timestamp[7] != "-":
        return None
    return timestamp[:10]


def prepare_prompt(backend: LLMBackend, request: GenerationRequest) -> GenerationRequest:
    """Render and tokenize the prompt once (backends with ``encode``) and check it fits the context.

    Raises :class:`ContextOverflow` when prompt plus ``max_tokens`` exceed the window. Runs wherever the
    driver puts it: inline in a round, or on the generation thread ahead of submission.
    """
    if isinstance(backend, Encoder):
        ids = tuple(backend.encode(request.messages, request.date))
        n_prompt = len(ids)
        request = GenerationRequest(messages=request.messages, schema=request.schema, max_tokens=request.max_tokens,
                                    seed=request.seed, temperature=request.temperature, prompt_ids=ids,
                                    date=request.date)
    else:
        n_prompt = backend.count_tokens(request.messages)
    if n_prompt + request.max_tokens > backend.context_length:
        raise ContextOverflow(f"prompt of {n_prompt} tokens + {request.max_tokens} to generate exceeds the context "
                              f"of {backend.context_length}")
    return request


def prepare_job(backend: LLMBackend, job: Job) -> GenerationRequest:
    """:func:`prepare_prompt` for a job, its ids' block hashes kept on it for the prefill count."""
    request = prepare_prompt(backend, job.payload)
    if request.prompt_ids is not None:
        job.hashes = block_hashes(request.prompt_ids)
        job.n_ids = len(request.prompt_ids)
    return request


class Kinds:
    """The per-kind logic of one engine (its config and services)."""

    def __init__(self, config: EngineConfig, services: Services) -> None:
        self.config = config
        self.services = services
        self._window: int | None = None
        self._sizer: WindowSizer | None = None

    def window(self) -> int:
        """Sessions in flight: ``max_in_flight``, or for 0 (auto) the main LLM backend's KV cache over a
        session's working set as measured so far (:mod:`promem_fast.driver.window`; loads that backend to ask it)."""
        if self._window is None:
            role = next((r for r in ROLES if r not in self.config.roles), "event")
            llm = self.services.llm(role) if self.config.max_in_flight == 0 else None
            self._window, self._sizer = resolve_window(self.config.max_in_flight, llm)
        return self._window if self._sizer is None else self._sizer.window()

    # ------------------------------------------------------------------------------ driver's thread
    def target(self, request: Request) -> Hashable:
        """Which executor serves ``request``: one per LLM backend, one per other kind."""
        kind = KIND_NAMES.get(type(request))
        if kind is None:
            raise PromemError(f"unknown request kind: {type(request).__name__}")
        if kind == "generate":
            return kind, id(self.services.llm(request.role))  # type: ignore[union-attr]
        return kind, None

    def job(self, run: SessionRun, slot: int) -> Job:
        request = run.pending[slot]
        kind = KIND_NAMES[type(request)]
        payload: Any = request
        if kind == "generate":
            cfg = self.config.llm_for(request.role)  # type: ignore[union-attr]
            attempt = run.attempts[slot]
            payload = GenerationRequest(
                messages=request.messages, schema=request.schema,  # type: ignore[union-attr]
                max_tokens=request.max_tokens, seed=cfg.seed + attempt,  # type: ignore[union-attr]
                temperature=cfg.temperature if attempt == 0 else cfg.retry_temperature,
                date=getattr(run.ctx, "date", None))
        return Job(run, slot, kind, payload)

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
            role = request.role if isinstance(request, Generate) else _ROLE.get(job.kind, job.kind)
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
            self._count_prefill(run)
        return done

    def _count_prefill(self, run: SessionRun) -> None:
        """The step's uncached prefill per stage, replies taken in slot and attempt order through the
        session's prefix cache of their backend (every prompt token when the backend gave no ids); the step's
        KV working set to the auto window's sizer."""
        if self._sizer is not None:
            self._sizer.observe(id(run), step_working_set((hashes, n, reply) for *_, hashes, n, reply in run.prefill))
        for _, _, stage, role, hashes, n_tokens, _ in sorted(run.prefill, key=lambda entry: entry[:2]):
            uncached = n_tokens
            if hashes is not None:
                backend = id(self.services.llm(role))  # type: ignore[arg-type]
                cache = run.caches.get(backend)
                if cache is None:
                    cache = run.caches[backend] = PrefixCacheModel(self.config.llm_for(role).prefix_cache_tokens)
                uncached = cache.admit(hashes, n_tokens)
                run.ctx.stats.stage(stage).prefill_counted += 1
            run.ctx.stats.stage(stage).uncached_prefill_tokens += uncached
        run.prefill.clear()

    def _settle_reply(self, run: SessionRun, slot: int, request: Generate, outcome: Completion) -> bool:
        stage = run.ctx.stats.stage(request.stage)
        stage.calls += 1
        stage.prompt_tokens += outcome.prompt_tokens
        stage.completion_tokens += outcome.completion_tokens
        run.raws[slot].append(outcome.text)
        cut = outcome.finish_reason == "length"
        stage.cut_replies += cut
        try:
            value, repairs = parse_reply(outcome.text, request.schema)
            if request.check is not None:
                value, more = request.check(value)
                repairs = repairs + more
        except ReplyError as exc:
            if cut and request.cut_aware:  # nothing usable before the cut: the program asks with more room
                run.settle(slot, Cut(None))
                return True
            return self._error(run, slot, exc, request.role)
        if repairs:
            run.ctx.stats.bump("repaired_replies")
        run.settle(slot, Cut(value) if cut and request.cut_aware else value)
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

    @staticmethod
    def share(jobs: Sequence[Job], outcomes: Sequence[Any], seconds: float) -> None:
        """Spread a call's wall time over its requests' stages (by tokens for generation, evenly otherwise)."""
        if not jobs:
            return
        weights = [_weight(job, out) for job, out in zip(jobs, outcomes)]
        total = float(sum(weights))
        for job, weight in zip(jobs, weights):
            part = seconds * weight / total if total > 0 else seconds / len(jobs)
            job.run.ctx.stats.stage(job.run.pending[job.slot].stage).seconds += part

    # ------------------------------------------------------------------------------ any thread
    def call(self, kind: str, jobs: Sequence[Job], isolation: FaultIsolation, summary: RunSummary) -> list[Any]:
        """One outcome per job (the answer, or the exception that job raised alone). ``generate`` here is
        the whole batch through ``generate`` (the round driver, and the continuous driver's batch adapter)."""
        isolation.owners = {id(job.run) for job in jobs}
        if kind == "generate":
            backend = self.services.llm(jobs[0].run.pending[jobs[0].slot].role)  # type: ignore[union-attr]
            return generate_batch(backend, jobs, isolation, summary)
        return _CALLS[kind](self.services, [job.payload for job in jobs], isolation, summary)


def generate_batch(backend: LLMBackend, jobs: Sequence[Job], isolation: FaultIsolation,
                   summary: RunSummary) -> list[Any]:
    """Prepare every prompt, then one ``generate`` over those that fit (chunked and halved on faults)."""
    outcomes: list[Any] = [None] * len(jobs)
    ready: list[GenerationRequest] = []
    where: list[int] = []
    for i, job in enumerate(jobs):
        try:
            ready.append(prepare_job(backend, job))
            where.append(i)
        except ContextOverflow as exc:
            outcomes[i] = exc
    if ready:
        for i, out in zip(where, isolation.call("generate", backend.generate, ready, summary)[0]):
            outcomes[i] = out
    return outcomes


def _weight(job: Job, outcome: Any) -> float:
    if job.kind == "generate":
        return float(outcome.prompt_tokens + outcome.completion_tokens) if isinstance(outcome, Completion) else 0.0
    if job.kind in ("embed", "compress"):
        return float(len(job.payload.texts))
    return 1.0


def _entail(services: Services, reqs: list[Entail], iso: FaultIsolation, summary: RunSummary) -> list[Any]:
    return iso.call("entail", services.nli.entail, [(r.premise, r.hypothesis) for r in reqs], summary)[0]


def _embed(services: Services, reqs: list[Embed], iso: FaultIsolation, summary: RunSummary) -> list[Any]:
    """Each distinct text embedded once per call (queries apart: some models prefix an instruction)."""
    embedder = services.embedder
    dim = getattr(embedder, "dim", 0)
    out: list[Any] = [None] * len(reqs)
    for query in (False, True):
        group = [i for i, r in enumerate(reqs) if r.query is query]
        if not group:
            continue
        index: dict[str, int] = {}
        for i in group:
            for text in reqs[i].texts:
                index.setdefault(text, len(index))
        embed = getattr(embedder, "embed_queries", embedder.embed) if query else embedder.embed

        def run(texts: list[str], embed: Callable[[Any], Any] = embed) -> list[np.ndarray]:
            return list(embed(texts)) if texts else []

        rows_of = iso.call("embed", run, list(index), summary)[0]
        for i in group:
            rows = [rows_of[index[t]] for t in reqs[i].texts]
            bad = next((r for r in rows if isinstance(r, BaseException)), None)
            out[i] = bad if bad is not None else (np.stack(rows).astype(np.float32, copy=False) if rows
                                                  else np.zeros((0, dim), np.float32))
    return out


def _match(services: Services, reqs: list[Match], iso: FaultIsolation, summary: RunSummary) -> list[Any]:
    return iso.call("match", services.similarity.top1, [(r.queries, r.keys) for r in reqs], summary)[0]


def _compress(services: Services, reqs: list[Compress], iso: FaultIsolation, summary: RunSummary) -> list[Any]:
    cfg = services.config.compression
    compressor = services.compressor

    def run(items: list[str]) -> list[str]:
        return compressor.compress(items, cfg.rate, cfg.force_tokens)

    flat = iso.call("compress", run, [t for r in reqs for t in r.texts], summary)[0]
    out: list[Any] = []
    pos = 0
    for r in reqs:
        part, pos = flat[pos:pos + len(r.texts)], pos + len(r.texts)
        bad = next((o for o in part if isinstance(o, BaseException)), None)
        out.append(bad if bad is not None else list(part))
    return out


def _attend(services: Services, reqs: list[Attend], iso: FaultIsolation, summary: RunSummary) -> list[Any]:
    compressor = services.compressor

    def run(items: list[tuple[str, ...]]) -> list[np.ndarray]:
        return [compressor.sentence_attention(texts) for texts in items]

    return iso.call("attend", run, [r.texts for r in reqs], summary)[0]


def _anchor(services: Services, reqs: list[Anchor], iso: FaultIsolation, summary: RunSummary) -> list[Any]:
    summary.backend_calls["anchor"] = summary.backend_calls.get("anchor", 0) + 1
    return list(native.anchor_groups([r.detail_turns for r in reqs], [r.entry_turns for r in reqs]))


def _clean_edges(services: Services, reqs: list[CleanEdges], iso: FaultIsolation, summary: RunSummary
                 ) -> list[Any]:
    """One native call per distinct symmetric-relation mask (in practice one for the whole batch)."""
    out: list[Any] = [None] * len(reqs)
    groups: dict[bytes | None, list[int]] = {}
    for i, r in enumerate(reqs):
        groups.setdefault(None if r.symmetric is None else np.asarray(r.symmetric).tobytes(), []).append(i)
    for members in groups.values():
        summary.backend_calls["clean_edges"] = summary.backend_calls.get("clean_edges", 0) + 1
        kept = native.clean_edge_groups([(reqs[i].source, reqs[i].relation, reqs[i].target) for i in members],
                                        reqs[members[0]].symmetric)
        for i, indices in zip(members, kept):
            out[i] = indices
    return out


_CALLS: dict[str, Callable[[Services, Any, FaultIsolation, RunSummary], list[Any]]] = {
    "entail": _entail, "embed": _embed, "match": _match, "compress": _compress, "attend": _attend,
    "anchor": _anchor, "clean_edges": _clean_edges,
}
