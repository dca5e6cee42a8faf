"""Inner-product search over one user's node vectors: FAISS (GPU when FAISS sees one) or numpy.

Search is exact, except for users of ``EngineConfig.search_approximate_min`` vectors or more on a CPU with
FAISS, whose flat index becomes an HNSW graph over groups of near-duplicate vectors (:mod:`.ann`); a search
asked to be exact (update judging's) scans that graph's vectors instead.

Vectors live in SQLite (float32 blobs, normalised, so an inner product is a cosine); an index is only a cache
of them. It is filled from SQLite when first needed and kept fresh by reading the rows added since (node ids
only grow), and rebuilt whole when the user's ``generation`` says nodes were removed, so a reader process
sees a writer's sessions without any message between them. A large user's index is also kept in a file
next to the store (:meth:`VectorIndex.save`), read back by the next process instead of a million rows,
and ignored when it belongs to another store file or generation.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from promem_fast.backends.base import TIE_TOLERANCE
from promem_fast.private import private_dir

from .ann import ApproximateIndex

log = logging.getLogger(__name__)

IndexKind = Literal["auto", "faiss", "numpy"]

CACHE_MIN_VECTORS = 50_000
"""Users with at least this many vectors get their index saved to a file (smaller ones refill in well under
a second from SQLite, and a file per user of a thousand-user store would cost more than it saves)."""


def _faiss() -> Any | None:
    try:
        import faiss
    except ImportError:
        return None
    return faiss


GPU_MIN_VECTORS = 100_000
"""Vectors from which a user's FAISS index moves to the GPU: below it one query is a few milliseconds on the
CPU, and a thousand users' small indexes would each hold GPU memory."""


GPU_MAX_K = 2048
"""Largest k FAISS's GPU k-selection takes; a wider fetch (long runs of ties) searches a CPU copy."""


@functools.lru_cache(maxsize=1)
def _gpu_resources() -> Any:
    """One set of GPU resources (streams, scratch memory) shared by every index of the process."""
    faiss = _faiss()
    assert faiss is not None
    return faiss.StandardGpuResources()


def resolve_kind(kind: IndexKind) -> Literal["faiss", "numpy"]:
    """``auto``: FAISS when it is installed, numpy otherwise (both exact; FAISS is the faster on large users)."""
    if kind == "auto":
        return "faiss" if _faiss() is not None else "numpy"
    if kind == "faiss" and _faiss() is None:
        from promem_fast.deps import require

        require("faiss", "cpu", "faiss-cpu")
    return kind


class VectorIndex:
    """One user's vectors with their node ids; ``search`` returns the best ids, best first.

    Ties are broken by the lower node id (the older node), so results never depend on the index kind.
    ``approximate_min``: from this many vectors (0: never) a FAISS index on the CPU becomes a grouped HNSW graph.
    """

    def __init__(self, dim: int, kind: Literal["faiss", "numpy"], generation: int, approximate_min: int = 0) -> None:
        self.dim = dim
        self.kind = kind
        self.generation = generation
        self.approximate_min = approximate_min
        self._approx: ApproximateIndex | None = None
        """Set once the user is large enough: then it holds the vectors and ``_faiss`` is None."""
        self.last_id = 0
        """The highest node id held: rows above it are the ones added since the index was filled."""
        self.ids = np.zeros(0, np.int64)
        self.saved = 0
        """Vectors held when last saved or loaded (the file is behind when ``len(self)`` is larger)."""
        self._blocks: list[np.ndarray] = []
        """numpy kind: the added blocks, joined into one matrix at the next search."""
        self._faiss: Any | None = None
        if kind == "faiss":
            faiss = _faiss()
            assert faiss is not None
            self._faiss = faiss.IndexFlatIP(dim)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def approximate(self) -> bool:
        """Whether searches go through the grouped graph (exact otherwise)."""
        return self._approx is not None

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        vectors = np.ascontiguousarray(vectors, np.float32).reshape(len(ids), self.dim)
        self.ids = np.concatenate([self.ids, np.asarray(ids, np.int64)])
        if self._approx is not None:
            self._approx.add(vectors)
        elif self._faiss is not None:
            self._faiss.add(vectors)
            self._maybe_to_gpu()
            self._maybe_approximate()
        else:
            self._blocks.append(vectors.copy())
        self.last_id = max(self.last_id, int(ids.max()))

    def _maybe_to_gpu(self) -> None:
        """Move a large user's index to the GPU (once) when FAISS sees one; small ones stay on the CPU."""
        faiss = _faiss()
        assert faiss is not None
        if len(self) >= GPU_MIN_VECTORS and isinstance(self._faiss, faiss.IndexFlat) and faiss.get_num_gpus() > 0:
            self._faiss = faiss.index_cpu_to_gpu(_gpu_resources(), 0, self._faiss)

    def _maybe_approximate(self) -> None:
        """Past ``approximate_min`` vectors, the flat CPU index becomes a grouped HNSW graph holding the
        same vectors (built once, then grown). Not on a machine where FAISS sees a GPU: an exact scan there
        is faster."""
        faiss = _faiss()
        assert faiss is not None
        if (self.approximate_min > 0 and len(self) >= self.approximate_min
                and isinstance(self._faiss, faiss.IndexFlat) and faiss.get_num_gpus() == 0):
            approx = ApproximateIndex(self.dim)
            approx.add(self.vectors())
            self._approx, self._faiss = approx, None
            log.info("vector index of %d vectors: grouped graph of %d leaders built", len(self), approx.graph.ntotal)

    def vectors(self) -> np.ndarray:
        """Every vector held, row ``i`` for ``ids[i]``."""
        if self._approx is not None:
            return self._approx.vectors()
        if self._faiss is None:
            if len(self._blocks) > 1:
                self._blocks = [np.concatenate(self._blocks)]
            return self._blocks[0] if self._blocks else np.zeros((0, self.dim), np.float32)
        faiss = _faiss()
        assert faiss is not None
        index = self._faiss if isinstance(self._faiss, faiss.IndexFlat) else faiss.index_gpu_to_cpu(self._faiss)
        return faiss.vector_to_array(index.codes).view(np.float32).reshape(-1, self.dim)

    def save(self, path: Path, store_id: str) -> None:
        """Write the index to ``path`` (atomically: a reader sees the old file or the new one), readable by
        the owner only: it holds every vector of the user. A grouped graph is saved with its vectors, so
        the next process does not build it again."""
        private_dir(path.parent)  # mkstemp makes the file 0600; the folder is the owner's alone too
        handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
        arrays = {"grouped": self._approx.serialize()} if self._approx is not None else {"vectors": self.vectors()}
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, ids=self.ids, store_id=np.array(store_id),
                         state=np.array([self.generation, self.last_id, self.dim], np.int64), **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.saved = len(self)

    @classmethod
    def load(cls, path: Path, kind: Literal["faiss", "numpy"], generation: int, dim: int,
             store_id: str, approximate_min: int = 0) -> VectorIndex | None:
        """The index saved at ``path`` if it is this store's, of this generation and dimension; else None.

        A saved grouped graph is used as it is when the store still wants one for this size (and FAISS is
        the kind); otherwise its vectors fill an exact index. The file of an older version, holding a plain
        HNSW graph (``graph``), is not read: the index is refilled from SQLite and saved in its place on
        close."""
        try:
            with np.load(path) as saved:
                if str(saved["store_id"]) != store_id or saved["state"].tolist()[::2] != [generation, dim]:
                    return None
                found = cls(dim, kind, generation, approximate_min)
                ids = saved["ids"].astype(np.int64)
                if "vectors" in saved.files:
                    found.add(ids, saved["vectors"])
                elif "grouped" in saved.files and kind == "faiss" and 0 < approximate_min <= len(ids):
                    found._approx = ApproximateIndex.deserialize(saved["grouped"], dim)
                    found._faiss, found.ids = None, ids
                    if len(found._approx) != len(found):
                        return None
                elif "grouped" in saved.files and _faiss() is not None:
                    found.add(ids, ApproximateIndex.deserialize(saved["grouped"], dim).vectors())
                else:  # an older version's plain HNSW graph, or a grouped one without FAISS to read it
                    return None
                found.last_id = int(saved["state"][1])
        except (OSError, ValueError, KeyError) as exc:
            log.debug("vector index file %s not used: %s", path, exc)
            return None
        found.saved = len(found)
        return found

    def search(self, query: np.ndarray, k: int, *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best node ids for one normalised query vector and their scores, best first.

        Scores within :data:`~promem_fast.backends.base.TIE_TOLERANCE` count as equal and the lower id
        wins, so the answer is the same from FAISS and numpy: the fetch widens while the last candidate
        still ties with the k-th. ``exact``: a grouped graph's vectors are scanned, not walked.
        """
        n, k = len(self), min(k, len(self))
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        q = np.ascontiguousarray(query, np.float32).reshape(1, self.dim)
        return self._best(lambda fetch: self._top(q, fetch, n, exact), k, n)

    def search_many(self, queries: np.ndarray, k: int, *, exact: bool = False
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for each row of ``queries``. An exact search of several queries reads the stored
        vectors once for all of them (one matrix product): a scan is bound by reading the vectors, so a
        session's new memories cost about what one does (update judging scans for each)."""
        batch = np.ascontiguousarray(queries, np.float32).reshape(-1, self.dim)
        if not exact or len(batch) < 2 or self._faiss is not None:  # a flat FAISS index (a small user's, or
            # on a GPU) is searched query by query: reading its vectors out for one product would copy them
            return [self.search(q, k, exact=exact) for q in batch]
        n, k = len(self), min(k, len(self))
        if k <= 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in batch]
        columns = (self.vectors() @ batch.T).T
        return [self._best(lambda fetch, c=c: _top_of(c, fetch, n), k, n) for c in columns]

    def _best(self, top: Callable[[int], tuple[np.ndarray, np.ndarray]], k: int, n: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of ``top(fetch)`` (rows and scores), widening the fetch while its last score
        still ties with the k-th; ties go to the lower id."""
        fetch = min(n, k + 16)
        while True:
            rows, scores = top(fetch)
            if fetch >= n or scores.min() < np.sort(scores)[::-1][k - 1] - TIE_TOLERANCE:
                break
            fetch = min(n, fetch * 4)
        order = np.lexsort((self.ids[rows], -np.round(scores / TIE_TOLERANCE)))[:k]
        return self.ids[rows][order], scores[order].astype(np.float32)

    def _top(self, q: np.ndarray, fetch: int, n: int, exact: bool) -> tuple[np.ndarray, np.ndarray]:
        if self._approx is not None:
            return self._approx.search(q, fetch, exact=exact)
        if self._faiss is not None:
            faiss, index = _faiss(), self._faiss
            assert faiss is not None
            if fetch > GPU_MAX_K and not isinstance(index, faiss.IndexFlat):
                index = faiss.index_gpu_to_cpu(index)
            scores, rows = index.search(q, fetch)
            keep = rows[0] >= 0
            return rows[0][keep], scores[0][keep]
        return _top_of(self.vectors() @ q[0], fetch, n)


def _top_of(scores: np.ndarray, fetch: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and scores of the ``fetch`` best of ``n`` scores (unordered)."""
    rows = np.argpartition(-scores, fetch - 1)[:fetch] if fetch < n else np.arange(n)
    return rows, scores[rows]


def to_blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, np.float32).tobytes()


def from_blobs(blobs: list[bytes], dim: int) -> np.ndarray:
    if not blobs:
        return np.zeros((0, dim), np.float32)
    return np.frombuffer(b"".join(blobs), np.float32).reshape(len(blobs), dim)
