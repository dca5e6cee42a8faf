"""SQL between the store and its records: writing one session's graph, reading nodes back as hits.

Kept apart from :class:`~promem_fast.store.store.MemoryStore` so the class reads as the API it is; every
function here runs inside whatever transaction its caller holds.
"""

from __future__ import annotations

import json
import logging
from dataclasses import fields
from typing import Any

import numpy as np

from promem_fast.errors import InputError
from promem_fast.names import name_problem
from promem_fast.times import EXPIRES, TimeProblem, iso_time, kept_day
from promem_fast.types import MemoryGraph

from .api import Database
from .hits import Hit, turn_key
from .timeline import now_iso

log = logging.getLogger(__name__)

_NODE_COLUMNS = ("n.id, u.name, s.session_id, n.text, n.date, n.turn_id, n.superseded_by, n.data, n.session_pk, "
                 "n.valid_from, n.valid_until, s.recorded_at, l.reason, n.merged_into, "
                 "COALESCE(n.metadata, s.metadata)")  # a memory's own metadata, else its session's


def dumps(value: Any) -> str:
    """Compact JSON, keys in the order given, so equal records are equal bytes (export round trips)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def ensure_user(db: Database, tenant: str, user: str) -> int:
    """The user's row id, creating the tenant and the user when they are new. The last guard of the name rule
    (:mod:`promem_fast.names`): every way into the store checks it earlier, naming file and line."""
    for field, value in (("tenant", tenant), ("user", user)):
        problem = name_problem(value)
        if problem is not None:
            raise InputError(problem, field=field)
    db.execute("INSERT INTO tenants (name) VALUES (?) ON CONFLICT DO NOTHING", (tenant,))
    (tenant_pk,) = db.execute("SELECT id FROM tenants WHERE name = ?", (tenant,)).fetchone()
    db.execute("INSERT INTO users (tenant_id, name) VALUES (?, ?) ON CONFLICT DO NOTHING", (tenant_pk, user))
    (user_pk,) = db.execute("SELECT id FROM users WHERE tenant_id = ? AND name = ?", (tenant_pk, user)).fetchone()
    return int(user_pk)


def insert_session(db: Database, user_pk: int, record: dict[str, Any], vectors: np.ndarray | None, *,
                   judged: bool = True) -> dict[int, int]:
    """Write one session's graph (``MemoryGraph.to_dict`` form); returns node id in the graph → store id.

    ``vectors`` holds one row per node (in the graph's node order); ``None`` leaves them to be embedded.
    ``judged=False`` leaves its update verdicts to come (:mod:`.ordering`), and the session unseen by readers
    until they are written (:func:`.pending.write_verdicts`); an import brings its own links.
    """
    problem = name_problem(record["session_id"])
    if problem is not None:
        raise InputError(problem, session_id=None, field="session_id")
    said_at = iso_time(record.get("timestamp"))
    metadata = _kept(record.get("metadata") or {}, record["session_id"], "metadata")
    cur = db.execute(
        "INSERT INTO sessions (user_id, session_id, timestamp, mode, events, stats, said_at, recorded_at, judged, "
        "shown, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (user_pk, record["session_id"], record.get("timestamp"), record.get("mode", "promem"),
         dumps(record.get("events", [])), dumps(record.get("stats", {})), said_at, now_iso(), int(judged), int(judged),
         dumps(metadata)))
    session_pk = int(cur.fetchall()[0][0])
    db.executemany(
        "INSERT INTO details (session_pk, local_id, text, turn_id, data) VALUES (?, ?, ?, ?, ?)",
        [(session_pk, i, d["text"], turn_key(d.get("turn_id")), dumps(d)) for i, d in enumerate(record["details"])])
    db.executemany(
        "INSERT INTO nodes (session_pk, user_id, local_id, text, turn_id, date, data, vector, valid_from, metadata) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(session_pk, user_pk, node["id"], node["text"],
          turn_key(node["turn_ids"][0]) if node.get("turn_ids") else None,
          node.get("date") or record.get("timestamp"), dumps(node),
          None if vectors is None else db.encode_vector(vectors[row]),
          said_at, own_metadata(node, record["session_id"], row)) for row, node in enumerate(record["nodes"])])
    ids = dict(db.execute("SELECT local_id, id FROM nodes WHERE session_pk = ?", (session_pk,)).fetchall())
    edges = []
    for edge in record["edges"]:
        if edge["source"] in ids and edge["target"] in ids:
            edges.append((session_pk, ids[edge["source"]], ids[edge["target"]], edge["relation"], dumps(edge)))
        else:
            log.warning("session %s: edge %s → %s names a node the graph does not have; not stored",
                        record["session_id"], edge["source"], edge["target"])
    db.executemany("INSERT INTO edges (session_pk, source, target, relation, data) VALUES (?, ?, ?, ?, ?)", edges)
    return ids


def own_metadata(node: dict[str, Any], session_id: str, row: int) -> str | None:
    """The ``nodes.metadata`` column of a node: the metadata an update gave this memory alone, which its JSON
    carries (so an export and its import keep it); None (its session's) for every extracted memory."""
    metadata = node.get("metadata")
    return None if metadata is None else dumps(_kept(metadata, session_id, f"nodes[{row}].metadata"))


def _kept(metadata: Any, session_id: str, field: str) -> dict[str, Any]:
    """Metadata as the store keeps it: a JSON object whose expiry, if any, is an ISO day (however it came: a
    Session built by hand, a graphs file, an import)."""
    if not isinstance(metadata, dict):
        raise InputError("must be a JSON object", session_id=session_id, field=field)
    if metadata.get(EXPIRES) is None:
        return metadata
    try:
        return {**metadata, EXPIRES: kept_day(metadata[EXPIRES])}
    except TimeProblem as exc:
        raise InputError(str(exc), session_id=session_id, field=f"{field}.{EXPIRES}") from None


def graph_record(graph: MemoryGraph) -> dict[str, Any]:
    """The graph as :func:`insert_session` takes it: ``MemoryGraph.to_dict`` without its generic (and, for a
    million nodes, slow) ``dataclasses.asdict`` walk; every field of a record is kept, new ones included."""
    return {"session_id": graph.session_id, "timestamp": graph.timestamp, "mode": graph.mode,
            "nodes": [_fields(n) for n in graph.nodes], "edges": [_fields(e) for e in graph.edges],
            "details": [_fields(d) for d in graph.details], "events": [_fields(e) for e in graph.events],
            "stats": graph.stats.to_dict(), "metadata": dict(graph.metadata)}


def _fields(record: Any) -> dict[str, Any]:
    """A flat record's fields (lists copied), in declaration order, as ``asdict`` gives them."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    out = {}
    for name in names:
        value = getattr(record, name)
        out[name] = list(value) if isinstance(value, list) else value
    return out


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def supersede(db: Database, old: int, new: int, reason: str) -> bool:
    """Mark ``old`` as replaced by ``new`` (held until ``new`` was said) unless something already replaced
    it; True when marked."""
    cur = db.execute("UPDATE nodes SET superseded_by = ?, valid_until = (SELECT valid_from FROM nodes WHERE id = ?)"
                     " WHERE id = ? AND superseded_by IS NULL AND id != ?", (new, new, old, new))
    if cur.rowcount:
        db.execute("INSERT INTO supersedes (old, new, reason) VALUES (?, ?, ?) ON CONFLICT (old) DO UPDATE SET "
                   "new = excluded.new, reason = excluded.reason", (old, new, reason))
    return bool(cur.rowcount)


def merge(db: Database, node: int, kept: int, reason: str) -> bool:
    """Mark ``node`` as a later saying of ``kept`` (which then lists its session); True when marked."""
    cur = db.execute("UPDATE nodes SET merged_into = ? WHERE id = ? AND merged_into IS NULL AND id != ?",
                     (kept, node, kept))
    if cur.rowcount:
        db.execute("INSERT INTO merges (node, kept, reason) VALUES (?, ?, ?) ON CONFLICT (node) DO UPDATE SET "
                   "kept = excluded.kept, reason = excluded.reason", (node, kept, reason))
    return bool(cur.rowcount)


def read_hits(db: Database, where: str, params: tuple[Any, ...],
              scores: dict[int, float] | None = None) -> list[Hit]:
    """Hits for the nodes matching ``where`` (over ``nodes n``), with their details and edges, by id."""
    rows = db.execute(
        f"SELECT {_NODE_COLUMNS} FROM nodes n JOIN sessions s ON s.id = n.session_pk "
        f"JOIN users u ON u.id = n.user_id LEFT JOIN supersedes l ON l.old = n.id WHERE {where} ORDER BY n.id",
        params).fetchall()
    if not rows:
        return []
    nodes = {row[0]: json.loads(row[7]) for row in rows}
    if len(nodes) <= FEW_NODES:
        details, edges = _details_of(db, rows, nodes), _edges(db, where, params, tuple(nodes))
    else:
        details, edges = _details_of(db, rows, None, where, params), _edges(db, where, params)
    also: dict[int, list[str]] = {}
    for kept, sid in db.execute(
            "SELECT m.kept, s.session_id FROM merges m JOIN nodes d ON d.id = m.node JOIN sessions s ON "
            f"s.id = d.session_pk WHERE m.kept IN (SELECT n.id FROM nodes n WHERE {where}) "
            "ORDER BY d.valid_from, d.id", params):
        also.setdefault(kept, []).append(sid)
    hits = []
    for (node_id, user, session_id, text, date, turn, superseded_by, _, spk, valid_from, valid_until,
         recorded_at, reason, merged_into, metadata) in rows:
        node = nodes[node_id]
        hits.append(Hit(
            node_id=node_id, user=user, session_id=session_id, text=text, date=date,
            turn_id=None if turn is None else json.loads(turn),
            score=None if scores is None else scores.get(node_id),
            details=[details[(spk, i)] for i in node.get("details", []) if (spk, i) in details],
            edges=edges.get(node_id, []), superseded_by=superseded_by, node=node, valid_from=valid_from,
            valid_until=valid_until, recorded_at=recorded_at, reason=reason,
            sessions=[session_id, *also.get(node_id, [])], merged_into=merged_into, metadata=json.loads(metadata)))
    return hits


FEW_NODES = 256
"""Up to this many nodes (a search's hits) only their own details and links are read; more (a user's whole
listing) read those of their sessions at once. Reading every detail of the hits' sessions was the largest
cost of a search."""


def _details_of(db: Database, rows: list[Any], nodes: dict[int, Any] | None, where: str = "",
                params: tuple[Any, ...] = ()) -> dict[tuple[int, int], str]:
    """Detail texts by (session, local id): those ``nodes`` list, or (None) all of the matching sessions."""
    if nodes is None:
        cursor = db.execute("SELECT session_pk, local_id, text FROM details WHERE session_pk IN "
                            f"(SELECT DISTINCT n.session_pk FROM nodes n WHERE {where})", params)
    else:
        wanted: dict[int, set[int]] = {}
        for row in rows:
            wanted.setdefault(row[8], set()).update(nodes[row[0]].get("details", []))
        asked = [(spk, sorted(ids)) for spk, ids in wanted.items() if ids]
        if not asked:
            return {}
        clause = " OR ".join(f"(session_pk = ? AND local_id IN ({placeholders(len(ids))}))" for _, ids in asked)
        cursor = db.execute(f"SELECT session_pk, local_id, text FROM details WHERE {clause}",
                            tuple(v for spk, ids in asked for v in (spk, *ids)))
    return {(spk, local): text for spk, local, text in cursor}


def _edges(db: Database, where: str, params: tuple[Any, ...], ids: tuple[int, ...] | None = None
           ) -> dict[int, list[dict[str, Any]]]:
    """Links of the matching nodes' sessions by node, both ways, in link order (only those touching ``ids``)."""
    some = "" if ids is None else placeholders(len(ids))
    touching = f"(e.source IN ({some}) OR e.target IN ({some})) AND " if ids is not None else ""
    edges: dict[int, list[dict[str, Any]]] = {}
    for source, target, relation, s_text, t_text in db.execute(
            "SELECT e.source, e.target, e.relation, a.text, b.text FROM edges e "
            f"JOIN nodes a ON a.id = e.source JOIN nodes b ON b.id = e.target WHERE {touching}e.session_pk IN "
            f"(SELECT DISTINCT n.session_pk FROM nodes n WHERE {where}) ORDER BY e.id",
            (*(ids or ()), *(ids or ()), *params)):
        edges.setdefault(source, []).append({"relation": relation, "direction": "out", "node_id": target,
                                             "text": t_text})
        edges.setdefault(target, []).append({"relation": relation, "direction": "in", "node_id": source,
                                             "text": s_text})
    return edges


def in_scope(db: Database, ranked: list[int], where: str, params: tuple[Any, ...]) -> list[int]:
    """The candidates (node ids, best first as the vector search ranked them: ties within
    :data:`~promem_fast.backends.base.TIE_TOLERANCE` already by the lower id) that ``where`` (over ``nodes
    n``) keeps, in that order: one indexed query that reads no text, so a search reads details, links and
    merges of the k best only. The rank is kept rather than the raw score re-sorted, whose last bits differ
    between kernels and backends."""
    kept = {node for (node,) in db.execute(
        f"SELECT n.id FROM nodes n WHERE n.id IN ({placeholders(len(ranked))}) AND {where}", (*ranked, *params))}
    return [node for node in ranked if node in kept]


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def forget_node(db: Database, user_pk: int, node_pk: int) -> None:
    """Before a node is deleted, take it out of what its session keeps beside the nodes: the details anchored
    to it alone, the macro events that quote it or were drawn from its turns, and the step failures that
    quote it. Delete means gone, and the session would otherwise keep the memory's words after the memory
    itself is deleted."""
    row = db.execute("SELECT session_pk, text, data FROM nodes WHERE id = ? AND user_id = ?", (node_pk, user_pk)
                     ).fetchone()
    if row is None:
        return
    session_pk, text, data = row
    _empty_details(db, session_pk, node_pk, json.loads(data).get("details", []))
    needle = text.casefold()
    turns = {turn_key(t) for t in json.loads(data).get("turn_ids", [])}
    events, stats = db.execute("SELECT events, stats FROM sessions WHERE id = ?", (session_pk,)).fetchone()
    kept = [e for e in json.loads(events) if needle not in str(e.get("text", "")).casefold()
            and not turns & {turn_key(t) for t in e.get("turn_ids", [])}]
    record = json.loads(stats)
    if isinstance(record, dict) and isinstance(record.get("failures"), list):
        record["failures"] = [f for f in record["failures"] if needle not in _strings(f).casefold()]
    db.execute("UPDATE sessions SET events = ?, stats = ? WHERE id = ?", (dumps(kept), dumps(record), session_pk))


def _empty_details(db: Database, session_pk: int, node_pk: int, anchored: list[int]) -> None:
    """Empty the details of the session that only ``node_pk`` lists. Emptied, not removed: a detail's place in
    its session's list is what the other nodes name it by, in the store and in an export."""
    others: set[int] = set()
    for (data,) in db.execute("SELECT data FROM nodes WHERE session_pk = ? AND id != ?", (session_pk, node_pk)):
        others.update(json.loads(data).get("details", []))
    alone = sorted(set(anchored) - others)
    for local, data in db.execute(f"SELECT local_id, data FROM details WHERE session_pk = ? AND local_id IN "
                                  f"({placeholders(len(alone))})", (session_pk, *alone)).fetchall() if alone else []:
        emptied = {"text": "", "turn_id": json.loads(data).get("turn_id")}  # the turn's number, no words
        db.execute("UPDATE details SET text = '', data = ? WHERE session_pk = ? AND local_id = ?",
                   (dumps(emptied), session_pk, local))


def _strings(value: Any) -> str:
    """Every string inside a JSON value, one per line (what a search for a memory's words must look through)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_strings(v) for v in value)
    return ""
