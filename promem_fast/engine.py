"""The batching driver: many session programs at once, one backend call per request kind per round.

Each session's pipeline is plain sequential code (a generator, see :mod:`promem_fast.pipeline`) that
yields lists of requests. Every round the driver gathers the pending requests of all sessions in flight,
sends each kind to its backend as one batch (chunked at ``max_batch_size``), parses and checks the
replies, and resumes the programs whose requests are all answered. The number of backend calls therefore
grows with the number of pipeline steps, not with the number of sessions.

Faults stay local (:mod:`promem_fast.isolation`): a batch that raises is split in halves down to the
failing request, which is retried and, after the last attempt, handed to its program as a
:class:`~promem_fast.requests.Failure`. A program that crashes loses only its own session. Finished graphs leave in input order (so output does not depend
on batch size or window) and at most ``max_in_flight`` sessions are held at any time.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from promem_fast import native
from promem_fast.backends.base import Compressor, Embedder, GenerationRequest, LLMBackend, NLIBackend, Similarity
from promem_fast.config import EngineConfig
from promem_fast.context import RunContext
from promem_fast.errors import ContextOverflow, PromemError, SessionFailed
from promem_fast.isolation import FaultIsolation
from promem_fast.parsing import parse_reply
from promem_fast.requests import (
    Anchor, Attend, CleanEdges, Compress, Cut, Embed, Entail, Failure, Generate, Match, Program, ReplyError, Request,
)
from promem_fast.services import Services
from promem_fast.summary import RunSummary
from promem_fast.types import MemoryGraph, RunStats, Session

log = logging.getLogger(__name__)

_UNSET = object()


class _Idle:
    def __repr__(self) -> str:
        return "IDLE"


IDLE: Any = _Idle()
"""What a source given to :meth:`Engine.run` may yield instead of a ``(key, make_program)`` pair: nothing new
right now, keep the sessions in flight going. A long-lived source (the ``promem serve`` worker feeding the
window from its job queue) yields it when its queue is empty, so sessions already admitted keep advancing
instead of the loop blocking in ``next()``; it is asked again after the next round. A source that yields
``IDLE`` while nothing is in flight is asked again at once, so it should wait a little itself first."""


@dataclass
class _Run:
    key: Any
    program: Program[Any]
    ctx: RunContext
    pending: list[Request] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    raws: list[list[str]] = field(default_factory=list)
    value: Any = _UNSET
    error: BaseException | None = None

    def post(self, requests: list[Request]) -> None:
        self.pending = list(requests)
        self.results = [_UNSET] * len(requests)
        self.attempts = [0] * len(requests)
        self.raws = [[] for _ in requests]

    @property
    def ready(self) -> bool:
        return all(r is not _UNSET for r in self.results)


class Engine:
    """Extracts memory graphs for many sessions at once.

    ``Engine(config).extract(sessions)`` returns one :class:`MemoryGraph` per session in input order;
    ``extract_stream`` yields them as they finish (still in input order) with bounded memory.
    Backends can be injected (``Engine(config, llm=my_backend)``) instead of being built from the config.
    """

    def __init__(self, config: EngineConfig | None = None, *, llm: LLMBackend | None = None,
                 nli: NLIBackend | None = None, embedder: Embedder | None = None,
                 similarity: Similarity | None = None, compressor: Compressor | None = None) -> None:
        self.config = (config or EngineConfig()).validate()
        self.services = Services(self.config, llm=llm, nli=nli, embedder=embedder, similarity=similarity,
                                 compressor=compressor)
        self.summary = RunSummary()
        self._isolation = FaultIsolation(self.config.max_batch_size, self.config.max_failed_batches)
        self.on_session_error: Callable[[Session, BaseException], None] | None = None
        """Called for each session whose program crashed, under either ``on_error`` policy (with ``stop``, just
        before the run ends); the CLI writes rejects."""

    # ------------------------------------------------------------------------------------ public API
    def extract(self, sessions: Iterable[Session | dict[str, Any]]) -> list[MemoryGraph]:
        """Memory graphs of ``sessions``, in input order."""
        return list(self.extract_stream(sessions))

    def extract_stream(self, sessions: Iterable[Session | dict[str, Any]], *,
                       total: int | None = None) -> Iterator[MemoryGraph]:
        """Yield each session's graph as soon as it and every session before it are done."""
        from promem_fast.io import session_from_dict
        from promem_fast.pipeline import session_program

        timings = self.config.record_timings

        def programs() -> Iterator[tuple[Session, Callable[[RunContext], Program[MemoryGraph]]]]:
            for item in sessions:
                session = item if isinstance(item, Session) else session_from_dict(item)
                yield session, (lambda ctx, s=session: session_program(s, ctx))

        if total is None and hasattr(sessions, "__len__"):
            total = len(sessions)  # type: ignore[arg-type]
        bar = self._progress(total)
        started = time.perf_counter()
        try:
            for session, outcome in self.run(programs()):
                if isinstance(outcome, BaseException):
                    self.summary.rejected += 1
                    if self.on_session_error is not None:
                        self.on_session_error(session, outcome)
                    if self.config.on_error == "stop":
                        raise SessionFailed(f"session {session.session_id!r} failed: "
                                            f"{type(outcome).__name__}: {outcome}") from outcome
                    log.error("session %s failed and was skipped: %s", session.session_id, outcome)
                    continue
                if not timings:
                    for st in outcome.stats.stages.values():
                        st.seconds = 0.0
                self.summary.add(outcome)
                if bar is not None:
                    bar.update(1)
                yield outcome
        finally:
            self.summary.wall_seconds += time.perf_counter() - started
            self.summary.load_seconds = self.services.load_seconds
            if bar is not None:
                bar.close()

    def run(self, programs: Iterable[tuple[Any, Callable[[RunContext], Program[Any]]]]
            ) -> Iterator[tuple[Any, Any]]:
        """The generic driver: ``(key, make_program)`` pairs in, ``(key, value or exception)`` out, in order.

        Evaluation uses it too (QA and judge programs), so everything shares one batching loop. The source
        may yield :data:`IDLE` to let the sessions in flight advance a round before it is asked again.
        """
        window = self.config.max_in_flight
        source = iter(programs)
        order: deque[_Run] = deque()
        active: list[_Run] = []
        exhausted = False
        while True:
            while not exhausted and len(order) < window:
                try:
                    item = next(source)
                except StopIteration:
                    exhausted = True
                    break
                if item is IDLE:
                    break
                key, make = item
                run = _Run(key=key, program=None, ctx=RunContext(self.services, RunStats()))  # type: ignore[arg-type]
                try:
                    run.program = make(run.ctx)
                except Exception as exc:  # a program that cannot even start loses only its session
                    run.error = exc
                else:
                    self._advance(run, None)
                order.append(run)
                if run.value is _UNSET and run.error is None:
                    active.append(run)
            while order and (order[0].value is not _UNSET or order[0].error is not None):
                done = order.popleft()
                yield done.key, (done.error if done.error is not None else done.value)
            if not active:
                if exhausted and not order:
                    return
                continue
            self._round(active)
            self.summary.rounds += 1
            still: list[_Run] = []
            for run in active:
                if run.ready:
                    self._advance(run, run.results)
                if run.value is _UNSET and run.error is None:
                    still.append(run)
            active = still

    def close(self) -> None:
        self.services.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ internals
    def _progress(self, total: int | None) -> Any:
        if not self.config.progress or not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        return tqdm(total=total, unit="session", desc="extract", dynamic_ncols=True)

    def _advance(self, run: _Run, results: list[Any] | None) -> None:
        try:
            requests = next(run.program) if results is None else run.program.send(results)
        except StopIteration as stop:
            run.value = stop.value
            run.pending = []
            return
        except Exception as exc:
            log.debug("session program crashed", exc_info=True)
            run.error = exc
            run.pending = []
            return
        if not requests:
            run.error = PromemError("a session program yielded an empty request list")
            return
        run.post(requests)

    def _round(self, active: list[_Run]) -> None:
        jobs: dict[type, list[tuple[_Run, int]]] = {}
        for run in active:
            for slot, request in enumerate(run.pending):
                if run.results[slot] is _UNSET:
                    jobs.setdefault(type(request), []).append((run, slot))
        handlers: dict[type, Callable[[list[tuple[_Run, int]]], None]] = {
            Generate: self._dispatch_generate, Entail: self._dispatch_entail, Embed: self._dispatch_embed,
            Match: self._dispatch_match, Anchor: self._dispatch_anchor, CleanEdges: self._dispatch_clean_edges,
            Compress: self._dispatch_compress, Attend: self._dispatch_attend,
        }
        for kind, handler in handlers.items():
            if kind in jobs:
                handler(jobs.pop(kind))
        if jobs:
            raise PromemError(f"unknown request kinds: {sorted(k.__name__ for k in jobs)}")

    def _call(self, kind: str, fn: Callable[[list[Any]], list[Any]], items: list[Any]
              ) -> tuple[list[Any], float]:
        return self._isolation.call(kind, fn, items, self.summary)

    def _settle_error(self, run: _Run, slot: int, request: Any, exc: BaseException, role: str) -> None:
        """A request whose backend call raised: retry it next round, or fail it after the last attempt."""
        run.attempts[slot] += 1
        if run.attempts[slot] < self.config.pipeline.max_attempts and not isinstance(exc, ContextOverflow):
            run.ctx.stats.bump("retried_requests")
            return
        run.results[slot] = Failure(stage=request.stage, role=role, error=f"{type(exc).__name__}: {exc}",
                                    raw=list(run.raws[slot]), item=getattr(request, "item", None))

    def _settle_each(self, jobs: list[tuple[_Run, int]], outcomes: list[Any], role: str) -> None:
        """One outcome per request: the result, or an exception to retry or record as a failure."""
        for (run, slot), outcome in zip(jobs, outcomes):
            if isinstance(outcome, BaseException):
                self._settle_error(run, slot, run.pending[slot], outcome, role)
            else:
                run.results[slot] = outcome

    @staticmethod
    def _share(jobs: list[tuple[_Run, int]], seconds: float, weights: Sequence[float] | None = None) -> None:
        """Spread a batch's wall time over its requests (by tokens for generation, evenly otherwise)."""
        if not jobs:
            return
        total = float(sum(weights)) if weights else 0.0
        for i, (run, slot) in enumerate(jobs):
            part = seconds * (weights[i] / total) if weights and total > 0 else seconds / len(jobs)
            run.ctx.stats.stage(run.pending[slot].stage).seconds += part

    # -- the kinds --------------------------------------------------------------------------------
    def _dispatch_generate(self, jobs: list[tuple[_Run, int]]) -> None:
        by_backend: dict[int, tuple[LLMBackend, list[tuple[_Run, int]]]] = {}
        for run, slot in jobs:
            backend = self.services.llm(run.pending[slot].role)
            by_backend.setdefault(id(backend), (backend, []))[1].append((run, slot))
        for backend, group in by_backend.values():
            self._generate_on(backend, group)

    def _generate_on(self, backend: LLMBackend, jobs: list[tuple[_Run, int]]) -> None:
        cfg_for = self.config.llm_for
        sendable: list[tuple[_Run, int]] = []
        payload: list[GenerationRequest] = []
        prompt_sizes: list[int] = []
        for run, slot in jobs:
            req: Generate = run.pending[slot]
            cfg = cfg_for(req.role)
            n_prompt = backend.count_tokens(req.messages)
            if n_prompt + req.max_tokens > backend.context_length:
                run.ctx.stats.bump("context_overflows")
                run.results[slot] = Failure(
                    stage=req.stage, role=req.role, item=req.item,
                    error=f"ContextOverflow: prompt of {n_prompt} tokens + {req.max_tokens} to generate exceeds "
                          f"the context of {backend.context_length}")
                continue
            attempt = run.attempts[slot]
            payload.append(GenerationRequest(
                messages=req.messages, schema=req.schema, max_tokens=req.max_tokens, seed=cfg.seed + attempt,
                temperature=cfg.temperature if attempt == 0 else cfg.retry_temperature))
            sendable.append((run, slot))
            prompt_sizes.append(n_prompt)
        if not sendable:
            return
        outcomes, seconds = self._call("generate", backend.generate, payload)
        weights = [p + (o.completion_tokens if not isinstance(o, BaseException) else 0)
                   for p, o in zip(prompt_sizes, outcomes)]
        self._share(sendable, seconds, weights)
        for (run, slot), outcome in zip(sendable, outcomes):
            req = run.pending[slot]
            if isinstance(outcome, BaseException):
                self._settle_error(run, slot, req, outcome, req.role)
                continue
            stage = run.ctx.stats.stage(req.stage)
            stage.calls += 1
            stage.prompt_tokens += outcome.prompt_tokens
            stage.completion_tokens += outcome.completion_tokens
            run.raws[slot].append(outcome.text)
            cut = outcome.finish_reason == "length"
            stage.cut_replies += cut
            try:
                value, repairs = parse_reply(outcome.text, req.schema)
                if req.check is not None:
                    value, more = req.check(value)
                    repairs = repairs + more
            except ReplyError as exc:
                if cut and req.cut_aware:  # nothing usable before the cut: the program asks with more room
                    run.results[slot] = Cut(None)
                    continue
                self._settle_error(run, slot, req, exc, req.role)
                continue
            if repairs:
                run.ctx.stats.bump("repaired_replies")
            run.results[slot] = Cut(value) if cut and req.cut_aware else value

    def _dispatch_entail(self, jobs: list[tuple[_Run, int]]) -> None:
        pairs = [(run.pending[slot].premise, run.pending[slot].hypothesis) for run, slot in jobs]
        outcomes, seconds = self._call("entail", self.services.nli.entail, pairs)
        self._share(jobs, seconds)
        for run, slot in jobs:
            run.ctx.stats.stage(run.pending[slot].stage).nli_pairs += 1
        self._settle_each(jobs, outcomes, "nli")

    def _dispatch_embed(self, jobs: list[tuple[_Run, int]]) -> None:
        for query in (False, True):
            group = [(run, slot) for run, slot in jobs if run.pending[slot].query is query]
            if group:
                self._embed_group(group, query)

    def _embed_group(self, jobs: list[tuple[_Run, int]], query: bool) -> None:
        index: dict[str, int] = {}
        for run, slot in jobs:
            for text in run.pending[slot].texts:
                index.setdefault(text, len(index))
        unique = list(index)
        embedder = self.services.embedder
        embed = getattr(embedder, "embed_queries", embedder.embed) if query else embedder.embed

        def call(texts: list[str]) -> list[np.ndarray]:
            return list(embed(texts)) if texts else []

        outcomes, seconds = self._call("embed", call, unique)
        self._share(jobs, seconds, [len(run.pending[slot].texts) for run, slot in jobs])
        dim = getattr(embedder, "dim", 0)
        for run, slot in jobs:
            req = run.pending[slot]
            run.ctx.stats.stage(req.stage).embedded_texts += len(req.texts)
            rows = [outcomes[index[t]] for t in req.texts]
            bad = next((r for r in rows if isinstance(r, BaseException)), None)
            if bad is not None:
                self._settle_error(run, slot, req, bad, "embed")
            else:
                run.results[slot] = (np.stack(rows).astype(np.float32, copy=False) if rows
                                     else np.zeros((0, dim), np.float32))

    def _dispatch_match(self, jobs: list[tuple[_Run, int]]) -> None:
        pairs = [(run.pending[slot].queries, run.pending[slot].keys) for run, slot in jobs]
        outcomes, seconds = self._call("match", self.services.similarity.top1, pairs)
        self._share(jobs, seconds)
        self._settle_each(jobs, outcomes, "match")

    def _dispatch_compress(self, jobs: list[tuple[_Run, int]]) -> None:
        cfg = self.config.compression
        texts = [t for run, slot in jobs for t in run.pending[slot].texts]
        compressor = self.services.compressor

        def call(items: list[str]) -> list[str]:
            return compressor.compress(items, cfg.rate, cfg.force_tokens)

        outcomes, seconds = self._call("compress", call, texts)
        self._share(jobs, seconds, [len(run.pending[slot].texts) for run, slot in jobs])
        pos = 0
        for run, slot in jobs:
            req = run.pending[slot]
            part, pos = outcomes[pos:pos + len(req.texts)], pos + len(req.texts)
            bad = next((o for o in part if isinstance(o, BaseException)), None)
            if bad is not None:
                self._settle_error(run, slot, req, bad, "compress")
            else:
                run.results[slot] = list(part)

    def _dispatch_attend(self, jobs: list[tuple[_Run, int]]) -> None:
        compressor = self.services.compressor

        def call(items: list[tuple[str, ...]]) -> list[np.ndarray]:
            return [compressor.sentence_attention(texts) for texts in items]

        outcomes, seconds = self._call("attend", call, [run.pending[slot].texts for run, slot in jobs])
        self._share(jobs, seconds)
        self._settle_each(jobs, outcomes, "attend")

    def _dispatch_anchor(self, jobs: list[tuple[_Run, int]]) -> None:
        reqs: list[Anchor] = [run.pending[slot] for run, slot in jobs]
        self.summary.backend_calls["anchor"] = self.summary.backend_calls.get("anchor", 0) + 1
        found = native.anchor_groups([r.detail_turns for r in reqs], [r.entry_turns for r in reqs])
        for (run, slot), anchored in zip(jobs, found):
            run.results[slot] = anchored

    def _dispatch_clean_edges(self, jobs: list[tuple[_Run, int]]) -> None:
        reqs: list[CleanEdges] = [run.pending[slot] for run, slot in jobs]
        self.summary.backend_calls["clean_edges"] = self.summary.backend_calls.get("clean_edges", 0) + 1
        kept = native.clean_edge_groups([(r.source, r.relation, r.target) for r in reqs], reqs[0].symmetric)
        for (run, slot), indices in zip(jobs, kept):
            run.results[slot] = indices
