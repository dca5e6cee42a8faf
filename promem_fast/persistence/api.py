"""The persistence API: what the memory layer (:mod:`promem_fast.store`) may ask of where memory is kept.

Two backends implement it: :class:`~.sqlite.SqlitePersistence` (one file, the embedded default: SQLCipher,
secure delete, grouped HNSW index in process) and :class:`~.postgres.PostgresPersistence` (PostgreSQL with
pgvector, for several API replicas and engine workers over one database). Above this line nothing knows which
one it talks to: SQL is written once, with ``?`` placeholders and the statements both dialects share
(``INSERT ... ON CONFLICT``, ``RETURNING``); vectors go through :meth:`Persistence.nearest`, words through
:meth:`Persistence.lexical`. :func:`~.opening.open_persistence` picks the backend from the location.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import numpy as np

DB_URL_ENV = "PROMEM_DB_URL"
"""The environment variable naming the database when no ``--db`` is given."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Cursor(Protocol):
    """The part of a DB-API cursor the layers above use."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ...) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Rows:
    """A finished statement's rows, read like a cursor after its connection went back to others."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows, self._at, self.rowcount = rows, 0, rowcount

    def fetchone(self) -> Any:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchmany(self, size: int = 1) -> list[Any]:
        part = self._rows[self._at:self._at + size]
        self._at += len(part)
        return part

    def fetchall(self) -> list[Any]:
        part = self._rows[self._at:]
        self._at = len(self._rows)
        return part

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class Database(Protocol):
    """A connection as the row functions use it: ``?`` placeholders, either backend."""

    dialect: Literal["sqlite", "postgresql"]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any: ...

    def encode_vector(self, vector: np.ndarray) -> Any:
        """One vector as the ``vector`` column takes it."""
        ...

    def vector_sql(self, column: str) -> str:
        """The SQL expression that reads ``column`` (a ``vector`` column) back for :meth:`decode_vectors`."""
        ...

    def decode_vectors(self, values: Sequence[Any], dim: int) -> np.ndarray:
        """The values read through :meth:`vector_sql` as one (n, dim) float32 matrix."""
        ...


class Persistence(Database, Protocol):
    """Rows, vectors, full text and transactions of one store; reads outside a transaction autocommit."""

    location: str
    """The file, or the database URL without its password: what messages name."""
    read_only: bool
    encrypted: bool

    def transaction(self, *, exclusive: bool = True) -> AbstractContextManager[Database]:
        """One write transaction, all or nothing; ``exclusive`` ones (every store write) take turns."""
        ...

    def snapshot(self) -> AbstractContextManager[Database]:
        """One read transaction: a consistent view while writers go on (an export)."""
        ...

    def nearest(self, user_pk: int, vector: np.ndarray, k: int, *, exact: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` node ids of the user whose vectors are closest (cosine) to ``vector``, with their
        scores, best first; ties within :data:`~promem_fast.backends.base.TIE_TOLERANCE` go to the lower id.

        A large user is searched through an approximate index, whose answer depends on the order the vectors
        were added in; ``exact`` scans every vector instead (update judging: which memories a new one is
        compared with must not depend on the order sessions arrived in)."""
        ...

    def nearest_many(self, user_pk: int, vectors: np.ndarray, k: int, *, exact: bool = False
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`nearest` for each row of ``vectors``, the same answers; an exact search of several reads the
        user's vectors once where the backend can (a session's new memories in update judging)."""
        ...

    def vector_count(self, user_pk: int) -> int:
        """How many vectors the user has (what :meth:`nearest` can return at most)."""
        ...

    def lexical(self, user_pk: int, terms: Sequence[str], k: int, *, source: bool = True, exchange: bool = True
                ) -> list[tuple[int, float]]:
        """The ``k`` nodes of the user (of every state) whose words best match any of ``terms`` (a question's
        content words, :func:`~.lexical.terms`), best first, as ``(node id, score)``, higher is better: SQLite's
        BM25 over text, details, source and exchange, PostgreSQL's ``ts_rank`` over the same; nodes sharing no
        word are left out. ``source``, ``exchange``: whether the words the memory was taken from, and the other
        speaker's words around them, count."""
        ...

    def dim_recorded(self, dim: int) -> None:
        """Called once the store's vector dimension is known (PostgreSQL types its column and indexes it)."""
        ...

    def removed(self, user_pk: int) -> None:
        """Nodes of the user were removed: drop what still holds their vectors (caches, index files)."""
        ...

    def compact(self) -> None:
        """After a delete: make the removed rows' pages leave the files (WAL checkpoint, or VACUUM)."""
        ...

    def analyze(self) -> None:
        """After a bulk write (an import): refresh the query planner's statistics, so the next searches are
        planned for the rows now there rather than for the tables as they were."""
        ...

    def close(self) -> None: ...


def location_arg(text: str) -> str | Path:
    """``--db``'s value: a ``postgresql://`` URL as it is, anything else a file path."""
    return text if is_url(text) else Path(text)


def shown(location: str | Path) -> str:
    """How messages name a store: the path, or the URL without its password."""
    import re

    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", str(location))


def is_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def resolve_location(location: str | Path | None) -> str | Path:
    """``location``, else :data:`DB_URL_ENV`; a caller with neither has no store to open."""
    if location is not None and str(location) != "":
        return location
    found = os.environ.get(DB_URL_ENV)
    if not found:
        from .connection import StoreError

        raise StoreError(f"no store given: pass --db PATH or postgresql://... (or set {DB_URL_ENV})")
    return found
