"""Approximate search for large users: a FAISS HNSW graph over the user's vectors.

Exact search reads every vector of the user per query: about 0.1–0.4 s at a million nodes on one CPU
thread here (``benchmarks/README.md``). An HNSW graph visits a few thousand of them instead. It is built
once the user reaches ``EngineConfig.search_approximate_min`` vectors, grows with each vector added
afterwards, and keeps the vectors themselves (its flat storage), so an exact scan stays possible without a
second copy: a fetch wider than :data:`MAX_FETCH` (a user whose nearest nodes were mostly superseded) is
answered by that scan. On a machine where FAISS sees a GPU the user's index moves to the GPU instead
(:mod:`.vectors`): an exact scan of a million vectors there takes well under a millisecond, so the graph
is only for CPUs.

Parameters were chosen on real embeddings (all-MiniLM-L6-v2 of dialogue sentences, ``bench_index.py``):
recall@10 against exact search and query time at 10K–1M vectors are in ``benchmarks/README.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

M = 24
"""Neighbours per node in the graph (the base layer gets 2 M): memory 2 M × 4 bytes per vector on top of
the vector itself (192 of MiniLM's 1,536 bytes). On noisy MiniLM vectors 16 lost recall that a larger
``EF_SEARCH`` only partly won back, at the same build time as 24."""

EF_CONSTRUCTION = 40
"""Candidates kept while inserting a vector: building is the slow part (at 80, with M 32, 100K vectors
took about five minutes on two loaded cores); a larger value buys recall with build time."""

EF_SEARCH = 256
"""Candidates kept while searching (at least the number of results asked for). On 61,440 real MiniLM
sentence vectors recall@10 was 0.983 at 128 and 0.992 at 256, for a median under a millisecond either way
(``results/bench_index.json``)."""

MAX_FETCH = 2048
"""Widest fetch the graph answers; wider ones scan the stored vectors exactly."""


def faiss_module() -> Any:
    """FAISS, or an error naming the extra that installs it."""
    from promem_fast.deps import require

    return require("faiss", "cpu", "faiss-cpu")


class ApproximateIndex:
    """An HNSW graph (inner product) over normalised vectors, rows numbered in the order they were added."""

    def __init__(self, dim: int, graph: Any | None = None) -> None:
        faiss = faiss_module()
        self.dim = dim
        self.graph = graph if graph is not None else faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)
        if graph is None:
            self.graph.hnsw.efConstruction = EF_CONSTRUCTION

    def __len__(self) -> int:
        return int(self.graph.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        self.graph.add(np.ascontiguousarray(vectors, np.float32).reshape(-1, self.dim))

    def _storage(self) -> Any:
        return faiss_module().downcast_index(self.graph.storage)

    def vectors(self) -> np.ndarray:
        """Every vector held, row ``i`` as added ``i``-th."""
        codes = faiss_module().vector_to_array(self._storage().codes)
        return codes.view(np.float32).reshape(-1, self.dim)

    def search(self, query: np.ndarray, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and inner products of (about) the ``fetch`` nearest vectors to one query, best first."""
        faiss = faiss_module()
        q = np.ascontiguousarray(query, np.float32).reshape(1, self.dim)
        if fetch > MAX_FETCH or fetch >= len(self):
            scores, rows = self._storage().search(q, fetch)
        else:
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(EF_SEARCH, fetch)
            scores, rows = self.graph.search(q, fetch, params=params)
        keep = rows[0] >= 0
        return rows[0][keep], scores[0][keep]

    def serialize(self) -> np.ndarray:
        """The graph and its vectors as bytes (``uint8``), for the user's index file."""
        return faiss_module().serialize_index(self.graph)

    @classmethod
    def deserialize(cls, data: np.ndarray, dim: int) -> ApproximateIndex:
        graph = faiss_module().deserialize_index(np.ascontiguousarray(data, np.uint8))
        if graph.d != dim:
            raise ValueError(f"graph of dimension {graph.d}, expected {dim}")
        return cls(dim, graph)
