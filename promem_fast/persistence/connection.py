"""The one way this package opens an SQLite file, and the one write-transaction helper.

Every user of a store file (the memory store, the service's queue and keys, the command line) opens it
through :func:`open_db`, with the options that differ per use passed explicitly:

* ``read_only``: a reader that never writes, migrates or creates the file;
* ``synchronous``: ``NORMAL`` for the memory store (WAL with NORMAL loses at most the last commits on a power
  cut, never consistency, and a graph can be stored again from its output file), ``FULL`` for the job queue
  (a 202 promises the session is durable);
* ``key_file``: the store is encrypted with SQLCipher (the ``encrypt`` extra) under the key in that file.

What is the same for everyone: WAL (readers never block the writer), a busy timeout instead of instant
"database is locked", foreign keys on, and ``secure_delete`` on, read back and refused if the SQLite build
ignores it, so deleted memory is overwritten with zeros rather than left in free pages (SQLite's own default
is off; some distributions turn it on at build time, which this code does not rely on). A new file is
created 0600 before SQLite opens it; SQLite gives its ``-wal`` and ``-shm`` files the same mode.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from promem_fast.errors import PromemError
from promem_fast.private import narrow, touch_private

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 60_000
"""How long a connection waits for another connection's write lock before giving up."""

SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database; they hold its pages too, so they get the store's mode."""


class StoreError(PromemError):
    """A store cannot be opened or used as asked (the message names the file and what is wrong)."""


def _driver(key_file: Path | None) -> Any:
    """``sqlite3``, or SQLCipher's drop-in module when the store is encrypted."""
    if key_file is None:
        return sqlite3
    from promem_fast.deps import require

    return require("sqlcipher3.dbapi2", "encrypt", "sqlcipher3")


def database_errors() -> tuple[type[Exception], ...]:
    """The DatabaseError classes of every driver loaded (SQLCipher's and psycopg's are not sqlite3's)."""
    cipher, pg = sys.modules.get("sqlcipher3.dbapi2"), sys.modules.get("psycopg")
    return ((sqlite3.DatabaseError,) + ((cipher.DatabaseError,) if cipher is not None else ())
            + ((pg.DatabaseError,) if pg is not None else ()))


def integrity_errors() -> tuple[type[Exception], ...]:
    """The IntegrityError classes of every driver loaded (a constraint the data breaks)."""
    cipher, pg = sys.modules.get("sqlcipher3.dbapi2"), sys.modules.get("psycopg")
    return ((sqlite3.IntegrityError,) + ((cipher.IntegrityError,) if cipher is not None else ())
            + ((pg.IntegrityError,) if pg is not None else ()))


def key_pragma(key_file: Path) -> str:
    """The ``PRAGMA key`` statement for the key in ``key_file``: 64 hex digits are a raw 256-bit key (no key
    derivation, so opening is instant), anything else a passphrase. The file must be private to its owner."""
    try:
        mode = key_file.stat().st_mode
        text = key_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise StoreError(f"{key_file}: no such key file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{key_file}: cannot read the key file ({exc})") from None
    if mode & 0o077:
        raise StoreError(f"{key_file}: the key file is readable by others (mode {mode & 0o777:o}); "
                         f"run chmod 600 {key_file}")
    if not text:
        raise StoreError(f"{key_file}: the key file is empty")
    if len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text):
        return f"PRAGMA key = \"x'{text}'\""
    return "PRAGMA key = '" + text.replace("'", "''") + "'"


def open_db(path: str | Path, *, read_only: bool = False, synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
            key_file: str | Path | None = None) -> sqlite3.Connection:
    """An autocommit connection (transactions are explicit, see :func:`transaction`) with the settings above."""
    target = Path(path)
    key = Path(key_file) if key_file is not None else None
    if target.is_dir():
        raise StoreError(f"{target}: is a folder, not a store file")
    if read_only and not target.exists():
        raise StoreError(f"{target}: no such store (opened read-only, so it is not created)")
    if not target.parent.is_dir():
        raise StoreError(f"{target}: folder {target.parent} does not exist")
    driver = _driver(key)
    statement = key_pragma(key) if key is not None else None
    try:
        if not read_only:
            touch_private(target)
        for suffix in ("", *SIDE_FILES):
            narrow(f"{target}{suffix}")
    except OSError as exc:
        raise StoreError(f"{target}: cannot open ({exc.strerror or exc})") from None
    where = target.resolve().as_uri() + ("?mode=ro" if read_only else "")
    try:
        db = driver.connect(where, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                            check_same_thread=False)
    except database_errors() as exc:
        raise StoreError(f"{target}: cannot open ({exc})") from None
    try:
        _configure(db, target, key, statement, read_only, synchronous)
    except BaseException:
        db.close()
        raise
    return db


def _configure(db: Any, target: Path, key: Path | None, statement: str | None, read_only: bool,
               synchronous: str) -> None:
    if statement is not None:
        db.execute("PRAGMA cipher_log_level = NONE")  # its own stderr lines would add to our one-line error
        db.execute(statement)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read decrypts page 1
    except database_errors() as exc:
        if key is not None:
            raise StoreError(f"{target}: cannot be opened with the key in {key} (wrong key, or the store is "
                             "not encrypted)") from None
        raise StoreError(f"{target}: not a usable store ({exc}); if it is encrypted, name its key file "
                         "with --key-file") from None
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA secure_delete = ON")
        if db.execute("PRAGMA secure_delete").fetchone()[0] != 1:
            raise StoreError(f"{target}: this SQLite build does not honour PRAGMA secure_delete, so deleted "
                             "memory would stay in the file; use an SQLite built without SQLITE_OMIT_SECURE_DELETE")
        if not read_only:
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{target}: cannot switch to WAL (journal mode stays {mode})")
            db.execute(f"PRAGMA synchronous = {synchronous}")
    except database_errors() as exc:
        raise StoreError(f"{target}: not a usable store ({exc})") from None


@contextmanager
def transaction(db: sqlite3.Connection, lock: threading.Lock | threading.RLock) -> Iterator[sqlite3.Connection]:
    """One write transaction on a shared connection, all or nothing: ``BEGIN IMMEDIATE`` takes the write
    lock at once (no upgrade deadlock between two writers), any exception rolls everything back."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


def checkpoint(db: sqlite3.Connection, path: Path) -> bool:
    """Copy the WAL into the file and truncate it to zero bytes, so that pages a delete replaced (which still
    hold the deleted text; secure delete has zeroed them in the file) are gone from the ``-wal`` file too.
    SQLite waits, up to the busy timeout, for readers to move to the newest snapshot; a WAL still held then
    is truncated by a later checkpoint. Returns whether it was truncated now."""
    busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.warning("%s: the WAL could not be truncated now (readers busy); deleted pages stay in %s-wal until "
                    "the next checkpoint", path, path.name)
    return int(busy) == 0
