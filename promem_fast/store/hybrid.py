"""The store's search by the hybrid rule: the persistence's nearest vectors and its full-text search give the
two rankings (:meth:`~promem_fast.persistence.api.Persistence.nearest` and ``lexical``, on either backend).

Each side proposes its best candidates of the user (:data:`CANDIDATES`, or more for a large ``k``), those
outside the search's scope (time, history) are dropped, and :mod:`.ranking` fuses what is left. A memory
only one side finds still ranks: a question's words may be in a memory whose embedding is far from it, and
the reverse. The window a question's own words name ("last May") is read relative to ``as_of`` when given,
else to now.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from promem_fast.persistence import rows
from promem_fast.persistence.hits import Hit
from promem_fast.persistence.lexical import terms

from .ranking import collapse, fuse, prepare
from .when import said_within, window

if TYPE_CHECKING:
    from .protocol import StoreView

CANDIDATES = 100
"""Candidates each side proposes (at least ``4 k``): deep enough that fusion rarely misses one side's good
memory, shallow enough that the lexical side stays within a millisecond or two at a million memories."""


def _dense(store: StoreView, user_pk: int, vector: np.ndarray, depth: int, where: str,
           params: tuple[Any, ...]) -> list[int]:
    """The user's ``depth`` nearest memories in scope, best first (widening the fetch past those out of scope)."""
    total = store.db.vector_count(user_pk)
    wanted = depth + 8
    while True:
        ids, _ = store.db.nearest(user_pk, vector, wanted)
        kept = rows.in_scope(store.db, ids.tolist(), where, params) if len(ids) else []
        if len(kept) >= depth or wanted >= total:
            return kept[:depth]
        wanted *= 4


def proposals(store: StoreView, user_pk: int, user: str, query: str, depth: int,
              scope: tuple[str, tuple[Any, ...]]) -> tuple[np.ndarray, list[int], list[int]]:
    """The question's vector (as embedded, names left out) and each side's ``depth`` best memories in scope."""
    config = store.config.ranking
    where, params = scope
    prepared = prepare(query, [user], config)
    vector = np.asarray(store.embed_queries([prepared.text]), np.float32)[0]
    store.check_dim(int(vector.shape[0]))
    dense = _dense(store, user_pk, vector, depth, where, params) if config.dense else []
    lexical: list[int] = []
    if config.lexical:
        found = [node for node, _ in store.db.lexical(user_pk, terms(prepared.lexical_text, prepared.dropped), depth,
                                                      source=config.source, exchange=config.exchange)]
        lexical = rows.in_scope(store.db, found, where, params)[:depth] if found else []
    return vector, dense, lexical


class _Rows:
    """The text and vector of candidates in fused order, read as the collapse reaches them: a chunk of the
    order at a time (the first ``chunk`` candidates, then the next), since it usually stops after about ``k``
    of the hundred or more both sides propose."""

    def __init__(self, store: StoreView, order: list[int], dim: int, chunk: int) -> None:
        self._store, self._order, self._dim, self._chunk = store, order, dim, chunk
        self._position = {node: i for i, node in enumerate(order)}
        self._text: dict[int, str] = {}
        self._vector: dict[int, np.ndarray] = {}

    def _read(self, node: int) -> None:
        start = self._position[node]
        part = [n for n in self._order[start:start + self._chunk] if n not in self._text]
        stored: list[tuple[int, Any]] = []
        for found, words_of, blob in self._store.db.execute(
                f"SELECT id, text, {self._store.db.vector_sql('vector')} FROM nodes "
                f"WHERE id IN ({rows.placeholders(len(part))})", part):
            self._text[found] = words_of
            if blob is not None:
                stored.append((found, blob))
        matrix = self._store.db.decode_vectors([blob for _, blob in stored], self._dim)
        self._vector.update((found, matrix[i]) for i, (found, _) in enumerate(stored))

    def text(self, node: int) -> str:
        if node not in self._text:
            self._read(node)
        return self._text[node]

    def vector(self, node: int) -> np.ndarray | None:
        self.text(node)
        return self._vector.get(node)


def candidates(store: StoreView, user_pk: int, user: str, query: str, k: int,
               scope: tuple[str, tuple[Any, ...]], when: str | None = None, explain: bool = False
               ) -> list[tuple[int, float, dict[str, Any] | None]]:
    """The user's ``k`` best memories in ``scope`` for ``query`` by the hybrid rule, best first, each with its
    cosine with the question (as embedded, names left out) and, with ``explain``, how it was ranked
    (:func:`_explained`; else None); ``when``: the ISO time the question's own times are relative to (default
    now). Only the candidates the collapse reaches are read (:class:`_Rows`)."""
    config = store.config.ranking
    vector, dense, lexical = proposals(store, user_pk, user, query, max(CANDIDATES, 4 * k), scope)
    pool = list(dict.fromkeys(dense + lexical))
    if not pool:
        return []
    today = date.fromisoformat(when[:10]) if when else datetime.now(timezone.utc).date()
    days = window(query, today) if config.when else None
    timed: list[int] = []
    if days is not None:
        chunks = (pool[lo:lo + 500] for lo in range(0, len(pool), 500))
        said = {node: valid_from for chunk in chunks for node, valid_from in store.db.execute(
            f"SELECT id, valid_from FROM nodes WHERE id IN ({rows.placeholders(len(chunk))})", chunk)}
        timed = said_within(dense or lexical, said.get, days)
    order = fuse(dense, lexical, config, timed=timed)
    read = _Rows(store, [node for node, _ in order], len(vector), chunk=2 * k + 8)
    best = collapse(order, read.vector, config, k, text_of=read.text)
    # six decimals, the score every surface shows, so a threshold compares with what the caller saw
    cosines = [(node, fused, round(float(found @ vector), 6) if (found := read.vector(node)) is not None else 0.0)
               for node, fused in best]
    if not explain:  # the ranks are read only when asked for: a search's own path stays as it was
        return [(node, cosine, None) for node, _, cosine in cosines]
    ranks = {side: {node: rank for rank, node in enumerate(ranking, 1)}
             for side, ranking in (("dense", dense), ("lexical", lexical), ("time", timed))}
    span = None if days is None else [days.first.isoformat(), days.last.isoformat()]
    return [(node, cosine, _explained(node, cosine, fused, ranks, span)) for node, fused, cosine in cosines]


def _explained(node: int, cosine: float, fused: float, ranks: dict[str, dict[int, int]],
               span: list[str] | None) -> dict[str, Any]:
    """A hit's ``score_details`` (mem0's ``explain``): its cosine, its place in each ranking that holds it (1 =
    best; ``None`` where it is not among that side's candidates; ``time_rank`` only when the question names a
    time, ``window`` being the days read from it) and the fused score that ordered it (:mod:`.ranking`)."""
    return {"semantic_score": cosine, "dense_rank": ranks["dense"].get(node),
            "lexical_rank": ranks["lexical"].get(node), "time_rank": ranks["time"].get(node) if span else None,
            "window": span, "fused_score": round(fused, 6)}


def search(store: StoreView, user_pk: int, user: str, query: str, k: int, scope: tuple[str, tuple[Any, ...]],
           when: str | None = None, explain: bool = False) -> list[Hit]:
    """The ``k`` best memories as hits, best first (fused order), each scored by its cosine with the question;
    with ``explain``, each also says how it was ranked (``score_details``)."""
    best = candidates(store, user_pk, user, query, k, scope, when, explain)
    if not best:
        return []
    score_of = {node: cosine for node, cosine, _ in best}
    where, params = scope
    hits = rows.read_hits(store.db, f"n.id IN ({rows.placeholders(len(best))}) AND {where}",
                          (*score_of, *params), score_of)
    position = {node: i for i, (node, _, _) in enumerate(best)}
    details = {node: found for node, _, found in best}
    for hit in hits:
        hit.score_details = details[hit.node_id]  # None unless explained
    return sorted(hits, key=lambda h: position[h.node_id])
