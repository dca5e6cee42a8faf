"""The service's own tables (keys, jobs, the queue) in the store's database, with their own schema version.

On PostgreSQL they are part of the store's schema (:mod:`promem_fast.persistence.pg_schema`), so every API
replica and engine worker of a deployment shares them; in an SQLite file they are created here.

The queue and the keys live beside the memory so that one file is the whole state of a deployment (one backup,
one restore) and a job is committed in the same database the worker writes its graph to. The store keeps its
version in ``PRAGMA user_version``; ours is a row of ``serve_meta``, so either side can migrate on its own.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from promem_fast.errors import PromemError
from promem_fast.persistence.api import Database, Rows, is_url
from promem_fast.persistence.connection import open_db, transaction

SCHEMA_VERSION = 2
"""1: keys, jobs, queue; 2: a claimed row's lease and holder (``lease_until``, ``claimed_by``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS serve_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS serve_keys (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    revoked REAL
);
CREATE TABLE IF NOT EXISTS serve_jobs (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    "user" TEXT NOT NULL,
    created REAL NOT NULL,
    total INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS serve_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL REFERENCES serve_jobs(id),
    tenant TEXT NOT NULL,
    session_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    error TEXT,
    finished REAL,
    lease_until REAL,
    claimed_by TEXT
);
CREATE INDEX IF NOT EXISTS serve_queue_state ON serve_queue(state, seq);
CREATE INDEX IF NOT EXISTS serve_queue_job ON serve_queue(job);
"""


class Tables(Database, Protocol):
    """The service tables' connection: statements, write transactions, close."""

    def transaction(self, *, exclusive: bool = True) -> Any: ...

    def close(self) -> None: ...


class SqliteTables:
    """An SQLite connection shared by threads: each statement and transaction takes the lock, and a
    statement's rows are read before the lock is let go."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.RLock()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._lock:
            cur = self._conn.execute(sql, params)
            return Rows(cur.fetchall(), cur.rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        with self._lock:
            return self._conn.executemany(sql, rows)

    @contextmanager
    def transaction(self, *, exclusive: bool = True) -> Iterator[SqliteTables]:
        with transaction(self._conn, self._lock):
            yield self

    def close(self) -> None:
        self._conn.close()


def connect(location: str | Path, *, key_file: str | Path | None = None) -> Tables:
    """The service tables of the store at ``location``: a PostgreSQL database (its pool), else the SQLite
    file (see :func:`connect_file`)."""
    if is_url(location):
        from promem_fast.persistence.postgres import PostgresPersistence

        return PostgresPersistence(str(location))  # type: ignore[return-value]
    return SqliteTables(connect_file(Path(location), key_file=key_file))


def connect_file(path: str | Path, *, key_file: str | Path | None = None) -> sqlite3.Connection:
    """A connection for the queue and the keys (see :func:`~promem_fast.persistence.connection.open_db`), with
    ``synchronous=FULL``: a 202 promises that the accepted sessions survive a power cut, so every queue commit
    reaches the disk before it returns. The service tables are created if missing."""
    conn = open_db(path, synchronous="FULL", key_file=key_file)
    try:
        conn.executescript(_SCHEMA)
        row = conn.execute("SELECT value FROM serve_meta WHERE key='schema_version'").fetchone()
        if row is None:
            conn.execute("INSERT INTO serve_meta VALUES ('schema_version', ?) ON CONFLICT DO NOTHING",
                         (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise PromemError(f"{path}: the service tables are of schema version {row[0]}, newer than this "
                              f"promem_fast understands ({SCHEMA_VERSION}); upgrade promem_fast")
        elif int(row[0]) == 1:
            with transaction(conn, threading.Lock()):
                conn.execute("ALTER TABLE serve_queue ADD COLUMN lease_until REAL")
                conn.execute("ALTER TABLE serve_queue ADD COLUMN claimed_by TEXT")
                conn.execute("UPDATE serve_meta SET value = '2' WHERE key = 'schema_version'")
    except BaseException:
        conn.close()
        raise
    return conn
