"""Calling the backends: one outcome per job, on any thread (nothing here touches session state).

:func:`call` runs a batch of jobs of one kind on its backend with fault isolation (a request that fails
alone gets its exception as its outcome); generation first renders and tokenizes each prompt once
(:func:`prepare_job`), which the continuous driver's generation lane also does ahead of submission.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from promem_fast import native
from promem_fast.backends.base import Encoder, GenerationRequest, LLMBackend
from promem_fast.driver.kinds import Job
from promem_fast.errors import ContextOverflow
from promem_fast.isolation import FaultIsolation
from promem_fast.prefix_cache import block_hashes
from promem_fast.requests import Anchor, Attend, CleanEdges, Compress, Embed, Entail, Match
from promem_fast.services import Services
from promem_fast.run_summary import RunSummary


def call(services: Services, kind: str, jobs: Sequence[Job], isolation: FaultIsolation,
         summary: RunSummary) -> list[Any]:
    """One outcome per job (the answer, or the exception that job raised alone). ``generate`` here is
    the whole batch through ``generate`` (the round driver, and the continuous driver's batch adapter)."""
    isolation.owners = {id(job.run) for job in jobs}
    if kind == "generate":
        backend = services.llm(jobs[0].run.pending[jobs[0].slot].role)  # type: ignore[union-attr]
        return generate_batch(backend, jobs, isolation, summary)
    return _CALLS[kind](services, [job.payload for job in jobs], isolation, summary)


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
