"""Approximate search for large users: a FAISS inverted-file index (IVF-Flat, inner product).

Exact search reads every vector of the user per query: about 0.1–0.4 s at a million nodes on one CPU
thread here (``benchmarks/README.md``). An inverted file splits the vectors into lists around k-means
centroids; a query compares itself with the centroids, then reads only the ``NPROBE`` nearest lists, with
exact inner products inside them. It replaced an HNSW graph, which on the same real embeddings padded to a
million vectors reached recall@10 0.886 after a 21-minute build: a user's memory holds many near-duplicate
nodes (restated facts, small updates), and tight clusters of near-duplicates are where a graph's greedy
walk gets lost, while an inverted file keeps such a cluster in one list. Figures for both choices are in
``benchmarks/results/bench_index.json`` (``python benchmarks/bench_index.py``).

The index is built once the user reaches ``EngineConfig.search_approximate_min`` vectors and grows with
each vector added afterwards. Its lists are trained on the vectors it starts from, so it is trained again,
from all the vectors it holds, when the user has grown to :data:`RETRAIN_GROWTH` times the size it was
trained at (see :meth:`ApproximateIndex.add`). It keeps the vectors themselves (the lists hold them
whole, with a map from row to place), so an exact answer stays possible without a second copy: a fetch
wider than :data:`MAX_FETCH` reads every list. On a machine where FAISS sees a GPU the user's index moves
to the GPU instead (:mod:`.vectors`): an exact scan of a million vectors there takes well under a
millisecond, so the inverted file is only for CPUs.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

LISTS_PER_ROOT = 4
"""Lists (centroids) per square root of the vectors trained on: 4,000 at a million. More lists make each
list shorter (less to read per probe) but need more probes for the same recall and cost more to train;
``4·√N`` is the usual middle, and measured at 10K–1M in ``results/bench_index.json``."""

MIN_POINTS_PER_LIST = 39
"""Training vectors per list below which FAISS's k-means warns that its centroids are poor: a small user
(a test, or a store with a low ``search_approximate_min``) gets fewer, longer lists instead."""

TRAIN_POINTS_PER_LIST = 64
"""Training sample per list: k-means on all of a million vectors would take many minutes on two cores;
64 per list (256K vectors for 4,000 lists) places the centroids as well for this use, since every vector
is then filed under its nearest centroid and read exactly."""

TRAIN_ITERATIONS = 10
"""k-means passes: the centroids stop moving much after about ten, and the last passes only cost time."""

RETRAIN_GROWTH = 4
"""An index trained at N vectors is trained again at ``4·N``: the list count (``4·√N``) has doubled by
then, and lists twice as long as planned would make each query read twice as much. Each training costs
about as much as the vectors it covers, so over a user's growth the trainings add up to a fixed share of
the adds (amortised): 50K, 200K, 800K, 3.2M… for a user that starts at the default threshold."""

NPROBE = 64
"""Lists read per query. Chosen on real MiniLM dialogue embeddings padded to a million with noisy copies:
the smallest that kept recall@10 at or above 0.99 against exact search, with p99 well under 5 ms on one
thread (``results/bench_index.json``, figures ``recall_at_10_*`` and ``approx_*_p99_ms``)."""

MAX_FETCH = 2048
"""Widest fetch answered approximately; a wider one reads every list (an exact answer)."""


def faiss_module() -> Any:
    """FAISS, or an error naming the extra that installs it."""
    from promem_fast.deps import require

    return require("faiss", "cpu", "faiss-cpu")


def lists_for(n: int) -> int:
    """Lists for an index trained on ``n`` vectors: ``LISTS_PER_ROOT·√n``, at most ``n / MIN_POINTS_PER_LIST``."""
    return max(1, min(round(LISTS_PER_ROOT * math.sqrt(n)), n // MIN_POINTS_PER_LIST))


class ApproximateIndex:
    """An inverted file (inner product) over normalised vectors, rows numbered in the order they were added.

    ``trained_at``: vectors the lists were trained on (0 until the first :meth:`add`)."""

    def __init__(self, dim: int, ivf: Any | None = None, trained_at: int = 0) -> None:
        self.dim = dim
        self.ivf = ivf
        self.trained_at = trained_at
        self.nprobe = NPROBE
        """Lists read per query (a benchmark may vary it on one index; the store keeps the default)."""

    def __len__(self) -> int:
        return 0 if self.ivf is None else int(self.ivf.ntotal)

    @property
    def lists(self) -> int:
        return 0 if self.ivf is None else int(self.ivf.nlist)

    def add(self, vectors: np.ndarray) -> None:
        """Append rows; the first add trains the lists, and an add that brings the index to
        ``RETRAIN_GROWTH`` times its training size trains them again on everything held."""
        vectors = np.ascontiguousarray(vectors, np.float32).reshape(-1, self.dim)
        if self.ivf is not None and len(self) + len(vectors) < RETRAIN_GROWTH * self.trained_at:
            self.ivf.add(vectors)
            return
        held = self.vectors()
        self._train(np.concatenate([held, vectors]) if len(held) else vectors)

    def _train(self, vectors: np.ndarray) -> None:
        faiss = faiss_module()
        n = len(vectors)
        lists = lists_for(n)
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), self.dim, lists, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.niter = TRAIN_ITERATIONS
        ivf.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
        ivf.cp.seed = 1234
        ivf.train(vectors)
        ivf.add(vectors)
        ivf.make_direct_map()  # row → place in its list: vectors() and its order survive a retrain
        self.ivf, self.trained_at = ivf, n
        log.info("inverted file of %d lists trained on %d vectors", lists, n)

    def vectors(self) -> np.ndarray:
        """Every vector held, row ``i`` as added ``i``-th."""
        if self.ivf is None or len(self) == 0:
            return np.zeros((0, self.dim), np.float32)
        return self.ivf.reconstruct_n(0, len(self))

    def search(self, query: np.ndarray, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and inner products of (about) the ``fetch`` nearest vectors to one query, best first."""
        if self.ivf is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        faiss = faiss_module()
        q = np.ascontiguousarray(query, np.float32).reshape(1, self.dim)
        params = faiss.SearchParametersIVF()
        params.nprobe = self.lists if fetch > MAX_FETCH or fetch >= len(self) else min(self.nprobe, self.lists)
        scores, rows = self.ivf.search(q, fetch, params=params)
        keep = rows[0] >= 0
        return rows[0][keep], scores[0][keep]

    def serialize(self) -> np.ndarray:
        """The lists, their centroids and vectors as bytes (``uint8``), for the user's index file."""
        if self.ivf is None:
            raise ValueError("an empty index has nothing to save")
        return faiss_module().serialize_index(self.ivf)

    @classmethod
    def deserialize(cls, data: np.ndarray, dim: int, trained_at: int) -> ApproximateIndex:
        """An index saved by :meth:`serialize` that was trained on ``trained_at`` vectors."""
        index = _read(data, dim)
        index.make_direct_map()
        return cls(dim, index, trained_at)


def _read(data: np.ndarray, dim: int) -> Any:
    faiss = faiss_module()
    index = faiss.deserialize_index(np.ascontiguousarray(data, np.uint8))
    if not isinstance(index, faiss.IndexIVFFlat) or index.d != dim:
        raise ValueError(f"{type(index).__name__} of dimension {index.d}, expected an IndexIVFFlat of {dim}")
    return index


def saved_vectors(data: np.ndarray, dim: int) -> np.ndarray:
    """The vectors of a saved index in row order, without it (for a store that wants them searched exactly)."""
    index = _read(data, dim)
    index.make_direct_map()
    return index.reconstruct_n(0, int(index.ntotal))
