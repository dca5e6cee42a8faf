"""Reading one memory by id, rewriting a memory's text by hand, and emptying a tenant: the verbs a program
that manages memories (as mem0's ``get``/``update``/``reset`` do) needs beside extraction.

A rewrite keeps the memory's id, links and history and is re-embedded at once, so the next search finds it by
its new words; the text it replaced is kept in the node's ``edits`` (oldest first) with the time of the edit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from promem_fast.errors import InputError

from promem_fast.persistence import rows
from promem_fast.persistence.hits import Hit, unit_key
from promem_fast.persistence.timeline import now_iso

if TYPE_CHECKING:
    from .store import MemoryStore

_OF_TENANT = "n.user_id IN (SELECT u.id FROM users u JOIN tenants t ON t.id = u.tenant_id WHERE t.name = ?)"


def one(store: MemoryStore, node_id: int, tenant: str) -> Hit | None:
    """The memory ``node_id`` of ``tenant`` (replaced or merged ones too); ``None`` when the tenant has none."""
    found = rows.read_hits(store.db, f"n.id = ? AND {_OF_TENANT}", (int(node_id), tenant))
    return found[0] if found else None


def rewrite(store: MemoryStore, node_id: int, text: str, tenant: str) -> Hit | None:
    """Give memory ``node_id`` the text ``text`` (re-embedded); ``None`` when the tenant has no such memory."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("the new text of a memory must not be empty", field="data")
    hit = one(store, node_id, tenant)
    if hit is None:
        return None
    vector = np.asarray(store.embedder.embed([unit_key(text, hit.details)]), np.float32)[0]
    store.check_dim(int(vector.shape[0]))
    node = dict(hit.node)
    node["edits"] = [*node.get("edits", []), {"text": hit.text, "at": now_iso()}]
    node["text"] = text
    with store.db.transaction() as db:
        (user_pk,) = db.execute("SELECT user_id FROM nodes WHERE id = ?", (hit.node_id,)).fetchone()
        db.execute("UPDATE nodes SET text = ?, data = ?, vector = ? WHERE id = ?",
                   (text, rows.dumps(node), db.encode_vector(vector), hit.node_id))
        db.execute("UPDATE users SET generation = generation + 1 WHERE id = ?", (user_pk,))  # vectors changed
    store.db.removed(int(user_pk))  # the cached index still holds the old vector
    return one(store, node_id, tenant)


def reset(store: MemoryStore, tenant: str) -> int:
    """Remove every user of ``tenant`` with all their memory (gone from disk); returns the memories removed."""
    return sum(store.delete(tenant=tenant, user=user) for user in store.users(tenant=tenant))

