"""Reading the links between memories: the replacement graph through one memory, and what a session did.

Two kinds of link: ``update`` (an older memory replaced by a newer one, table ``supersedes``) and
``duplicate`` (a later saying of a known fact merged into the memory that stands for it, table ``merges``).
Several older facts replaced by one newer are several edges into one node: a graph, not a chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import rows
from .api import Database
from .hits import Hit


def _edges_touching(db: Database, ids: list[int]) -> list[tuple[int, int, str, str]]:
    marks = rows.placeholders(len(ids))
    found = db.execute(f"SELECT old, new, 'update', reason FROM supersedes WHERE old IN ({marks}) OR new IN ({marks})",
                       (*ids, *ids)).fetchall()
    found += db.execute(f"SELECT node, kept, 'duplicate', reason FROM merges WHERE node IN ({marks}) OR kept IN "
                        f"({marks})", (*ids, *ids)).fetchall()
    return found


def history_graph(db: Database, node_id: int, tenant: str) -> dict[str, Any]:
    """Every memory linked to ``node_id`` (transitively, either way) and the links among them:
    ``{"id", "nodes": [memory...] (oldest first), "edges": [{"old", "new", "kind", "reason"}]}``; for a
    duplicate edge ``old`` is the later saying and ``new`` the memory it was merged into. A memory of another
    tenant, or none, gives no nodes."""
    owner = db.execute("SELECT 1 FROM nodes n JOIN users u ON u.id = n.user_id JOIN tenants t ON t.id = u.tenant_id "
                       "WHERE n.id = ? AND t.name = ?", (node_id, tenant)).fetchone()
    if owner is None:
        return {"id": node_id, "nodes": [], "edges": []}
    seen, frontier = {node_id}, [node_id]
    edges: set[tuple[int, int, str, str]] = set()
    while frontier:
        found = _edges_touching(db, frontier)
        edges.update(found)
        frontier = sorted({n for old, new, _, _ in found for n in (old, new)} - seen)
        seen.update(frontier)
    ids = sorted(seen)
    hits = rows.read_hits(db, f"n.id IN ({rows.placeholders(len(ids))})", tuple(ids))
    hits.sort(key=lambda h: (h.valid_from or "~", h.node_id))
    return {"id": node_id, "nodes": [h.memory() for h in hits],
            "edges": [{"old": old, "new": new, "kind": kind, "reason": reason}
                      for old, new, kind, reason in sorted(edges, key=lambda e: (e[1], e[0]))]}


def session_events(db: Database, session_pk: int) -> list[dict[str, Any]]:
    """What each memory of one session did: ``{"id", "memory", "event", "replaces", "duplicate_of", "reason"}``."""
    out = []
    for node_id, text, merged_into in db.execute(
            "SELECT id, text, merged_into FROM nodes WHERE session_pk = ? ORDER BY local_id", (session_pk,)):
        if merged_into is not None:
            (reason,) = db.execute("SELECT reason FROM merges WHERE node = ?", (node_id,)).fetchone()
            out.append({"id": node_id, "memory": text, "event": "duplicate", "replaces": [],
                        "duplicate_of": merged_into, "reason": reason})
            continue
        replaced = db.execute("SELECT old, reason FROM supersedes WHERE new = ? ORDER BY old", (node_id,)).fetchall()
        out.append({"id": node_id, "memory": text, "event": "update" if replaced else "add",
                    "replaces": [old for old, _ in replaced], "duplicate_of": None,
                    "reason": "; ".join(dict.fromkeys(r for _, r in replaced)) or None})
    return out


def drawing(hits: list[Hit], expired: Callable[[Hit], bool] = lambda hit: False) -> dict[str, Any]:
    """Nodes, relation and supersede edges, and details of these hits, as the web page draws them; ``expired``
    says which no longer hold for their session's expiry (the store's rule)."""
    nodes = [{"id": h.node_id, "session_id": h.session_id, "text": h.text, "date": h.date,
              "turn_id": h.turn_id, "source": h.node.get("source"), "valid_from": h.valid_from,
              "valid_until": h.valid_until, "superseded_by": h.superseded_by, "merged_into": h.merged_into,
              "expired": expired(h)}
             for h in hits]
    edges: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    for h in hits:
        edges.extend({"source": h.node_id, "target": e["node_id"], "relation": e["relation"]}
                     for e in h.edges if e["direction"] == "out")
        if h.superseded_by is not None:
            edges.append({"source": h.node_id, "target": h.superseded_by, "relation": "superseded_by"})
        details.extend({"node": h.node_id, "text": text} for text in h.details)
    return {"nodes": nodes, "edges": edges, "details": details}
