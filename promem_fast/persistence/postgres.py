"""The PostgreSQL backend of :mod:`.api`: one database shared by API replicas and engine workers.

psycopg 3 with a connection pool (the ``postgres`` extra). Reads outside a transaction take a pooled
connection for one statement (autocommit); a transaction pins one connection to the calling thread, so the
row functions, written once with ``?`` placeholders, run on it unchanged (the placeholders become ``%s``).
Writers take one advisory lock per transaction, as SQLite's single writer does: update judging relies on
no two writers interleaving their reads and writes, and a session is stored once whichever replica or
worker writes it (the ``(user, session_id)`` key backs that up).

Vectors are pgvector's type, cosine distance. A user below ``approximate_min`` vectors is searched exactly
(a scan of their rows, as SQLite's exact index); from there on through the table's HNSW index, widened to
exact when the index's filtered answer comes back short. The index's search width (``hnsw.ef_search``) is set
for each query's transaction by the user's size (:func:`search_width`): wider costs time, and only a large user
gains recall from it. Full text is PostgreSQL's own: a ``tsvector`` (``english`` configuration) of each node's
text, details, source and exchange, kept by a trigger, with a GIN index, ranked by ``ts_rank``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np

from promem_fast.backends.base import TIE_TOLERANCE
from promem_fast.config import EngineConfig

from .api import Rows, shown
from .connection import StoreError
from .pg_schema import WORD_WEIGHTS, index_build_of, migrate, rebuild_vector_index, schema_version, type_vectors

log = logging.getLogger(__name__)

WRITE_LOCK = 0x70726F6E
"""The advisory lock key every write transaction holds until it ends."""

POOL_MAX = 8
EF_SEARCH = EngineConfig.pg_ef_search
"""pgvector's HNSW search width for the largest users unless the configuration names another."""
NARROW_WIDTH = 100
NARROW_UP_TO = 100_000
"""Up to this many vectors a width of ``NARROW_WIDTH`` already finds the exact top 10 (recall@10 0.999 at 100K in
``benchmarks/runs/bench_pg_search.py``, as 400 and 800 do, in a third to two fifths of the time of 400)."""
WIDEST_FROM = 1_000_000
"""From this many vectors on a query searches at the store's whole width (at 1M recall@10 0.84-0.89 at 100 and
0.94-0.95 at 400 over two index builds)."""
CONNECT_TIMEOUT_S = 10


def search_width(vectors: int, widest: int, fetch: int, narrow: int = NARROW_WIDTH) -> int:
    """pgvector's search width for a query asking ``fetch`` rows of a user of ``vectors`` vectors: ``narrow``
    up to 100K, ``widest`` from 1M, between them geometric in the user's size (a tenfold user needs a wider
    walk, not a linearly wider one); never above ``widest``; never below ``fetch``, since the index returns at
    most the width's rows; never above pgvector's 1,000. ``narrow == widest`` is one width for every user."""
    if vectors <= NARROW_UP_TO:
        width = float(narrow)
    elif vectors >= WIDEST_FROM:
        width = float(widest)
    else:
        width = narrow * (widest / narrow) ** math.log10(vectors / NARROW_UP_TO)
    return min(1000, max(fetch, min(widest, round(width))))


def _translate(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresPersistence:
    """A store in a PostgreSQL database with pgvector (see the module)."""

    dialect: Literal["postgresql"] = "postgresql"
    encrypted = False

    def __init__(self, url: str, *, read_only: bool = False, approximate_min: int = 0,
                 ef_search: int = EF_SEARCH, narrow_width: int = NARROW_WIDTH) -> None:
        from promem_fast.deps import require

        self.psycopg = require("psycopg", "postgres", "psycopg[binary]")
        pool = require("psycopg_pool", "postgres", "psycopg-pool")
        self.location = shown(url)
        self.read_only = read_only
        self.approximate_min = approximate_min
        for name, width in (("ef_search", ef_search), ("narrow_width", narrow_width)):
            if not 1 <= width <= 1000:
                raise StoreError(f"{name} {width}: pgvector accepts 1 to 1000")
        self.ef_search = ef_search
        self.narrow_width = narrow_width
        """The search width up to 100K vectors (:func:`search_width`); ``ef_search`` from 1M on."""
        self._local = threading.local()
        self._check_server(url)
        self._counts: dict[int, tuple[int, int, int]] = {}
        """user -> (generation, highest node id, vectors), see :meth:`vector_count`."""
        self._counts_lock = threading.Lock()
        self._pool = pool.ConnectionPool(url, min_size=1, max_size=POOL_MAX, open=False,
                                         kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S})
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)

    @staticmethod
    def schema_version_at(url: str) -> int:
        """The schema version of the database at ``url`` as it is (0: no store yet), changing nothing."""
        from promem_fast.deps import require

        psycopg = require("psycopg", "postgres", "psycopg[binary]")
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                return schema_version(conn)
        except psycopg.Error as exc:
            raise StoreError(f"{shown(url)}: cannot connect ({_first_line(exc)})") from None

    def _check_server(self, url: str) -> None:
        """Connect once, make sure pgvector is there and the schema is this version's, each fault in one line."""
        psycopg = self.psycopg
        try:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            raise StoreError(f"{self.location}: cannot connect ({_first_line(exc)})") from None
        with conn:
            try:
                if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                    if self.read_only:
                        raise StoreError(f"{self.location}: the pgvector extension is not created in this database")
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise StoreError(f"{self.location}: the server has no usable pgvector extension "
                                 f"({_first_line(exc)}); install pgvector 0.5 or newer on the server") from None
            try:
                migrate(conn, self.location, read_only=self.read_only)
            except psycopg.Error as exc:
                raise StoreError(f"{self.location}: cannot bring the schema up to date ({_first_line(exc)}); "
                                 "nothing was changed") from None

    # ------------------------------------------------------------------------------------ rows
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        pinned = getattr(self._local, "conn", None)
        if pinned is not None:
            return pinned.execute(_translate(sql), tuple(params))
        try:
            with self._pool.connection() as conn:
                cur = conn.execute(_translate(sql), tuple(params))
                return Rows(cur.fetchall() if cur.description else [], cur.rowcount)
        except self.psycopg.OperationalError as exc:
            raise StoreError(f"{self.location}: connection lost ({_first_line(exc)})") from None

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        pinned = getattr(self._local, "conn", None)
        if pinned is None:
            with self.transaction():
                return self.executemany(sql, rows)
        cur = pinned.cursor()
        cur.executemany(_translate(sql), [tuple(r) for r in rows])
        return cur

    @staticmethod
    def encode_vector(vector: np.ndarray) -> str:
        values = np.asarray(vector, np.float32).reshape(-1).tolist()
        return "[" + ",".join(repr(v) for v in values) + "]"

    @staticmethod
    def vector_sql(column: str) -> str:
        return f"{column}::real[]"

    @staticmethod
    def decode_vectors(values: Sequence[Any], dim: int) -> np.ndarray:
        if not values:
            return np.zeros((0, dim), np.float32)
        return np.asarray(values, np.float32).reshape(len(values), dim)

    @contextmanager
    def transaction(self, *, exclusive: bool = True) -> Iterator[PostgresPersistence]:
        """``exclusive``: take the writers' advisory lock (every store write does; the service's queue,
        whose claims lock their own rows, does not)."""
        if self.read_only:
            raise StoreError(f"{self.location}: the store was opened read-only")
        with self._pinned(write=True, exclusive=exclusive):
            yield self

    @contextmanager
    def snapshot(self) -> Iterator[PostgresPersistence]:
        with self._pinned(write=False):
            yield self

    @contextmanager
    def _pinned(self, *, write: bool, exclusive: bool = True) -> Iterator[None]:
        if getattr(self._local, "conn", None) is not None:  # already inside one: it holds the whole of it
            yield
            return
        psycopg = self.psycopg
        try:
            with self._pool.connection() as conn, conn.transaction():
                if write and exclusive:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                elif not write:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                self._local.conn = conn
                try:
                    yield
                finally:
                    self._local.conn = None
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.location}: connection lost ({_first_line(exc)}); the transaction was rolled "
                             "back, nothing of it is stored") from None

    # ------------------------------------------------------------------------------------ vectors
    def vector_count(self, user_pk: int) -> int:
        """Counted once per user and process, then brought up to date by the rows added since (node ids only
        grow) and counted again when the user's ``generation`` says nodes were removed: a search costs one
        short index range scan, not a count of a large user's rows."""
        with self._counts_lock:
            known = self._counts.get(user_pk)
        generation, last, count = known or (-1, 0, 0)
        row = self.execute(
            "SELECT u.generation, (SELECT count(*) FROM nodes n WHERE n.user_id = u.id AND n.id > ? AND "
            "n.vector IS NOT NULL), (SELECT max(n.id) FROM nodes n WHERE n.user_id = u.id) FROM users u "
            "WHERE u.id = ?", (last if known else 0, user_pk)).fetchone()
        if row is None:
            return 0
        if int(row[0]) != generation and known is not None:  # nodes were removed: count afresh
            with self._counts_lock:
                self._counts.pop(user_pk, None)
            return self.vector_count(user_pk)
        total = count + int(row[1])
        with self._counts_lock:
            self._counts[user_pk] = (int(row[0]), int(row[2] or 0), total)
        return total

    def nearest(self, user_pk: int, vector: np.ndarray, k: int, *, exact: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
        n = self.vector_count(user_pk)
        k = min(k, n)
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        query = self.encode_vector(vector)
        fetch = min(n, k + 16)
        while True:
            ids, scores = self._top(user_pk, query, fetch, vectors=n,
                                    approximate=not exact and 0 < self.approximate_min <= n)
            if fetch >= n or scores.min() < np.sort(scores)[::-1][k - 1] - TIE_TOLERANCE:
                break
            fetch = min(n, fetch * 4)
        order = np.lexsort((ids, -np.round(scores / TIE_TOLERANCE)))[:k]
        return ids[order], scores[order]

    def nearest_many(self, user_pk: int, vectors: np.ndarray, k: int, *, exact: bool = False
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """One query each: the server scans its own pages, so nothing is read twice on this side."""
        return [self.nearest(user_pk, vector, k, exact=exact) for vector in vectors]

    def _top(self, user_pk: int, query: str, fetch: int, *, vectors: int, approximate: bool
             ) -> tuple[np.ndarray, np.ndarray]:
        found: list[Any] = []
        width = search_width(vectors, self.ef_search, fetch, self.narrow_width) if approximate else 0
        if fetch <= width:
            with self.snapshot():
                self.execute("SELECT set_config('hnsw.ef_search', ?, true)", (str(width),))  # this transaction's
                found = self.execute(
                    "SELECT id, 1 - (vector <=> ?::vector) FROM nodes WHERE user_id = ? AND vector IS NOT NULL "
                    "ORDER BY vector <=> ?::vector LIMIT ?", (query, user_pk, query, fetch)).fetchall()
        if len(found) < fetch:  # exact (a small user, or the index's filtered answer came back short)
            found = self.execute(
                "SELECT id, 1 - (vector <=> ?::vector) AS score FROM nodes WHERE user_id = ? AND vector IS NOT NULL "
                "ORDER BY score DESC, id LIMIT ?", (query, user_pk, fetch)).fetchall()
        return (np.array([r[0] for r in found], np.int64), np.array([r[1] for r in found], np.float32))

    def dim_recorded(self, dim: int) -> None:
        pinned = getattr(self._local, "conn", None)
        if pinned is not None:
            type_vectors(pinned, dim)
        else:
            with self.transaction():
                self.dim_recorded(dim)

    # ------------------------------------------------------------------------------------ words
    def lexical(self, user_pk: int, terms: Sequence[str], k: int, *, source: bool = True, exchange: bool = True
                ) -> list[tuple[int, float]]:
        """The user's ``k`` best nodes by ``ts_rank``, for the question's rarer words only (:func:`~.lexical.
        rarest`, the rule SQLite's search keeps): ``ts_rank`` reads every row it ranks, so a word in many
        memories would make a search cost a read of each."""
        from .lexical import rarest, ts_query

        if k <= 0:
            return []
        text = ts_query(rarest(terms, lambda word: self._rows_holding(word, source, exchange)), source, exchange)
        if text is None:
            return []
        found = self.execute(
            f"SELECT n.id, ts_rank('{WORD_WEIGHTS}', n.words, q) AS score FROM nodes n, to_tsquery('english', ?) q "
            "WHERE n.user_id = ? AND n.words @@ q ORDER BY score DESC, n.id LIMIT ?", (text, user_pk, k)).fetchall()
        return [(int(i), float(s)) for i, s in found]

    def _rows_holding(self, word: str, source: bool = True, exchange: bool = True) -> int:
        """How many memories (of every user) hold the word, counted up to the budget's next row at most."""
        from .lexical import POSTINGS_BUDGET, ts_query

        text = ts_query([word], source, exchange)
        if text is None:
            return 0
        return int(self.execute("SELECT count(*) FROM (SELECT 1 FROM nodes WHERE words @@ to_tsquery('english', ?) "
                                "LIMIT ?) c", (text, POSTINGS_BUDGET + 1)).fetchone()[0])

    # ------------------------------------------------------------------------------------ lifecycle
    def removed(self, user_pk: int) -> None:
        """Nothing is cached outside the database."""

    def compact(self) -> None:
        """VACUUM the tables a delete touches: dead rows are removed and their space made free for reuse."""
        if self.read_only:
            return
        with self._pool.connection() as conn:
            for table in ("nodes", "details", "edges", "supersedes", "merges", "sessions", "users"):
                conn.execute(f"VACUUM {table}")

    def analyze(self) -> None:
        """``ANALYZE`` the tables a search reads. Until the planner has statistics of ``nodes`` it takes a
        user's rows for a few hundred and sorts them all by distance instead of walking the HNSW index
        (measured at 100,000 rows: 111 ms a search instead of a few); autovacuum analyzes a growing table
        in time, but not one an import has just filled."""
        with self._pool.connection() as conn:
            conn.execute("ANALYZE nodes, details, sessions, users")

    def rebuild_index(self, m: int, ef_construction: int) -> bool:
        """Build the vector index again with pgvector's build parameters ``m`` and ``ef_construction`` (recorded
        for an index built later too); returns whether there were vectors to index. Searches and writes go on
        meanwhile (:func:`~.pg_schema.rebuild_vector_index`)."""
        if self.read_only:
            raise StoreError(f"{self.location}: opened read-only; the index is rebuilt by a writer")
        try:
            with self._pool.connection() as conn:
                return rebuild_vector_index(conn, m, ef_construction)
        except self.psycopg.Error as exc:
            raise StoreError(f"{self.location}: the index rebuild failed ({_first_line(exc)}); the index it "
                             "had still serves") from None

    def index_build(self) -> dict[str, int] | None:
        """The build parameters of the vector index (None before the first vectors are indexed)."""
        with self._pool.connection() as conn:
            return index_build_of(conn)

    def close(self) -> None:
        self._pool.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
