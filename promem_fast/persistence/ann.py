"""Approximate search for large users: an HNSW graph over groups of near-duplicate vectors.

Exact search reads every vector of the user per query: about 0.1–0.4 s at a million nodes on one CPU
thread here (``benchmarks/README.md``). This index reads a few thousand instead. Each vector added either
joins the group of the nearest group leader, when it is at cosine :data:`GROUP_COSINE` or more from it (a
restated fact, a small update: a near-duplicate), or leads a group of its own. The leaders form a FAISS
HNSW graph; a query walks the graph to the :data:`PROBE_GROUPS` leaders nearest to it and then scores the
members of their groups exactly, nearest leader first, at most :data:`MAX_SCORED` of them (a group holds at
most :data:`MAX_GROUP`: one more near-duplicate leads a group of its own).

Why groups: a plain HNSW graph over all the vectors (this module's previous form) reached recall@10 0.992
on 61K real MiniLM sentence vectors but 0.886 at a million, where those sentences carry about sixteen
near-duplicates each: a tight cluster of near-duplicates fills the candidate lists of the graph's
construction, so the graph's links to the rest of the space stay few and its greedy walk gets lost. An
inverted file (FAISS IVF-Flat, k-means lists) keeps such a cluster together, but real sentence vectors,
whose nearest neighbour is typically at cosine 0.67, have no tight clusters for its lists to follow: at a
million it read 128 of its 2,048 lists for recall 0.962 (p50 15.6 ms). Grouping gives the graph one node
per cluster and keeps every vector scored exactly: recall@10 0.993 at a million on the same corpus. With
all 252,581 sentences embedded (about three copies each at a million) and efConstruction 120, it reaches
recall@10 0.995 at a million with a p99 under 3 ms on one thread. Figures: ``benchmarks/results/
bench_index.json`` (this index), ``bench_index_hnsw.json`` and ``bench_index_ivf.json`` (the other two, on
the earlier corpus).

Nothing is trained: the groups form as vectors arrive, so a growing user never pays a retraining, and a user
without near-duplicates gets a plain HNSW graph over all its vectors. The vectors are kept in one array in
the order added (the leaders a second time in the graph: one vector per group), so an exact scan stays
possible: a fetch wider than :data:`MAX_FETCH` (a user whose nearest nodes were mostly superseded) is
answered by it. On a machine where FAISS sees a GPU the user's index moves to the GPU instead
(:mod:`.vectors`): an exact scan of a million vectors there takes well under a millisecond, so this index
is only for CPUs.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

GROUP_COSINE = 0.9
"""A vector at this cosine or more from its nearest leader joins that leader's group. Two sentences that say
different things rarely come this close with MiniLM (the median nearest other real sentence is at 0.67,
``results/bench_index.json`` ``real_nn_cosine``), while a reworded or slightly updated fact does; members
are scored exactly, so a loose group costs only reading a few more vectors."""

M = 24
"""Neighbours per leader in the graph (the base layer gets 2 M). On noisy MiniLM vectors 16 lost recall that
a larger ``EF_SEARCH`` only partly won back, at the same build time as 24."""

EF_CONSTRUCTION = 120
"""Candidates kept while inserting a leader: the slow part of building. On 250,000 real MiniLM sentence
vectors (nearly every one its own leader) 40 left the graph too sparse for recall@10 0.99 at any search
width up to 768 (0.983 at 384); 120 reached 0.995 at 384 for 1.7× the build time (87 against 52 s with the
two cores free), and M 32 added only 0.001."""

EF_SEARCH = 768
"""Candidates kept while searching the graph (at least the leaders asked for). 384 held recall@10 0.995 on
250,000 real sentence vectors, but at a million vectors built of fewer real sentences with copies (duplicate-free
at cosine 0.80, or about 40 near-duplicates per sentence) it fell to 0.985 / 0.988; 768 reaches 0.993 / 0.997
there for about 0.4 ms more at p50 (p99 3.6 ms). ``results/bench_index.json`` holds 192, 384 and 768,
``results/bench_index_corpora.json`` 384 and 768."""

PROBE_GROUPS = 64
"""Leaders whose groups are scored per query (more when a wider fetch asks). The exact top ten of a query
lies in the groups of a few of its nearest leaders, so recall is set by the graph walk (``EF_SEARCH``), not
by this; 64 is a margin that costs at most :data:`MAX_GROUP` inner products per group."""

MAX_GROUP = 32
"""Members a group holds at most: a near-duplicate of a full group's leader leads a group of its own. Without
this bound a query's cost grew with the groups it probed (16 / 20 ms p50 / p99 at a million vectors with
about 41 near-duplicates per sentence, every member of 64 groups scored); with it a query scores at most
``PROBE_GROUPS x MAX_GROUP`` members, whatever the duplicate structure."""

MAX_SCORED = PROBE_GROUPS * MAX_GROUP
"""Members scored exactly per query (or twice the fetch, if more), taken group by group from the nearest
leader on. Groups of an index saved before :data:`MAX_GROUP` may be larger: this keeps their queries bounded."""

ASSIGN_EF = 64
"""Candidates kept while looking for a new vector's leader. A miss only makes the vector a leader itself
(one more graph node), so this is smaller than ``EF_SEARCH``."""

ASSIGN_BATCH = 4096
"""Rows grouped per step: a user's first rows (all of them, when it crosses the threshold) would otherwise
all lead, near-duplicates included, as no leader exists before them."""

MAX_FETCH = 2048
"""Widest fetch answered through the graph; a wider one scans the stored vectors exactly."""


def faiss_module() -> Any:
    """FAISS, or an error naming the extra that installs it."""
    from promem_fast.deps import require

    return require("faiss", "cpu", "faiss-cpu")


def _graph(dim: int) -> Any:
    faiss = faiss_module()
    graph = faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = EF_CONSTRUCTION
    return graph


class ApproximateIndex:
    """Normalised vectors, rows numbered in the order they were added, grouped behind an HNSW graph of leaders.

    ``group[i]``: the group of row ``i``; group ``g`` is led by row ``leaders[g]`` (graph node ``g``)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.graph = _graph(dim)
        self._vectors = np.zeros((0, dim), np.float32)
        """Capacity grows by doubling; rows ``len(self)`` and beyond are unused."""
        self._size = 0
        self.group = np.zeros(0, np.int64)
        self.leaders = np.zeros(0, np.int64)
        self._members: list[list[int]] = []
        self.probe_groups = PROBE_GROUPS
        """Groups scored per query (a benchmark may vary it on one index; the store keeps the default)."""

    def __len__(self) -> int:
        return self._size

    def add(self, vectors: np.ndarray) -> None:
        """Append rows: each joins the group of its nearest leader at cosine ``GROUP_COSINE`` or more, or leads
        a new group. Rows are grouped :data:`ASSIGN_BATCH` at a time against the leaders before them (two
        near-duplicates in one batch may both lead)."""
        vectors = np.ascontiguousarray(vectors, np.float32).reshape(-1, self.dim)
        self._reserve(self._size + len(vectors))
        for start in range(0, len(vectors), ASSIGN_BATCH):
            self._add_batch(vectors[start:start + ASSIGN_BATCH])

    def _add_batch(self, vectors: np.ndarray) -> None:
        faiss = faiss_module()
        start = self._size
        self._vectors[start:start + len(vectors)] = vectors
        self._size += len(vectors)
        group = np.full(len(vectors), -1, np.int64)
        if self.graph.ntotal:
            params = faiss.SearchParametersHNSW()
            params.efSearch = ASSIGN_EF
            scores, nearest = self.graph.search(vectors, 1, params=params)
            close = (nearest[:, 0] >= 0) & (scores[:, 0] >= GROUP_COSINE)
            group[close] = nearest[close, 0]
        if (group >= 0).any():  # a full group takes no more members: the row leads a group of its own
            sizes: dict[int, int] = {}
            for row in np.flatnonzero(group >= 0).tolist():
                g = int(group[row])
                taken = sizes.get(g, len(self._members[g]))
                if taken >= MAX_GROUP:
                    group[row] = -1
                else:
                    sizes[g] = taken + 1
        new = np.flatnonzero(group < 0)
        group[new] = self.graph.ntotal + np.arange(len(new))
        if len(new):
            self.graph.add(np.ascontiguousarray(vectors[new]))
            self.leaders = np.concatenate([self.leaders, start + new])
            self._members.extend([] for _ in new)
        for row, g in enumerate(group.tolist(), start):
            self._members[g].append(row)
        self.group = np.concatenate([self.group, group])

    def _reserve(self, rows: int) -> None:
        if rows > len(self._vectors):
            grown = np.zeros((max(rows, 2 * len(self._vectors)), self.dim), np.float32)
            grown[:self._size] = self._vectors[:self._size]
            self._vectors = grown

    def vectors(self) -> np.ndarray:
        """Every vector held, row ``i`` as added ``i``-th."""
        return self._vectors[:self._size]

    def search(self, query: np.ndarray, fetch: int, *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Rows and inner products of (about) the ``fetch`` nearest vectors to one query, best first;
        ``exact``: of exactly those, by a scan of every stored vector (the graph's groups and walk depend on
        the order the vectors came in)."""
        q = np.ascontiguousarray(query, np.float32).reshape(self.dim)
        if exact or fetch > MAX_FETCH or fetch >= len(self):
            rows, scores = np.arange(len(self)), self.vectors() @ q  # a view: no copy of every vector
        else:
            faiss = faiss_module()
            wanted = min(int(self.graph.ntotal), max(self.probe_groups, fetch))
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(EF_SEARCH, wanted)
            _, groups = self.graph.search(q.reshape(1, self.dim), wanted, params=params)
            rows = self._nearest_members(groups[0], max(MAX_SCORED, 2 * fetch))
            scores = self._vectors[rows] @ q
        best = np.argpartition(-scores, fetch - 1)[:fetch] if fetch < len(rows) else np.arange(len(rows))
        best = best[np.argsort(-scores[best], kind="stable")]
        return rows[best], scores[best]

    def _nearest_members(self, groups: np.ndarray, budget: int) -> np.ndarray:
        """Rows of ``groups`` (nearest leader first) up to ``budget`` rows: the last group taken may be cut."""
        members = self._members
        picked: list[int] = []
        for g in groups.tolist():
            if g < 0:
                break
            picked.extend(members[g])
            if len(picked) >= budget:
                del picked[budget:]
                break
        return np.array(picked, np.int64)

    def serialize(self) -> np.ndarray:
        """The vectors, their groups and the leaders' graph as bytes (``uint8``), for the user's index file."""
        out = io.BytesIO()
        np.savez(out, vectors=self.vectors(), group=self.group, leaders=self.leaders,
                 graph=faiss_module().serialize_index(self.graph))
        return np.frombuffer(out.getvalue(), np.uint8)

    @classmethod
    def deserialize(cls, data: np.ndarray, dim: int) -> ApproximateIndex:
        """An index saved by :meth:`serialize`."""
        with np.load(io.BytesIO(np.ascontiguousarray(data, np.uint8).tobytes())) as saved:
            vectors, group, leaders = saved["vectors"], saved["group"], saved["leaders"]
            graph = faiss_module().deserialize_index(np.ascontiguousarray(saved["graph"], np.uint8))
        if vectors.shape[1:] != (dim,) or graph.d != dim or graph.ntotal != len(leaders) or len(group) != len(vectors):
            raise ValueError(f"grouped index of dimension {vectors.shape[1:]} does not fit dimension {dim}")
        found = cls(dim)
        found.graph, found._vectors, found._size = graph, np.ascontiguousarray(vectors, np.float32), len(vectors)
        found.group, found.leaders = group.astype(np.int64), leaders.astype(np.int64)
        order = np.argsort(found.group, kind="stable")
        bounds = np.searchsorted(found.group[order], np.arange(len(leaders) + 1))
        found._members = [order[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return found
