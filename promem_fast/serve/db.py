"""The service's own tables in the store's SQLite file, with their own schema version.

The queue and the keys live beside the memory so that one file is the whole state of a deployment (one backup,
one restore) and a job is committed in the same database the worker writes its graph to. The store keeps its
version in ``PRAGMA user_version``; ours is a row of ``serve_meta``, so either side can migrate on its own.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from promem_fast.errors import PromemError
from promem_fast.persistence.connection import open_db

SCHEMA_VERSION = 1

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
    user TEXT NOT NULL,
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
    finished REAL
);
CREATE INDEX IF NOT EXISTS serve_queue_state ON serve_queue(state, seq);
CREATE INDEX IF NOT EXISTS serve_queue_job ON serve_queue(job);
"""


def connect(path: str | Path, *, key_file: str | Path | None = None) -> sqlite3.Connection:
    """A connection for the queue and the keys (see :func:`~promem_fast.persistence.connection.open_db`), with
    ``synchronous=FULL``: a 202 promises that the accepted sessions survive a power cut, so every queue commit
    reaches the disk before it returns. The service tables are created if missing."""
    conn = open_db(path, synchronous="FULL", key_file=key_file)
    try:
        conn.executescript(_SCHEMA)
        row = conn.execute("SELECT value FROM serve_meta WHERE key='schema_version'").fetchone()
        if row is None:
            conn.execute("INSERT OR IGNORE INTO serve_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise PromemError(f"{path}: the service tables are of schema version {row[0]}, newer than this "
                              f"promem_fast understands ({SCHEMA_VERSION}); upgrade promem_fast")
    except BaseException:
        conn.close()
        raise
    return conn
