"""The store's JSONL exchange format: memory moves between machines and versions as one plain file.

Line 1 is a header, ``{"format": "promem-store", "version": 1, "dim": 384}``. Then one line per session,
in the order they were stored::

    {"kind": "session", "tenant": "default", "user": "Maya",
     "session": {"session_id", "timestamp", "mode", "nodes", "edges", "details", "events", "stats",
                 "metadata" (only when the session has any)},
     "vectors": "<base64 of the nodes' float32 vectors, node order>" | null}

(``session`` is the graph as ``promem extract`` writes it, nodes with all their fields; ``"pending": true`` marks
a session still waiting for its update verdicts when the export was taken, a backup made while a writer
judged: it is imported pending too, for the next add to judge, not as a session with no links), and last one line
per supersede link, nodes named by session and node id within the session's graph::

    {"kind": "supersede", "tenant": "default", "user": "Maya", "old": {"session_id": "s1", "node": 3},
     "new": {"session_id": "s4", "node": 0}, "reason": "llm"}

then one line per merged duplicate (version 2), the later saying first::

    {"kind": "merge", "tenant": "default", "user": "Maya", "node": {"session_id": "s5", "node": 1},
     "kept": {"session_id": "s1", "node": 3}, "reason": "..."}

Exporting a store, importing the file into an empty store and exporting that gives the same bytes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from promem_fast.errors import InputError
from promem_fast.jsonl import decode_line, printable
from promem_fast.names import name_problem
from promem_fast.private import open_private

from promem_fast.times import iso_time

from . import rows
from .api import Database
from .connection import integrity_errors
from .pending import reopen_from
from .timeline import session_key

_LINKS = (("supersede", "supersedes", "old", "new"), ("merge", "merges", "node", "kept"))
"""Link lines: kind, table, and its two node columns (also the line's field names)."""

FORMAT = "promem-store"
VERSION = 2
MAX_DIM = 65_536
"""Largest vector dimension an export may declare (real embedders give a few hundred to a few thousand)."""


def export_store(db: Database, target: Path | IO[str], tenant: str | None) -> int:
    """Write every session (of ``tenant``, or all) and the supersede links among them to a file (through a
    ``.tmp`` beside it) or into an open text handle; returns sessions written."""
    row = db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    dim = int(row[0]) if row else None
    scope, params = ("WHERE t.name = ?", (tenant,)) if tenant is not None else ("", ())
    if not isinstance(target, Path):
        return _write_export(db, target, dim, scope, params)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open_private(tmp, "w", encoding="utf-8") as out:
            count = _write_export(db, out, dim, scope, params)
    except BaseException:  # a half-written export is not left beside the target
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(target)
    return count


def _write_export(db: Database, out: IO[str], dim: int | None, scope: str, params: tuple[Any, ...]) -> int:
    """The export written to ``out``; returns the sessions written."""
    count = 0
    out.write(rows.dumps({"format": FORMAT, "version": VERSION, "dim": dim}) + "\n")
    for line in _session_lines(db, scope, params, dim):
        out.write(line + "\n")
        count += 1
    for kind, table, first, second in _LINKS:  # first the replaced / merged node, then the other
        for a_sid, a_local, b_sid, b_local, t_name, u_name, reason in db.execute(
                "SELECT sa.session_id, a.local_id, sb.session_id, b.local_id, t.name, u.name, l.reason "
                f"FROM {table} l JOIN nodes a ON a.id = l.{first} JOIN nodes b ON b.id = l.{second} "
                "JOIN sessions sa ON sa.id = a.session_pk JOIN sessions sb ON sb.id = b.session_pk JOIN users u "
                f"ON u.id = a.user_id JOIN tenants t ON t.id = u.tenant_id {scope} ORDER BY l.{first}", params):
            out.write(rows.dumps({"kind": kind, "tenant": t_name, "user": u_name,
                                  first: {"session_id": a_sid, "node": a_local},
                                  second: {"session_id": b_sid, "node": b_local}, "reason": reason}) + "\n")
    return count


def _session_lines(db: Database, scope: str, params: tuple[Any, ...], dim: int | None) -> Iterator[str]:
    sessions = db.execute(
        "SELECT s.id, t.name, u.name, s.session_id, s.timestamp, s.mode, s.events, s.stats, s.metadata, s.judged "
        "FROM sessions s "
        f"JOIN users u ON u.id = s.user_id JOIN tenants t ON t.id = u.tenant_id {scope} ORDER BY s.id", params)
    for spk, t_name, u_name, sid, timestamp, mode, events, stats, metadata, judged in sessions.fetchall():
        nodes = db.execute(f"SELECT data, {db.vector_sql('vector')} FROM nodes WHERE session_pk = ? ORDER BY id",
                           (spk,)).fetchall()
        edges = db.execute("SELECT data FROM edges WHERE session_pk = ? ORDER BY id", (spk,)).fetchall()
        details = db.execute("SELECT data FROM details WHERE session_pk = ? ORDER BY local_id", (spk,)).fetchall()
        blobs = [v for _, v in nodes]
        vectors = (base64.b64encode(db.decode_vectors(blobs, dim).tobytes()).decode("ascii")
                   if blobs and dim and all(b is not None for b in blobs) else None)
        record = {"session_id": sid, "timestamp": timestamp, "mode": mode,
                  "nodes": [json.loads(d) for d, _ in nodes], "edges": [json.loads(d) for (d,) in edges],
                  "details": [json.loads(d) for (d,) in details], "events": json.loads(events),
                  "stats": json.loads(stats), **({"metadata": json.loads(metadata)} if metadata != "{}" else {})}
        yield rows.dumps({"kind": "session", "tenant": t_name, "user": u_name, "session": record,
                          "vectors": vectors, **({} if judged else {"pending": True})})


def import_store(db: Database, path: Path, check_dim: Callable[[int | None], None]) -> int:
    """Add the sessions and links of an export (inside the caller's transaction); returns sessions added."""
    added = 0
    fresh: set[tuple[str, str, str]] = set()
    with open(path, "rb") as lines:
        dim = _header(path, _parse(path, 1, lines.readline()))
        check_dim(dim)
        for number, text in enumerate(lines, start=2):
            if not text.strip():
                continue
            item = _parse(path, number, text)
            field = None  # the field being read, named if it is bad
            try:
                for field in ("tenant", "user"):
                    _check_name(item[field], path, number, item, field)
                field = "kind"
                user_pk = rows.ensure_user(db, item["tenant"], item["user"])
                if item["kind"] == "session":
                    field = "session"
                    record = item["session"]
                    field = "session.session_id"
                    sid = record["session_id"]
                    _check_name(sid, path, number, item, field)
                    if db.execute("SELECT 1 FROM sessions WHERE user_id = ? AND session_id = ?",
                                  (user_pk, sid)).fetchone():
                        continue
                    vectors = None
                    if item.get("vectors") is not None and dim:
                        field = "vectors"
                        vectors = np.frombuffer(base64.b64decode(item["vectors"], validate=True),
                                                np.float32).reshape(-1, dim)
                        if len(vectors) != len(record["nodes"]):
                            raise ValueError(f"{len(vectors)} vectors for {len(record['nodes'])} nodes")
                    field = "session"
                    waits = item.get("pending") is True
                    rows.insert_session(db, user_pk, record, vectors, judged=not waits)
                    if waits:  # judged sessions said after it are judged again with it (the canonical order)
                        reopen_from(db, user_pk, session_key(iso_time(record.get("timestamp")), sid), inclusive=False)
                    fresh.add((item["tenant"], item["user"], sid))
                    added += 1
                elif item["kind"] == "supersede":
                    field = "supersede"
                    if (item["tenant"], item["user"], item["new"]["session_id"]) in fresh:
                        old, new = _node(db, user_pk, item["old"]), _node(db, user_pk, item["new"])
                        rows.supersede(db, old, new, item["reason"])
                elif item["kind"] == "merge":
                    field = "merge"
                    if (item["tenant"], item["user"], item["node"]["session_id"]) in fresh:
                        rows.merge(db, _node(db, user_pk, item["node"]), _node(db, user_pk, item["kept"]),
                                   item["reason"])
                else:
                    raise KeyError("kind")
            except (KeyError, TypeError, ValueError, *integrity_errors()) as exc:  # bad base64: a ValueError
                # a missing key names itself; any other fault is in the field being read when it was raised
                name = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else field
                raise InputError(f"bad record ({type(exc).__name__}: {exc})", file=str(path), line=number,
                                 session_id=_session_of(item), field=name) from exc
    return added


def _check_name(value: Any, path: Path, number: int, item: dict[str, Any], field: str) -> None:
    """The name rule of :mod:`promem_fast.names` on a user, tenant or session id of an export line."""
    problem = name_problem(value)
    if problem is not None:
        raise InputError(problem, file=str(path), line=number, session_id=_session_of(item), field=field)


def _node(db: Database, user_pk: int, ref: dict[str, Any]) -> int:
    row = db.execute("SELECT n.id FROM nodes n JOIN sessions s ON s.id = n.session_pk WHERE s.user_id = ? AND "
                     "s.session_id = ? AND n.local_id = ?", (user_pk, ref["session_id"], ref["node"])).fetchone()
    if row is None:
        raise ValueError(f"no node {ref['node']} in session {ref['session_id']!r}")
    return int(row[0])


def _header(path: Path, header: dict[str, Any]) -> int | None:
    """The vector dimension the export's first line declares, after checking it is our format and version."""
    def bad(message: str, field: str) -> InputError:
        return InputError(message, file=str(path), line=1, field=field)

    if header.get("format") != FORMAT:
        raise bad(f"not a {FORMAT} export (header {printable(repr(header))[:200]})", "format")
    version, dim = header.get("version", 0), header.get("dim")
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad(f"must be an integer, got {type(version).__name__}", "version")
    if version > VERSION:
        raise bad(f"export version {version} is newer than this promem_fast reads ({VERSION})", "version")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= MAX_DIM):
        raise bad(f"must be null or an integer from 1 to {MAX_DIM}", "dim")
    return dim


def _parse(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    value = decode_line(raw, str(path), number)
    if isinstance(value, InputError):
        raise value
    if not isinstance(value, dict):
        raise InputError("not a JSON object", file=str(path), line=number)
    return value


def _session_of(item: dict[str, Any]) -> str | None:
    session = item.get("session")
    sid = session.get("session_id") if isinstance(session, dict) else None
    return printable(sid) if isinstance(sid, str) else None
