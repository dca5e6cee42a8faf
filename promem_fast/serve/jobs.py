"""The durable job queue: accepted sessions are rows of ``serve_queue``, committed before the 202 goes out.

A job is one request's sessions for one user. Each session row moves ``pending`` -> ``running`` (claimed by the
worker) -> ``done`` or ``failed``. A restart puts ``running`` rows back to ``pending``, so nothing accepted is
lost; the store skips a session it already holds, so a session run twice (claimed, stored, killed before it
was marked done) still ends with exactly one graph.

Job records name a user and session ids, so they go when that user is deleted (:meth:`JobQueue.cancel`, which
also cancels the user's queued and running sessions) and, finished, after the operator's retention period.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from promem_fast.persistence.api import Database
from promem_fast.store.filters import matcher

from .db import Tables

log = logging.getLogger(__name__)

LEASE_S = 30.0
"""How long a claimed session stays a process's without a heartbeat (see :class:`JobQueue`)."""

DEFAULT_RETENTION_S = 7 * 24 * 3600.0
"""How long a finished job's record (user name, session ids, errors) is kept for ``GET /v1/jobs/{id}``."""

EXPIRY_EVERY_S = 60.0
"""How often the worker's polling looks for expired jobs (a shorter retention looks more often)."""

STILL_WANTED = ("SELECT 1 FROM serve_queue q JOIN serve_jobs j ON j.id = q.job WHERE q.tenant = ? AND j.\"user\" = ? "
                "AND q.session_id = ? AND q.state = 'running' LIMIT 1")
"""Whether a finished session may still be stored: its claimed row is still running (a delete of its user or
session cancelled it). Run inside the store's write transaction, so a delete is before it or after the write."""



def still_wanted(conn: Database, tenant: str, graph: Any) -> bool:
    """The store writer's guard (``MemoryStore.write_guard``): a graph is stored only while its claimed queue
    row is still running; see :data:`STILL_WANTED`."""
    return conn.execute(STILL_WANTED, (tenant, graph.user, graph.session_id)).fetchone() is not None


_DRAINED = "DELETE FROM serve_jobs WHERE \"user\" = '' AND id NOT IN (SELECT job FROM serve_queue)"
"""Removes the blanked jobs of a deleted user once the engine has finished their last cancelled session."""


@dataclass(frozen=True)
class Claimed:
    """One session handed to the worker."""

    seq: int
    job: str
    tenant: str
    session_id: str
    payload: dict[str, Any]


class JobQueue:
    """Submit, claim, finish and report jobs; safe to share between request threads and the worker.

    On PostgreSQL several processes (API replicas with their engines, ``promem worker``) share one queue: a
    claim takes rows ``FOR UPDATE SKIP LOCKED`` and holds them under a lease of ``lease_s`` seconds that a
    heartbeat thread renews while the engine runs them; a process killed mid-job stops renewing, and once
    the lease lapses another claims its sessions (the store keeps one copy of a session whoever writes it:
    its key is tenant, user and session id). In an SQLite file one process owns the queue; the same heartbeat
    keeps the sessions it runs from being claimed again when they run past a lease, and a restart puts every
    running row back at once."""

    def __init__(self, conn: Tables, *, retention_s: float = DEFAULT_RETENTION_S, lease_s: float = LEASE_S) -> None:
        self._conn = conn
        self.retention_s = retention_s
        self.lease_s = lease_s
        self._shared = conn.dialect == "postgresql"
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        """Who claims (``claimed_by``): host and process id, so an operator sees which process holds what."""
        self._held: set[int] = set()
        """The rows this process claimed and has not finished: the heartbeat renews their lease."""
        self._held_lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._closed = threading.Event()
        self._next_expiry = 0.0
        self.wakeup = threading.Event()
        """Set on every submit, so an idle worker starts at once instead of at its next poll."""

    def _transaction(self) -> AbstractContextManager[Database]:
        return self._conn.transaction(exclusive=False)

    def recover(self) -> int:
        """Put sessions back in line (cancelled ones go); returns how many. In a file: every running row (a
        previous process's). Shared: this process's own claims and those whose lease lapsed, never a live
        process's."""
        with self._held_lock:
            mine, self._held = sorted(self._held), set()
        with self._transaction() as conn:
            if not self._shared:
                conn.execute("DELETE FROM serve_queue WHERE state='cancelled'")
                conn.execute(_DRAINED)
                return int(conn.execute("UPDATE serve_queue SET state='pending' WHERE state='running'").rowcount)
            cur = conn.execute("UPDATE serve_queue SET state='pending', lease_until=NULL WHERE state='running' AND "
                               f"(lease_until < ? OR seq IN ({','.join('?' * len(mine)) or 'NULL'}))",
                               (time.time(), *mine))
        return int(cur.rowcount)

    def _renew(self) -> None:
        """The heartbeat: :meth:`renew` a third of a lease apart, while this process holds rows and the queue
        is open. It ends when nothing is held (the next claim starts another), so a queue left behind never
        keeps a thread knocking at a database that has gone."""
        while not self._closed.wait(self.lease_s / 3):
            with self._held_lock:
                if not self._held:
                    self._heartbeat = None
                    return
            try:
                self.renew()
            except Exception:  # the database is away: the lease may lapse, and another process takes over
                if not self._closed.is_set():
                    log.warning("could not renew the lease of the claimed sessions", exc_info=True)

    def close(self) -> None:
        """Stop the heartbeat; rows still held are no longer renewed, so their lease lapses and they are
        claimed again (by a restarted process, or another). The connection stays the caller's to close."""
        self._closed.set()
        with self._held_lock:
            beat, self._heartbeat = self._heartbeat, None
        if beat is not None:
            beat.join(timeout=5.0)

    def renew(self) -> int:
        """Extend the lease of every row this process holds; returns how many. A row another transaction has
        locked (this process's own :meth:`finish`, marking it done) is skipped, not waited for: a heartbeat
        that waited there while the finish waited for a row the heartbeat had locked would be a deadlock,
        and the finish PostgreSQL aborted to break it would leave its sessions running for good."""
        with self._held_lock:
            held = sorted(self._held)
        if not held:
            return 0
        with self._transaction() as conn:
            cur = conn.execute("UPDATE serve_queue SET lease_until=? WHERE seq IN (SELECT seq FROM serve_queue WHERE "
                               f"state='running' AND seq IN ({','.join('?' * len(held))})"
                               + (" FOR UPDATE SKIP LOCKED)" if self._shared else ")"),
                               (time.time() + self.lease_s, *held))
        return int(cur.rowcount)

    def release(self, seqs: list[int]) -> None:
        """Stop renewing the lease of these claimed rows, so that once it lapses they are claimed again (by
        this process or another): for sessions whose outcome could not be recorded."""
        with self._held_lock:
            self._held.difference_update(seqs)

    def submit(self, tenant: str, user: str, sessions: list[dict[str, Any]]) -> str:
        """Store a job and its sessions in one transaction; the id is returned only once it is durable."""
        job = secrets.token_hex(8)
        rows = [(job, tenant, str(s["session_id"]), json.dumps(s, ensure_ascii=False)) for s in sessions]
        with self._transaction() as conn:
            conn.execute("INSERT INTO serve_jobs (id, tenant, \"user\", created, total) VALUES (?, ?, ?, ?, ?)",
                         (job, tenant, user, time.time(), len(rows)))
            conn.executemany("INSERT INTO serve_queue (job, tenant, session_id, payload) VALUES (?, ?, ?, ?)", rows)
        self.wakeup.set()
        return job

    def claim(self, limit: int) -> list[Claimed]:
        """Up to ``limit`` pending sessions, oldest first, marked running. (The worker asks at least once per
        poll, so this is also where finished jobs past the retention period are removed.)"""
        if time.monotonic() >= self._next_expiry:
            self.expire()
        if limit <= 0:
            return []
        now = time.time()
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT seq, job, tenant, session_id, payload FROM serve_queue WHERE state='pending' OR "
                "(state='running' AND lease_until < ?) ORDER BY seq LIMIT ?"
                + (" FOR UPDATE SKIP LOCKED" if self._shared else ""), (now, limit)).fetchall()
            conn.executemany("UPDATE serve_queue SET state='running', lease_until=?, claimed_by=? WHERE seq=?",
                             [(now + self.lease_s, self.holder, r[0]) for r in rows])
        if rows:  # in a file too: a session running past its lease would be claimed again by this process
            with self._held_lock:
                self._held.update(r[0] for r in rows)
                if self._heartbeat is None and not self._closed.is_set():
                    self._heartbeat = threading.Thread(target=self._renew, name="promem-lease", daemon=True)
                    self._heartbeat.start()
        return [Claimed(seq=r[0], job=r[1], tenant=r[2], session_id=r[3], payload=json.loads(r[4])) for r in rows]

    def finish(self, outcomes: list[tuple[int, str | None]]) -> None:
        """Mark sessions done (error None) or failed, in one transaction. A done session's payload is dropped
        (its memory is in the store now); a failed one keeps it, to be looked at or sent again. A session
        cancelled while it ran is removed now that the engine is done with it."""
        now = time.time()
        with self._held_lock:
            self._held.difference_update(seq for seq, _ in outcomes)
        with self._transaction() as conn:
            conn.executemany("UPDATE serve_queue SET state='done', error=NULL, finished=?, payload='' WHERE seq=? "
                             "AND state='running'", [(now, seq) for seq, error in outcomes if not error])
            conn.executemany("UPDATE serve_queue SET state='failed', error=?, finished=? WHERE seq=? AND "
                             "state='running'", [(error, now, seq) for seq, error in outcomes if error])
            gone = conn.executemany("DELETE FROM serve_queue WHERE seq=? AND state='cancelled'",
                                    [(seq,) for seq, _ in outcomes])
            if gone.rowcount:
                conn.execute(_DRAINED)

    def cancel(self, tenant: str, user: str, sessions: Collection[str] | None = None,
               filters: dict[str, Any] | None = None) -> int:
        """Cancel the user's queued and running sessions (or only those named in ``sessions`` and those whose
        metadata meets ``filters``: :mod:`promem_fast.store.filters`) and remove their records.

        Queued sessions are deleted; running ones stay in the queue as ``cancelled``, with their session id
        and payload blanked, until the engine finishes them, and are not stored then (the store's write
        checks :data:`STILL_WANTED` in its own transaction). Deleting a whole user also blanks the user's
        name on the jobs whose sessions are still running and deletes every other job of theirs. Returns
        the sessions that were pending or running."""
        scope = 'job IN (SELECT id FROM serve_jobs WHERE tenant = ? AND "user" = ?)'
        params: tuple[Any, ...] = (tenant, user)
        with self._transaction() as conn:
            if sessions is not None or filters:
                named = list(sessions or ())
                meets = matcher(filters)
                chosen = [seq for seq, payload in conn.execute(
                    f"SELECT seq, payload FROM serve_queue WHERE {scope} AND state IN ('pending', 'running')", params)
                    if meets(json.loads(payload).get("metadata") or {})] if filters else []
                scope = (f"{scope} AND (session_id IN ({_marks(named)}) OR seq IN ({_marks(chosen)}))")
                params = (*params, *named, *chosen)
            (live,) = conn.execute(f"SELECT COUNT(*) FROM serve_queue WHERE {scope} AND state IN "
                                   "('pending', 'running')", params).fetchone()
            conn.execute(f"UPDATE serve_queue SET state='cancelled', session_id='', payload='', error=NULL "
                         f"WHERE {scope} AND state='running'", params)
            conn.execute(f"DELETE FROM serve_queue WHERE {scope} AND state != 'cancelled'", params)
            conn.execute("UPDATE serve_jobs SET \"user\"='' WHERE tenant = ? AND \"user\" = ? AND id NOT IN "
                         "(SELECT job FROM serve_queue WHERE state != 'cancelled')", (tenant, user))
            conn.execute(_DRAINED)
        return int(live)

    def expire(self) -> int:
        """Remove jobs whose every session finished more than ``retention_s`` ago; returns how many."""
        cutoff = time.time() - self.retention_s
        with self._transaction() as conn:
            old = [job for (job,) in conn.execute(
                "SELECT job FROM serve_queue GROUP BY job HAVING SUM(CASE WHEN state IN ('pending', 'running', "
                "'cancelled') THEN 1 ELSE 0 END) = 0 AND MAX(finished) < ?", (cutoff,))]
            conn.executemany("DELETE FROM serve_queue WHERE job = ?", [(job,) for job in old])
            conn.executemany("DELETE FROM serve_jobs WHERE id = ?", [(job,) for job in old])
        self._next_expiry = time.monotonic() + min(EXPIRY_EVERY_S, self.retention_s / 2)
        return len(old)

    def depth(self) -> int:
        """Sessions accepted and not finished yet (pending or running, or cancelled and still running)."""
        row = self._conn.execute(
            "SELECT COUNT(*) FROM serve_queue WHERE state IN ('pending', 'running', 'cancelled')").fetchone()
        return int(row[0])

    def status(self, tenant: str, job: str) -> dict[str, Any] | None:
        """A job's progress, or None when ``tenant`` has no such job (another tenant's looks the same)."""
        head = self._conn.execute('SELECT "user", created, total FROM serve_jobs WHERE id=? AND tenant=? AND '
                                  '"user" != \'\'', (job, tenant)).fetchone()
        if head is None:
            return None
        rows = self._conn.execute("SELECT session_id, state, error FROM serve_queue WHERE job=? AND "
                                  "state != 'cancelled' ORDER BY seq", (job,)).fetchall()
        counts = {state: 0 for state in ("pending", "running", "done", "failed")}
        for _, state, _ in rows:
            counts[state] += 1
        total = len(rows)  # the sessions accepted, less any whose memory was deleted since
        finished = counts["done"] + counts["failed"] == total
        return {"job_id": job, "user": head[0], "created": head[1], "total": total, **counts,
                "state": "finished" if finished else ("queued" if counts["pending"] == total else "running"),
                "errors": [{"session_id": sid, "error": err} for sid, state, err in rows if state == "failed"]}


def _marks(values: Collection[Any]) -> str:
    """SQL placeholders for ``values`` (``NULL``, which matches nothing, for none)."""
    return ",".join("?" * len(values)) or "NULL"
