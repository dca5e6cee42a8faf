"""The SQLite backend of :mod:`.api`: one file per store, the embedded default.

What it keeps: WAL, secure delete, 0600 files, SQLCipher with a key file (:mod:`.connection`), the schema
and its migrations (:mod:`.schema`), and each user's vector index in process (:mod:`.vectors`: exact, or a
grouped HNSW graph for a large user), filled from the file and saved beside it for the next process.
Lexical search is SQLite's FTS5 over the nodes' text and details (:mod:`.lexical`'s ``memory_fts``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np

from promem_fast.private import shred

from .connection import StoreError, checkpoint, transaction
from .lexical import purge_deleted, search_store
from .pagecache import warm
from .schema import connect
from .vectors import CACHE_MIN_VECTORS, IndexKind, VectorIndex, from_blobs, resolve_kind, to_blob

log = logging.getLogger(__name__)

LOAD_CHUNK = 65_536
"""Vectors read per step when an index is filled (bounds the memory a large user takes to load)."""


class SqlitePersistence:
    """An SQLite store file (see the module); one object may serve several threads."""

    dialect: Literal["sqlite"] = "sqlite"

    def __init__(self, path: Path, *, read_only: bool = False, key_file: str | Path | None = None,
                 approximate_min: int = 0, index: IndexKind = "auto") -> None:
        self.path = path
        self.location = str(path)
        self.read_only = read_only
        self.encrypted = key_file is not None  # then no vector index file: it would hold vectors in the clear
        self.approximate_min = approximate_min
        self.cache_min_vectors = CACHE_MIN_VECTORS
        """Users with at least this many vectors get their index saved next to the store on close, and the
        first such index loaded has the file read into the page cache (:mod:`.pagecache`)."""
        self.read_ahead = True
        """Whether a large user's first index load reads the file ahead (:mod:`.pagecache`)."""
        self.reading_ahead: threading.Thread | None = None
        """The thread reading the file ahead, once started (a benchmark waits for it)."""
        self._read_ahead_tried = False
        self._db = connect(path, read_only=read_only, key_file=key_file)
        self._kind = resolve_kind(index)
        self._indexes: dict[int, VectorIndex] = {}
        (self._store_id,) = self._db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        self._lock = threading.RLock()
        """Writes and index refreshes take turns, so a transaction is never shared and no row enters an
        index twice."""

    # ------------------------------------------------------------------------------------ rows
    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> sqlite3.Cursor:
        return self._db.executemany(sql, rows)

    @staticmethod
    def encode_vector(vector: np.ndarray) -> bytes:
        return to_blob(vector)

    @staticmethod
    def vector_sql(column: str) -> str:
        return column

    @staticmethod
    def decode_vectors(values: Sequence[Any], dim: int) -> np.ndarray:
        return from_blobs(list(values), dim)

    @contextmanager
    def transaction(self, *, exclusive: bool = True) -> Iterator[SqlitePersistence]:
        """Every write transaction of a file is exclusive (``BEGIN IMMEDIATE``), whatever ``exclusive`` says."""
        if self.read_only:
            raise StoreError(f"{self.path}: the store was opened read-only")
        with transaction(self._db, self._lock):
            yield self

    @contextmanager
    def snapshot(self) -> Iterator[SqlitePersistence]:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self
            finally:
                self._db.execute("COMMIT")

    # ------------------------------------------------------------------------------------ vectors
    def nearest(self, user_pk: int, vector: np.ndarray, k: int, *, exact: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
        return self.index(user_pk).search(vector, k, exact=exact)

    def nearest_many(self, user_pk: int, vectors: np.ndarray, k: int, *, exact: bool = False
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.index(user_pk).search_many(vectors, k, exact=exact)

    def vector_count(self, user_pk: int) -> int:
        return len(self.index(user_pk))

    def _dim(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        return 1 if row is None else int(row[0])

    def dim_recorded(self, dim: int) -> None:
        """Nothing to do: a blob column takes any dimension, and indexes are built in process."""

    def index(self, user_pk: int) -> VectorIndex:
        """The user's vector index, brought up to date with the file (rows added since; rebuilt after removals)."""
        with self._lock:
            row = self._db.execute("SELECT generation FROM users WHERE id = ?", (user_pk,)).fetchone()
            if row is None:  # deleted by another connection since it was looked up: no memory is left
                self._indexes.pop(user_pk, None)
                return VectorIndex(self._dim(), self._kind, -1)
            (generation,) = row
            found = self._indexes.get(user_pk)
            if found is None or found.generation != generation:
                found = (not self.encrypted and VectorIndex.load(self._index_file(user_pk), self._kind, generation,
                                                                 self._dim(), self._store_id, self.approximate_min)
                         or VectorIndex(self._dim(), self._kind, generation, self.approximate_min))
                self._indexes[user_pk] = found
            cursor = self._db.execute("SELECT id, vector FROM nodes WHERE user_id = ? AND id > ? AND vector IS NOT "
                                      "NULL ORDER BY id", (user_pk, found.last_id))
            while new := cursor.fetchmany(LOAD_CHUNK):
                found.add(np.array([r[0] for r in new], np.int64), from_blobs([r[1] for r in new], found.dim))
            if self.read_ahead and not self._read_ahead_tried and len(found) >= self.cache_min_vectors:
                self._read_ahead_tried = True  # once per store object: the file is the same for every user
                self.reading_ahead = warm(self.path)
            return found

    def _index_file(self, user_pk: int) -> Path:
        return self.path.with_name(f"{self.path.name}.vectors") / f"user-{user_pk}.npz"

    def removed(self, user_pk: int) -> None:
        """Forget the user's cached index and its file: both still hold the removed vectors, and ``close``
        would otherwise save them again (a deleted user's index would stay on disk for good)."""
        with self._lock:
            self._indexes.pop(user_pk, None)
        shred(self._index_file(user_pk))

    # ------------------------------------------------------------------------------------ words
    def lexical(self, user_pk: int, terms: Sequence[str], k: int, *, source: bool = True, exchange: bool = True
                ) -> list[tuple[int, float]]:
        with self._lock:  # FTS5 aborts a query that a write on the same connection overlaps
            return search_store(self._db, user_pk, terms, k, source, exchange)

    # ------------------------------------------------------------------------------------ lifecycle
    def compact(self) -> None:
        if self.read_only:
            return
        with transaction(self._db, self._lock):  # deleted nodes' words leave the full-text index's pages
            purge_deleted(self._db)
        with self._lock:  # the pages a delete replaced leave the -wal file too
            checkpoint(self._db, self.path)

    def analyze(self) -> None:
        """``PRAGMA optimize``: SQLite analyzes what its planner lacks statistics for, only where it helps."""
        if not self.read_only:
            with self._lock:
                self._db.execute("PRAGMA optimize")

    def close(self) -> None:
        """Close the file; large users' vector indexes are saved first for the next process (not when read-only:
        then nothing of the store's is written)."""
        for user_pk, index in self._indexes.items():
            if (not (self.encrypted or self.read_only) and (len(index) >= self.cache_min_vectors or index.approximate)
                    and len(index) > index.saved and self._current(user_pk, index)):
                try:
                    index.save(self._index_file(user_pk), self._store_id)
                except OSError as exc:  # a cache: a store on a read-only medium just refills next time
                    log.info("vector index of user %d not saved: %s", user_pk, exc)
        self._db.close()

    def _current(self, user_pk: int, index: VectorIndex) -> bool:
        """Whether ``index`` is still the user's (not removed, no nodes removed since, maybe by another
        connection): a stale one is not saved, so removed vectors never go back to disk."""
        row = self._db.execute("SELECT generation FROM users WHERE id = ?", (user_pk,)).fetchone()
        return row is not None and int(row[0]) == index.generation
