"""The canonical order of update judging, kept whatever order sessions arrive in, and however they leave.

Rule: each session of a user is judged against that user's memory as it stood after every earlier session
in the canonical order (:func:`.timeline.session_key`: when said, then session id), and only then. So which
memories are current depends on the sessions a user has, never on the window, batching, a kill and resume
point, or whether graphs came through ``extract --db``, ``ingest``, the service or :class:`promem_fast.Memory`.

How: a session is written with ``judged = 0``; the judged sessions of a user are always a prefix of their
canonical order. A session that arrives before judged ones reopens those (their links are removed, they
are judged again); deleting a session or a memory reopens everything from it on. :func:`settle` then
judges the pending sessions, the first pending one of each user per round (users in one engine run), each
verdict written with its ``judged = 1`` in one transaction, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from promem_fast.errors import InputError

from . import rows
from .timeline import iso_time, session_key

if TYPE_CHECKING:
    import numpy as np

    from promem_fast.engine import Engine
    from promem_fast.types import MemoryGraph

    from .view import StoreView

log = logging.getLogger(__name__)


def reopen_from(db: sqlite3.Connection, user_pk: int, key: tuple[Any, ...], *, inclusive: bool) -> int:
    """Mark the user's judged sessions after ``key`` (from it, with ``inclusive``) pending again and remove
    the links their entries made (what those replaced or absorbed is as before they came); returns how many."""
    later = [pk for pk, said_at, sid in db.execute(  # said no earlier (undated ones sort last): few, usually
        "SELECT id, said_at, session_id FROM sessions WHERE user_id = ? AND judged = 1 AND (said_at IS NULL OR "
        "said_at >= ?)", (user_pk, key[0]))
             if (session_key(said_at, sid) >= key if inclusive else session_key(said_at, sid) > key)]
    for lo in range(0, len(later), 500):
        part = later[lo:lo + 500]
        nodes = f"SELECT id FROM nodes WHERE session_pk IN ({rows.placeholders(len(part))})"
        db.execute("UPDATE nodes SET superseded_by = NULL, valid_until = NULL WHERE id IN "
                   f"(SELECT old FROM supersedes WHERE new IN ({nodes}))", part)
        db.execute(f"DELETE FROM supersedes WHERE new IN ({nodes})", part)
        db.execute(f"UPDATE nodes SET merged_into = NULL WHERE id IN (SELECT node FROM merges WHERE node IN ({nodes}))",
                   part)
        db.execute(f"DELETE FROM merges WHERE node IN ({nodes})", part)
        db.execute(f"UPDATE sessions SET judged = 0 WHERE id IN ({rows.placeholders(len(part))})", part)
    return len(later)


def write_pending(store: StoreView, tenant: str, graphs: Sequence[MemoryGraph], vectors: Sequence[np.ndarray]
                  ) -> int:
    """Store each graph in its own transaction, pending judgement, reopening the judged sessions of its
    user that come after it; returns how many were stored (one another writer stored meanwhile is not)."""
    stored = 0
    for graph, block in zip(graphs, vectors, strict=True):
        with store._write() as db:
            user_pk = rows.ensure_user(db, tenant, graph.user)
            if db.execute("SELECT 1 FROM sessions WHERE user_id = ? AND session_id = ?",
                          (user_pk, graph.session_id)).fetchone():
                continue
            try:
                rows.insert_session(db, user_pk, rows.graph_record(graph), block, judged=False)
            except sqlite3.IntegrityError as exc:  # e.g. two nodes with one id: the session is not stored
                raise InputError(f"graph cannot be stored ({exc})", session_id=graph.session_id,
                                 field="nodes") from exc
            reopen_from(db, user_pk, session_key(iso_time(graph.timestamp), graph.session_id), inclusive=False)
        stored += 1
    return stored


def key_of(db: sqlite3.Connection, session_pk: int) -> tuple[Any, ...]:
    said_at, sid = db.execute("SELECT said_at, session_id FROM sessions WHERE id = ?", (session_pk,)).fetchone()
    return session_key(said_at, sid)


def first_pending(db: sqlite3.Connection, user_pk: int) -> int | None:
    """The user's first session (canonical order) still to be judged."""
    pending = db.execute("SELECT id, said_at, session_id FROM sessions WHERE user_id = ? AND judged = 0",
                         (user_pk,)).fetchall()
    return min(pending, key=lambda r: session_key(r[1], r[2]))[0] if pending else None


def pending_users(db: sqlite3.Connection) -> list[int]:
    return [pk for (pk,) in db.execute("SELECT DISTINCT user_id FROM sessions WHERE judged = 0 ORDER BY user_id")]


def settle(store: StoreView, user_pks: Iterable[int], engine: Engine | None) -> int:
    """Judge the pending sessions of these users in the canonical order; returns the sessions judged."""
    from .update import judge_sessions

    users = sorted(set(user_pks))
    done = 0
    while users:
        batch = []
        for user_pk in users:
            session_pk = first_pending(store._db, user_pk)
            if session_pk is not None:
                name = store._db.execute("SELECT name FROM users WHERE id = ?", (user_pk,)).fetchone()
                batch.append((str(name[0]), user_pk, session_pk))
        users = [user_pk for _, user_pk, _ in batch]
        if not batch:
            break
        outcomes = ([None] * len(batch) if store.update_judge == "off"
                    else judge_sessions(store, batch, engine))
        for (_, user_pk, session_pk), outcome in zip(batch, outcomes, strict=True):
            with store._write() as db:
                if first_pending(db, user_pk) != session_pk:
                    continue  # another writer changed this user meanwhile: judged again next round
                for node, kept, reason in outcome.merges if outcome else ():
                    rows.merge(db, node, kept, reason)
                for old, new, reason in outcome.supersedes if outcome else ():
                    rows.supersede(db, old, new, reason)
                db.execute("UPDATE sessions SET judged = 1 WHERE id = ?", (session_pk,))
            done += 1
    return done
