"""The durable job queue: accepted sessions are rows of ``serve_queue``, committed before the 202 goes out.

A job is one request's sessions for one user. Each session row moves ``pending`` -> ``running`` (claimed by the
worker) -> ``done`` or ``failed``. A restart puts ``running`` rows back to ``pending``, so nothing accepted is
lost; the store skips a session it already holds, so a session run twice (claimed, stored, killed before it
was marked done) still ends with exactly one graph.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Claimed:
    """One session handed to the worker."""

    seq: int
    job: str
    tenant: str
    session_id: str
    payload: dict[str, Any]


class JobQueue:
    """Submit, claim, finish and report jobs; safe to share between request threads and the worker."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.wakeup = threading.Event()
        """Set on every submit, so an idle worker starts at once instead of at its next poll."""

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the shared connection, all or nothing."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def recover(self) -> int:
        """Put sessions a previous process had claimed back in line; returns how many."""
        with self._lock:
            cur = self._conn.execute("UPDATE serve_queue SET state='pending' WHERE state='running'")
        return cur.rowcount

    def submit(self, tenant: str, user: str, sessions: list[dict[str, Any]]) -> str:
        """Store a job and its sessions in one transaction; the id is returned only once it is durable."""
        job = secrets.token_hex(8)
        rows = [(job, tenant, str(s["session_id"]), json.dumps(s, ensure_ascii=False)) for s in sessions]
        with self._transaction() as conn:
            conn.execute("INSERT INTO serve_jobs (id, tenant, user, created, total) VALUES (?, ?, ?, ?, ?)",
                         (job, tenant, user, time.time(), len(rows)))
            conn.executemany("INSERT INTO serve_queue (job, tenant, session_id, payload) VALUES (?, ?, ?, ?)", rows)
        self.wakeup.set()
        return job

    def claim(self, limit: int) -> list[Claimed]:
        """Up to ``limit`` pending sessions, oldest first, marked running."""
        if limit <= 0:
            return []
        with self._transaction() as conn:
            rows = conn.execute("SELECT seq, job, tenant, session_id, payload FROM serve_queue WHERE state='pending' "
                                "ORDER BY seq LIMIT ?", (limit,)).fetchall()
            conn.executemany("UPDATE serve_queue SET state='running' WHERE seq=?", [(r[0],) for r in rows])
        return [Claimed(seq=r[0], job=r[1], tenant=r[2], session_id=r[3], payload=json.loads(r[4])) for r in rows]

    def finish(self, outcomes: list[tuple[int, str | None]]) -> None:
        """Mark sessions done (error None) or failed, in one transaction. A done session's payload is dropped
        (its memory is in the store now); a failed one keeps it, to be looked at or sent again."""
        now = time.time()
        with self._transaction() as conn:
            conn.executemany("UPDATE serve_queue SET state='done', error=NULL, finished=?, payload='' WHERE seq=?",
                             [(now, seq) for seq, error in outcomes if not error])
            conn.executemany("UPDATE serve_queue SET state='failed', error=?, finished=? WHERE seq=?",
                             [(error, now, seq) for seq, error in outcomes if error])

    def depth(self) -> int:
        """Sessions accepted and not finished yet (pending or running)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*) FROM serve_queue WHERE state IN ('pending', 'running')").fetchone()
        return int(row[0])

    def status(self, tenant: str, job: str) -> dict[str, Any] | None:
        """A job's progress, or None when ``tenant`` has no such job (another tenant's looks the same)."""
        with self._lock:
            head = self._conn.execute("SELECT user, created, total FROM serve_jobs WHERE id=? AND tenant=?",
                                      (job, tenant)).fetchone()
            if head is None:
                return None
            rows = self._conn.execute("SELECT session_id, state, error FROM serve_queue WHERE job=? ORDER BY seq",
                                      (job,)).fetchall()
        counts = {state: 0 for state in ("pending", "running", "done", "failed")}
        for _, state, _ in rows:
            counts[state] += 1
        finished = counts["done"] + counts["failed"] == head[2]
        return {"job_id": job, "user": head[0], "created": head[1], "total": head[2], **counts,
                "state": "finished" if finished else ("queued" if counts["pending"] == head[2] else "running"),
                "errors": [{"session_id": sid, "error": err} for sid, state, err in rows if state == "failed"]}
