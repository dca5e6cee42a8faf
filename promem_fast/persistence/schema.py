"""The store's SQLite file: tables, the schema version and the migrations that bring an older file up to date.

One file per store, in WAL mode so that one writer and any number of readers (other processes included) work
at once: readers see the last committed session, never half of one. Each node keeps its full JSON (``data``)
next to the few columns that are queried, so fields that later versions add to a node travel unchanged.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from .connection import StoreError, database_errors, open_db, transaction

log = logging.getLogger(__name__)

SCHEMA_VERSION = 9
"""The version this code writes; files with a lower version are migrated on open (by a writer)."""


_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));  -- names index files' owner
CREATE TABLE tenants (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: readers cache vector indexes by user id
    tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,  -- bumped when nodes are removed (vector indexes rebuild)
    UNIQUE (tenant_id, name)
);
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    timestamp TEXT,
    mode TEXT NOT NULL,
    events TEXT NOT NULL,   -- JSON list
    stats TEXT NOT NULL,    -- JSON: the session's per-stage accounting
    UNIQUE (user_id, session_id)
);
CREATE TABLE nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: node ids are handed out (history, links)
    session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    local_id INTEGER NOT NULL,          -- the node's id inside its session's graph
    text TEXT NOT NULL,
    turn_id TEXT,                       -- grounding turn (JSON scalar)
    date TEXT,                          -- the node's own date, else its session's timestamp
    superseded_by INTEGER REFERENCES nodes(id) ON DELETE SET NULL,
    data TEXT NOT NULL,                 -- the node's full JSON
    vector BLOB,                        -- float32, normalised; NULL until embedded
    UNIQUE (session_pk, local_id)
);
CREATE INDEX nodes_user ON nodes (user_id, id);
CREATE INDEX nodes_superseded ON nodes (superseded_by);
CREATE TABLE edges (
    id INTEGER PRIMARY KEY,
    session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    source INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    target INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    relation TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX edges_session ON edges (session_pk);
CREATE INDEX edges_source ON edges (source);
CREATE INDEX edges_target ON edges (target);
CREATE TABLE details (
    id INTEGER PRIMARY KEY,
    session_pk INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    local_id INTEGER NOT NULL,          -- index in the session graph's detail list
    text TEXT NOT NULL,
    turn_id TEXT,
    data TEXT NOT NULL,
    UNIQUE (session_pk, local_id)
);
CREATE TABLE supersedes (
    old INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
    new INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    reason TEXT NOT NULL
);
CREATE INDEX supersedes_new ON supersedes (new);
"""


_V2 = """
ALTER TABLE sessions ADD COLUMN said_at TEXT;             -- the session's time, ISO 8601 (canonical order)
ALTER TABLE sessions ADD COLUMN recorded_at TEXT;         -- when the store received it, ISO 8601
ALTER TABLE sessions ADD COLUMN judged INTEGER NOT NULL DEFAULT 1;  -- 0: its update verdicts are still to come
ALTER TABLE nodes ADD COLUMN valid_from TEXT;             -- when it was said (its session's said_at)
ALTER TABLE nodes ADD COLUMN valid_until TEXT;            -- the replacing memory's valid_from
ALTER TABLE nodes ADD COLUMN merged_into INTEGER REFERENCES nodes(id) ON DELETE SET NULL;  -- a duplicate of
ALTER TABLE supersedes ADD COLUMN verdict TEXT NOT NULL DEFAULT 'update';  -- 'update' (old replaced by new)
CREATE TABLE merges (
    node INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,  -- the later saying of the same fact
    kept INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,     -- the memory that stands for both
    reason TEXT NOT NULL
);
CREATE INDEX merges_kept ON merges (kept);
CREATE INDEX sessions_pending ON sessions (judged, user_id);
CREATE INDEX sessions_said ON sessions (user_id, said_at);
"""


def _v2(db: sqlite3.Connection) -> None:
    """Validity times and the judged flag; times of existing rows are read from their sessions' timestamps."""
    from promem_fast.times import iso_time

    _run_script(_V2)(db)
    sessions = db.execute("SELECT id, timestamp FROM sessions").fetchall()
    db.executemany("UPDATE sessions SET said_at = ? WHERE id = ?", [(iso_time(ts), pk) for pk, ts in sessions])
    db.execute("UPDATE nodes SET valid_from = (SELECT said_at FROM sessions s WHERE s.id = nodes.session_pk)")
    db.execute("UPDATE nodes SET valid_until = (SELECT b.valid_from FROM supersedes l JOIN nodes b ON b.id = l.new "
               "WHERE l.old = nodes.id) WHERE superseded_by IS NOT NULL")


def _run_script(script: str) -> Callable[[sqlite3.Connection], None]:
    """A migration step running ``script`` statement by statement (``executescript`` would commit the
    open transaction first, and a migration must be all or nothing)."""
    code = "\n".join(line.split("--", 1)[0] for line in script.splitlines())

    def step(db: sqlite3.Connection) -> None:
        for statement in code.split(";"):
            if statement.strip():
                db.execute(statement)
    return step


_V3 = """
ALTER TABLE sessions ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';  -- JSON object: what add() was given with it
"""


def _v4(db: sqlite3.Connection) -> None:
    """The full-text table of the lexical ranking (:mod:`.lexical`), its triggers, and the rows of the nodes
    already stored."""
    from .lexical import FILL_FTS, FTS_SCHEMA

    for statement in FTS_SCHEMA:
        db.execute(statement)
    db.execute(FILL_FTS)


_V5 = """
CREATE INDEX nodes_merged ON nodes (merged_into);
"""
"""The index of ``merged_into``: deleting a node sets the column to NULL in the rows merged into it (its foreign
key's action), which without an index reads every node of the file, once per node deleted."""


def _v6(db: sqlite3.Connection) -> None:
    """The full-text table made again with the memories' sources as a third column (:mod:`.lexical`: a question
    asks in the words that were said), filled from the nodes stored (each node's JSON holds its source)."""
    from .lexical import DROP_FTS

    for statement in DROP_FTS:
        db.execute(statement)
    _v4(db)


def _v7(db: sqlite3.Connection) -> None:
    """The full-text table made again with the other speaker's words around each memory as a fourth column
    (``exchange``), filled from the nodes stored (those extracted before hold none: the column is empty)."""
    _v6(db)


_V8 = """
ALTER TABLE sessions ADD COLUMN shown INTEGER NOT NULL DEFAULT 1;  -- 0: not shown to readers yet
CREATE INDEX sessions_hidden ON sessions (user_id) WHERE shown = 0;
ALTER TABLE nodes ADD COLUMN held INTEGER NOT NULL DEFAULT 0;  -- 1: held back while its replacement is judged again
CREATE INDEX nodes_held ON nodes (user_id) WHERE held = 1;
"""
"""What readers see (:func:`~.timeline.shown`): a new session is hidden until its update verdicts are written, so a
reader never finds a new memory beside the older one it is about to replace; a memory whose replacement or merge
is being judged again is held back meanwhile, so it does not come back as current for that time. The indexes hold
the hidden sessions and held memories only (few, and none once judging is done)."""


_V9 = """
ALTER TABLE nodes ADD COLUMN metadata TEXT;  -- JSON object: the memory's own, once changed by hand; NULL: its session's
"""
"""A memory's own metadata (:func:`~promem_fast.store.editing.remark`): what its session was added with, changed
for this memory alone by an update (mem0's ``update(memory_id, metadata=...)``); filters, expiry and every read
take it in place of the session's."""


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _run_script(_V1),
    2: _v2,
    3: _run_script(_V3),
    4: _v4,
    5: _run_script(_V5),
    6: _v6,
    7: _v7,
    8: _run_script(_V8),
    9: _run_script(_V9),
}
"""``MIGRATIONS[v]`` takes a file at version ``v - 1`` to version ``v`` (version 0 is an empty file)."""


def connect(path: str | Path, *, read_only: bool = False, key_file: str | Path | None = None) -> sqlite3.Connection:
    """The store's connection (see :func:`~.connection.open_db`: WAL, foreign keys, secure delete, private
    file, optional encryption), with the schema brought up to date. ``synchronous=NORMAL``: a graph lost to a
    power cut is stored again from its output file."""
    target = Path(path)
    db = open_db(target, read_only=read_only, synchronous="NORMAL", key_file=key_file)
    try:
        _check_version(db, target, read_only)
    except database_errors() as exc:
        db.close()
        raise StoreError(f"{target}: not a usable store ({exc})") from exc
    except StoreError:
        db.close()
        raise
    return db


def user_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _check_version(db: sqlite3.Connection, path: Path, read_only: bool) -> None:
    """Migrate an older file (every step in one transaction: all of them or none), refuse a newer one."""
    version = user_version(db)
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {version} was written by a newer promem_fast "
                         f"(this one reads up to {SCHEMA_VERSION}); upgrade promem_fast")
    if version == SCHEMA_VERSION:
        return
    if read_only:
        raise StoreError(f"{path}: schema version {version} needs a migration to {SCHEMA_VERSION}; "
                         "open it once without read_only")
    with transaction(db, threading.Lock()):
        version = user_version(db)  # another process may have migrated it while we waited for the lock
        for step in range(version + 1, SCHEMA_VERSION + 1):
            log.info("%s: migrating the store schema to version %d", path, step)
            MIGRATIONS[step](db)
            db.execute(f"PRAGMA user_version = {step}")
