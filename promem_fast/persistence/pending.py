"""The rows behind the canonical order of update judging (the rule is :mod:`promem_fast.store.ordering`'s).

A session is written with ``judged = 0`` and ``shown = 0`` (readers see its memories from its verdicts on,
or, while sessions it reopened are judged again, from theirs: :func:`.timeline.shown`); the judged sessions of
a user are always a prefix of their canonical order (:func:`.timeline.session_key`). These functions read and
change that state, each inside the transaction its caller holds: which sessions are pending, reopening the
judged ones after a point (their links removed), the candidates an entry is compared with, and a session's
verdicts with its mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from promem_fast.errors import InputError
from promem_fast.times import iso_time
from promem_fast.types import MemoryGraph
from promem_fast.verbatim import MODE as VERBATIM

from . import rows
from .api import Database
from .connection import integrity_errors
from .timeline import UNDATED, session_key


def reopen_from(db: Database, user_pk: int, key: tuple[Any, ...], *, inclusive: bool) -> int:
    """Mark the user's judged sessions after ``key`` (from it, with ``inclusive``) pending again and remove
    the links their entries made (what those replaced or absorbed is as before they came, held back from readers
    until :func:`release`); returns how many."""
    later = [pk for pk, said_at, sid in db.execute(  # said no earlier (undated ones sort last): few, usually
        "SELECT id, said_at, session_id FROM sessions WHERE user_id = ? AND judged = 1 AND (said_at IS NULL OR "
        "said_at >= ?)", (user_pk, key[0]))
             if (session_key(said_at, sid) >= key if inclusive else session_key(said_at, sid) > key)]
    for lo in range(0, len(later), 500):
        part = later[lo:lo + 500]
        nodes = f"SELECT id FROM nodes WHERE session_pk IN ({rows.placeholders(len(part))})"
        db.execute(f"UPDATE nodes SET held = 1 WHERE id IN (SELECT old FROM supersedes WHERE new IN ({nodes})) "
                   f"OR id IN (SELECT node FROM merges WHERE node IN ({nodes}))", (*part, *part))  # until release
        db.execute("UPDATE nodes SET superseded_by = NULL, valid_until = NULL WHERE id IN "
                   f"(SELECT old FROM supersedes WHERE new IN ({nodes}))", part)
        db.execute(f"DELETE FROM supersedes WHERE new IN ({nodes})", part)
        db.execute(f"UPDATE nodes SET merged_into = NULL WHERE id IN (SELECT node FROM merges WHERE node IN ({nodes}))",
                   part)
        db.execute(f"DELETE FROM merges WHERE node IN ({nodes})", part)
        db.execute(f"UPDATE sessions SET judged = 0 WHERE id IN ({rows.placeholders(len(part))})", part)
    return len(later)


def insert_pending(db: Database, tenant: str, graph: MemoryGraph, vectors: np.ndarray) -> bool:
    """Store one graph pending judgement and reopen the judged sessions of its user that come after it;
    False when the session is already stored (by another writer meanwhile: stored once, by tenant, user
    and session id)."""
    user_pk = rows.ensure_user(db, tenant, graph.user)
    if db.execute("SELECT 1 FROM sessions WHERE user_id = ? AND session_id = ?",
                  (user_pk, graph.session_id)).fetchone():
        return False
    try:
        rows.insert_session(db, user_pk, rows.graph_record(graph), vectors, judged=False)
    except integrity_errors() as exc:  # e.g. two nodes with one id: the session is not stored
        raise InputError(f"graph cannot be stored ({exc})", session_id=graph.session_id, field="nodes") from exc
    reopen_from(db, user_pk, session_key(iso_time(graph.timestamp), graph.session_id), inclusive=False)
    return True


def key_of(db: Database, session_pk: int) -> tuple[Any, ...]:
    said_at, sid = db.execute("SELECT said_at, session_id FROM sessions WHERE id = ?", (session_pk,)).fetchone()
    return session_key(said_at, sid)


def pending(db: Database, user_pk: int) -> list[int]:
    """The user's sessions still to be judged, in the canonical order."""
    found = db.execute("SELECT id, said_at, session_id FROM sessions WHERE user_id = ? AND judged = 0",
                       (user_pk,)).fetchall()
    return [pk for pk, _, _ in sorted(found, key=lambda r: session_key(r[1], r[2]))]


def pending_users(db: Database) -> list[int]:
    return [pk for (pk,) in db.execute("SELECT DISTINCT user_id FROM sessions WHERE judged = 0 ORDER BY user_id")]


def unseen(db: Database, user_pk: int) -> int:
    """How many of the user's sessions readers do not see yet (their verdicts, or those of sessions they
    reopened, still to come: :func:`.timeline.shown`)."""
    (count,) = db.execute("SELECT COUNT(*) FROM sessions WHERE user_id = ? AND shown = 0", (user_pk,)).fetchone()
    return int(count)


def user_name(db: Database, user_pk: int) -> str:
    (name,) = db.execute("SELECT name FROM users WHERE id = ?", (user_pk,)).fetchone()
    return str(name)


Judged = tuple[int, int]
"""How many of a user's sessions are judged, and the sum of their ids: it changes when another is judged."""


def judged(db: Database, user_pk: int) -> Judged:
    """Which of the user's sessions are judged so far (:data:`Judged`): what candidates were read against."""
    count, total = db.execute("SELECT COUNT(*), COALESCE(SUM(id), 0) FROM sessions WHERE user_id = ? AND judged = 1",
                              (user_pk,)).fetchone()
    return int(count), int(total)


def write_verdicts(db: Database, user_pk: int, session_pk: int, merges: Sequence[tuple[int, int, str]],
                   supersedes: Sequence[tuple[int, int, str]], *, against: Judged) -> bool:
    """A session's links and its ``judged`` mark; False when another writer changed the user since its
    candidates were read (``against``: the sessions judged then): the session is no longer the user's
    first pending one, or an earlier session was judged meanwhile, whose memories the links did not see."""
    still = pending(db, user_pk)
    if not still or still[0] != session_pk or judged(db, user_pk) != against:
        return False
    for node, kept, reason in merges:
        rows.merge(db, node, kept, reason)
    for old, new, reason in supersedes:
        rows.supersede(db, old, new, reason)
    db.execute("UPDATE sessions SET judged = 1 WHERE id = ?", (session_pk,))
    release(db, user_pk)
    return True


def release(db: Database, user_pk: int) -> bool:
    """Once no session of the user judged before waits to be judged again, the judged sessions are the memory as
    it stands: the new ones show, and the memories held back by :func:`reopen_from` show as now judged. False
    (nothing changed) while one still waits."""
    if db.execute("SELECT 1 FROM sessions WHERE user_id = ? AND judged = 0 AND shown = 1", (user_pk,)).fetchone():
        return False
    db.execute("UPDATE sessions SET shown = 1 WHERE user_id = ? AND shown = 0 AND judged = 1", (user_pk,))
    db.execute("UPDATE nodes SET held = 0 WHERE user_id = ? AND held = 1", (user_pk,))
    return True


def unreleased(db: Database, user_pk: int) -> bool:
    """Whether the user has judged sessions or held memories that :func:`release` has yet to show."""
    found = db.execute("SELECT 1 FROM sessions WHERE user_id = ? AND shown = 0 AND judged = 1 UNION ALL "
                       "SELECT 1 FROM nodes WHERE user_id = ? AND held = 1 LIMIT 1", (user_pk, user_pk)).fetchone()
    return found is not None


def session_entries(db: Database, session_pk: int, dim: int) -> tuple[list[tuple[int, str, str | None]], np.ndarray]:
    """A session's embedded entries ``(id, text, valid_from)`` in graph order, and their vectors: what is
    judged against the user's older memory. None for a session kept as written (:mod:`promem_fast.verbatim`)."""
    found = db.execute(f"SELECT n.id, n.text, n.valid_from, {db.vector_sql('n.vector')} FROM nodes n JOIN sessions s "
                       "ON s.id = n.session_pk WHERE n.session_pk = ? AND n.vector IS NOT NULL AND s.mode <> ? "
                       "ORDER BY n.local_id", (session_pk, VERBATIM)).fetchall()
    return [(int(i), t, f) for i, t, f, _ in found], db.decode_vectors([v for *_, v in found], dim)


def vectors_of(db: Database, ids: Sequence[int], dim: int) -> np.ndarray:
    """The stored vectors of these nodes, row ``i`` for ``ids[i]`` (each of them has one)."""
    found = dict(db.execute(f"SELECT id, {db.vector_sql('vector')} FROM nodes WHERE id IN "
                            f"({rows.placeholders(len(ids))})", tuple(ids)).fetchall()) if ids else {}
    return db.decode_vectors([found[i] for i in ids], dim)


def eligible(db: Database, user_pk: int, session_pk: int, also: Sequence[int], ids: Sequence[int]
             ) -> dict[int, tuple[str, str, str, int]]:
    """Of the candidates (node ids), the older memories an entry of ``session_pk`` may update: current ones of
    judged sessions (or of ``also``), each with what orders equal scores whatever order sessions arrived in
    (unlike node ids): ``(said or UNDATED, text, session id, place in its session)``."""
    if not ids:
        return {}
    sql = ("SELECT n.id, n.valid_from, n.text, s.session_id, n.local_id FROM nodes n JOIN sessions s ON "
           f"s.id = n.session_pk WHERE s.user_id = ? AND (s.judged = 1 OR s.id IN ({rows.placeholders(len(also)) or 'NULL'})) "
           "AND n.session_pk != ? AND n.superseded_by IS NULL AND n.merged_into IS NULL AND "
           f"n.id IN ({rows.placeholders(len(ids))})")
    return {int(i): (when or UNDATED, text, sid, int(local))
            for i, when, text, sid, local in db.execute(sql, (user_pk, *also, session_pk, *ids))}
