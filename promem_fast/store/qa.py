"""Question answering over stored memory (and over raw turns, the NativeRAG baseline), batched.

How a question is answered (the paper's QA setting, §4.1): the memory of every session in the question's
history is one pool of retrievable *units*; the question is embedded as a query, the ``qa_top_k`` units
with the highest cosine are kept, each stamped with the date of its conversation, and the chat model
answers in a few words from them alone.

- For ProMem memory a unit is one graph node, shown with its anchored details and its relation edges
  (that is what detail anchoring and relation verification add at question time) and embedded with its
  details, so a question about a detail ("how far…") can reach the entry that carries it.
- For NativeRAG a unit is one raw dialogue turn (a user message and its reply), nothing extracted.

Units are embedded once per session (:func:`build_index`), not once per question: LongMemEval shares the
same haystack sessions between hundreds of questions. Both steps are session programs for
:meth:`promem_fast.engine.Engine.run`, so every question's requests of one kind travel in one batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol

import numpy as np

from promem_fast.context import RunContext
from promem_fast.engine import Engine
from promem_fast.requests import Embed, Failure, Generate, Program
from promem_fast.types import MemoryGraph, RunStats, Session

from promem_fast.config_ranking import RankingConfig
from promem_fast.persistence.hits import unit_body, unit_key
from promem_fast.persistence.lexical import PoolLexicon, terms

from .pooled import Ranked, rank_pool
from .qa_prompts import QA_NOT_FOUND, qa_schema, render_qa
from .ranking import Query, prepare

log = logging.getLogger(__name__)

Source = Literal["memory", "turns"]
"""What a question is answered from: extracted memory graphs, or raw turns (NativeRAG)."""

_TEMPLATE_OF: dict[str, str] = {"memory": "qa_memory", "turns": "qa_dialogue"}
_FIELD_OF: dict[str, str] = {"memory": "memories", "turns": "excerpts"}


class Asked(Protocol):
    """What the answer program reads of a question (evaluation's :class:`~promem_fast.eval.benchmark.Question`
    and the store's :class:`Ask` both have it)."""

    @property
    def question_id(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def answer(self) -> str | None: ...
    @property
    def question_type(self) -> str: ...
    @property
    def session_ids(self) -> tuple[str, ...]: ...
    @property
    def session_dates(self) -> tuple[str | None, ...]: ...
    @property
    def question_time(self) -> str | None: ...


@dataclass(frozen=True)
class Ask:
    """A question put to a user's memory: it may be answered from ``session_ids``, dated ``session_dates``."""

    question_id: str
    question: str
    session_ids: tuple[str, ...]
    session_dates: tuple[str | None, ...] = ()
    question_time: str | None = None
    question_type: str = "ask"
    answer: str | None = None
    """A gold answer, where one is known (evaluation); never shown to the answerer."""


@dataclass(frozen=True, slots=True)
class Unit:
    """One retrievable item of a session: a memory entry or a raw turn."""

    session_id: str
    key: str
    """The text that is embedded for retrieval."""
    body: str
    """The text shown to the answerer (its date is added per question, since LongMemEval re-dates sessions)."""
    source: str = ""
    """The owner's words the memory was taken from: read by the lexical side only (``ranking.source``)."""
    exchange: str = ""
    """The other speaker's words around them: read by the lexical side only (``ranking.exchange``)."""


def memory_units(graph: MemoryGraph) -> list[Unit]:
    """One unit per graph node (:func:`unit_key`, :func:`unit_body`); the memory store builds the same
    units from what it holds (:meth:`promem_fast.store.MemoryStore.retrieval_index`).

    Edges are listed on both ends (``→`` from the source, ``←`` at the target) so a retrieved entry brings
    its neighbours' meaning even when the neighbour itself is not among the top-k.
    """
    text_of = {node.id: node.text for node in graph.nodes}
    links: dict[int, list[str]] = {}
    for edge in graph.edges:
        if edge.source in text_of and edge.target in text_of:
            links.setdefault(edge.source, []).append(f"{edge.relation} → {text_of[edge.target]}")
            links.setdefault(edge.target, []).append(f"{edge.relation} ← {text_of[edge.source]}")
    units = []
    for node, details in graph.iter_anchored():
        facts = [d.text for d in details]
        units.append(Unit(graph.session_id, unit_key(node.text, facts),
                          unit_body(node.text, facts, links.get(node.id, [])), node.source or "",
                          node.exchange or ""))
    return units


def turn_units(session: Session) -> list[Unit]:
    """One unit per dialogue turn, its messages joined as ``speaker: text / speaker: text``."""
    units = []
    for _, messages in session.turn_groups():
        text = " / ".join(f"{m.role}: {m.text}" for m in messages)
        units.append(Unit(session.session_id, text, text))
    return units


@dataclass
class RetrievalIndex:
    """Every session's units and their embeddings (normalised float32 rows, one per unit)."""

    units: dict[str, list[Unit]]
    vectors: dict[str, np.ndarray]
    stats: RunStats = field(default_factory=RunStats)
    """What embedding the units cost (stage ``qa``)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Sessions whose units could not be embedded, and why (their units are then not retrievable)."""
    owners: dict[str, str] = field(default_factory=dict)
    """Each session's memory owner, where known (the ranking leaves owners' names out of a question)."""
    _lexicon: tuple[PoolLexicon, list[tuple[str, int]]] | None = field(default=None, repr=False, compare=False)

    def lexical(self, question_terms: Sequence[str], source: bool = True, exchange: bool = True
                ) -> list[tuple[str, int]]:
        """Every unit sharing a word with the terms (in its key, its source when ``source``, its exchange when
        ``exchange``), by BM25 best first, as ``(session, position)``; the FTS5 table over all units is built at
        the first question."""
        if self._lexicon is None:
            where = [(sid, j) for sid, items in self.units.items() for j in range(len(items))]
            units = [self.units[sid][j] for sid, j in where]
            self._lexicon = PoolLexicon([u.key for u in units], [u.source for u in units],
                                        [u.exchange for u in units]), where
        lexicon, where = self._lexicon
        return [where[i] for i, _ in lexicon.search(question_terms, source=source, exchange=exchange)]


@dataclass
class Pool:
    """The units a question may be answered from: its history's, in history order, with their vectors."""

    entries: list[tuple[Unit, str | None, int]] = field(default_factory=list)
    """(unit, its session's date, the session's position in the history)."""
    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    start: dict[str, int] = field(default_factory=dict)
    """Each session's first entry."""
    missing: list[str] = field(default_factory=list)
    """History sessions with no memory (not extracted, or their units not embedded)."""


def gather(question: Asked, index: RetrievalIndex) -> Pool:
    """``question``'s pool: every unit of every session of its history that ``index`` holds."""
    pool = Pool()
    n = len(question.session_ids)
    dates = list(question.session_dates[:n]) + [None] * (n - len(question.session_dates))
    blocks: list[np.ndarray] = []
    for position, (sid, date) in enumerate(zip(question.session_ids, dates, strict=True)):
        vectors = index.vectors.get(sid)
        if vectors is None or sid in index.failed:
            pool.missing.append(sid)
            continue
        if vectors.shape[0] and sid not in pool.start:
            pool.start[sid] = len(pool.entries)
            blocks.append(vectors)
            pool.entries.extend((unit, date, position) for unit in index.units[sid])
    if blocks:
        pool.keys = np.concatenate(blocks)
    return pool


def prepared_query(question: Asked, user: str, index: RetrievalIndex, config: RankingConfig) -> Query:
    """The question as the ranking sees it; the owners are its history's (and ``user``, the one it is about)."""
    owners = [index.owners[sid] for sid in question.session_ids if sid in index.owners]
    return prepare(question.question, [*owners, *user.split(" and ")], config)


def rank(question: Asked, index: RetrievalIndex, pool: Pool, query: Query, vector: np.ndarray,
         config: RankingConfig, depth: int) -> Ranked:
    """``pool`` ranked for ``question`` by the hybrid rule (:mod:`.pooled`); ``vector`` embeds ``query.text``."""
    lexical = [pool.start[sid] + j for sid, j in index.lexical(terms(query.lexical_text, query.dropped),
                                                                source=config.source, exchange=config.exchange)
               if sid in pool.start]
    entries = [(unit.session_id, unit.body, date) for unit, date, _ in pool.entries]
    return rank_pool(question.question, question.question_time, query, vector, entries, pool.keys, lexical, config,
                     depth, owner_of=index.owners.get)


def with_stats(ctx: RunContext, program: Program[Any]) -> Program[tuple[Any, RunStats]]:
    """Run ``program`` and return its value with the requests' accounting (``engine.run`` yields only the
    value, and evaluation reports what answering and judging cost)."""
    value = yield from program
    return value, ctx.stats


def _embed_units(units: Sequence[Unit]) -> Program[np.ndarray]:
    if not units:
        return np.zeros((0, 0), np.float32)
    (vectors,) = yield [Embed(stage="qa", texts=tuple(u.key for u in units))]
    if isinstance(vectors, Failure):
        raise RuntimeError(f"embedding failed: {vectors.error}")
    return vectors


def _embed_job(units: Sequence[Unit], ctx: RunContext) -> Program[tuple[np.ndarray, RunStats]]:
    return with_stats(ctx, _embed_units(units))


def build_index(engine: Engine, units: Mapping[str, list[Unit]]) -> RetrievalIndex:
    """Embed every session's units, all sessions batched together."""
    index = RetrievalIndex(units=dict(units), vectors={})

    def programs() -> Iterable[tuple[str, Callable[[RunContext], Program[Any]]]]:
        for sid, items in units.items():
            yield sid, partial(_embed_job, items)

    for sid, outcome in engine.run(programs()):
        if isinstance(outcome, BaseException):
            log.error("units of session %s could not be embedded and will not be retrieved: %s", sid, outcome)
            index.failed[sid] = f"{type(outcome).__name__}: {outcome}"
            index.vectors[sid] = np.zeros((0, 0), np.float32)
            continue
        vectors, stats = outcome
        index.vectors[sid] = vectors
        index.stats.merge(stats)
    return index


def top_k(query: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` key rows with the highest inner product with ``query`` (a cosine: rows are normalised),
    best first, the lower index first on ties (so retrieval never depends on anything but the scores)."""
    if k <= 0 or keys.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    scores = keys @ query
    order = np.argsort(-scores, kind="stable")[:k]
    return order.astype(np.int64), scores[order]


@dataclass
class Retrieved:
    """One unit put in an answer's context."""

    session_id: str
    date: str | None
    text: str
    score: float
    rank: int
    """0 = the best match."""

    def line(self) -> str:
        return f"[{self.date}] {self.text}" if self.date else self.text


@dataclass
class Answer:
    """A question's answer and everything that went into it."""

    question_id: str
    question: str
    question_type: str
    gold: str | None
    prediction: str | None
    """``None`` when the answering step failed (see ``error``) or the answer abstained (``abstained``)."""
    source: Source
    retrieved: list[Retrieved] = field(default_factory=list)
    """The context as shown to the answerer (chronological)."""
    candidates: int = 0
    """Units the question could retrieve from (its history's, duplicates removed)."""
    dropped_for_budget: int = 0
    """Top-k units left out because the prompt would not fit the model's context."""
    missing_sessions: list[str] = field(default_factory=list)
    """History sessions with no memory (extraction failed or was not run for them)."""
    error: str | None = None
    abstained: str | None = None
    """Why there is no answer when memory holds nothing on the question (``prediction`` is then None): no
    memory relevant enough to answer from, or the answerer found nothing in those it was shown."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id, "question": self.question, "question_type": self.question_type,
            "gold": self.gold, "prediction": self.prediction, "source": self.source, "error": self.error,
            "abstained": self.abstained,
            "candidates": self.candidates, "dropped_for_budget": self.dropped_for_budget,
            "missing_sessions": list(self.missing_sessions),
            "retrieved": [{"session_id": r.session_id, "date": r.date, "rank": r.rank,
                           "score": round(r.score, 6), "text": r.text} for r in self.retrieved],
        }


def answer_program(question: Asked, user: str, index: RetrievalIndex, ctx: RunContext, *,
                   source: Source = "memory") -> Program[Answer]:
    """Retrieve the top-k units of ``question``'s history and answer from them (one embed, one generate)."""
    answer = Answer(question.question_id, question.question, question.question_type, question.answer, None, source)
    pool = gather(question, index)
    answer.missing_sessions = pool.missing
    if pool.missing:
        log.debug("question %s: no memory for sessions %s", question.question_id, pool.missing)
    config = ctx.config.ranking
    query = prepared_query(question, user, index, config)
    (vectors,) = yield [Embed(stage="qa", texts=(query.text,), query=True)]
    if isinstance(vectors, Failure):
        ctx.fail(vectors)
        answer.error = f"query embedding failed: {vectors.error}"
        return answer
    ranked = rank(question, index, pool, query, vectors[0], config, ctx.config.qa_top_k)
    answer.candidates = ranked.candidates
    if not ranked.relevant(config.relevance_floor):
        answer.abstained = (f"memory holds nothing on this: no memory reaches the relevance floor "
                            f"({config.relevance_floor:g} cosine) or shares a word with the question"
                            if pool.entries else "memory holds nothing on this: no memory is stored for it")
        return answer
    picked = ranked.order

    template = _TEMPLATE_OF[source]
    fields = {"user": user, "question": question.question,
              "question_time": question.question_time or "an unknown date", _FIELD_OF[source]: ""}
    budget = ctx.prompt_budget("qa", render_qa(template, **fields))
    used = 0
    kept: list[tuple[int, int, Retrieved]] = []
    for place, (i, _) in enumerate(picked):
        unit, date, position = pool.entries[i]
        item = Retrieved(unit.session_id, date, unit.body, ranked.cosine[i], place)
        size = ctx.text_tokens("qa", item.line()) + 1
        if used + size > budget:
            answer.dropped_for_budget += 1
            continue
        used += size
        kept.append((position, i, item))
    # shown in conversation order (history position, then order within the session), not by score: with
    # every unit dated, the answerer reads the history as it happened, which is what "latest value" and
    # "how long after" questions need
    answer.retrieved = [item for _, _, item in sorted(kept, key=lambda t: t[:2])]
    fields[_FIELD_OF[source]] = "\n".join(r.line() for r in answer.retrieved) or "(none)"

    (reply,) = yield [Generate(stage="qa", role="qa", messages=render_qa(template, **fields),
                               schema=qa_schema(template), max_tokens=ctx.config.pipeline.max_tokens["qa"],
                               item=question.question_id)]
    if isinstance(reply, Failure):
        ctx.fail(reply)
        answer.error = f"answer failed: {reply.error}"
        return answer
    text = reply["answer"].strip()
    if text.rstrip(".").lower() == QA_NOT_FOUND.lower():
        answer.abstained = "memory holds nothing on this: the memories shown do not answer it"
    else:
        answer.prediction = text
    return answer


def _answer_job(question: Asked, user: str, index: RetrievalIndex, source: Source, ctx: RunContext
                ) -> Program[tuple[Answer, RunStats]]:
    return with_stats(ctx, answer_program(question, user, index, ctx, source=source))


def answer_questions(engine: Engine, questions: Sequence[tuple[Asked, str]], index: RetrievalIndex, *,
                     source: Source = "memory") -> tuple[list[Answer], RunStats]:
    """Answer ``(question, memory owner's name)`` pairs in one batched run; answers in input order and the
    accounting of the run. A question whose program crashed gets an answer holding the error."""
    stats = RunStats()
    answers: list[Answer] = []

    def programs() -> Iterable[tuple[Asked, Callable[[RunContext], Program[Any]]]]:
        for question, user in questions:
            yield question, partial(_answer_job, question, user, index, source)

    for question, outcome in engine.run(programs()):
        if isinstance(outcome, BaseException):
            log.error("question %s could not be answered: %s", question.question_id, outcome)
            answers.append(Answer(question.question_id, question.question, question.question_type,
                                  question.answer, None, source, error=f"{type(outcome).__name__}: {outcome}"))
            continue
        answer, run_stats = outcome
        answers.append(answer)
        stats.merge(run_stats)
    return answers, stats

