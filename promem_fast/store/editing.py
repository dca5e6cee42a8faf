"""Reading one memory by id, editing a memory by hand, and emptying a tenant: the verbs a program that manages
memories (as mem0's ``get``/``update``/``reset`` do) needs beside extraction.

An edit gives a memory new text, metadata of its own, or both, in one transaction. It keeps the memory's id,
links and history; new text is re-embedded at once, so the next search finds the memory by its new words. What
an edit replaced is kept in the node's ``edits`` (oldest first): the text, the metadata when that changed, and
the time of the edit.

A memory carries its session's metadata until an edit gives it its own (:func:`remarked`: the session's with the
changes, in ``nodes.metadata`` and the node's JSON, so exports keep it): filters, expiry and every read then take
the memory's. The scopes a session was added with (``user_id``, ``agent_id``, ``run_id``) stay: naming them with
the values they have is allowed (a mem0 program passes a memory's metadata back whole), changing them is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from promem_fast.errors import InputError

from promem_fast.persistence import rows
from promem_fast.persistence.hits import Hit, unit_key
from promem_fast.persistence.timeline import now_iso
from promem_fast.times import EXPIRES, TimeProblem, kept_day

if TYPE_CHECKING:
    from .store import MemoryStore

_OF_TENANT = "n.user_id IN (SELECT u.id FROM users u JOIN tenants t ON t.id = u.tenant_id WHERE t.name = ?)"
SCOPES = ("user_id", "agent_id", "run_id")
"""Metadata an edit cannot change: who the memory belongs to and the scopes its session was added with."""


def one(store: MemoryStore, node_id: int, tenant: str) -> Hit | None:
    """The memory ``node_id`` of ``tenant`` (replaced or merged ones too); ``None`` when the tenant has none."""
    found = rows.read_hits(store.db, f"n.id = ? AND {_OF_TENANT}", (int(node_id), tenant))
    return found[0] if found else None


def edit(store: MemoryStore, node_id: int, tenant: str, *, text: str | None = None,
         metadata: Mapping[str, Any] | None = None) -> Hit | None:
    """Give memory ``node_id`` the text ``text`` (re-embedded) and/or the metadata changes ``metadata``
    (:func:`remarked`); ``None`` when the tenant has no such memory."""
    if text is None and not metadata:
        raise InputError("give the memory new text, metadata or an expiration_date", field="data")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise InputError("the new text of a memory must not be empty", field="data")
    hit = one(store, node_id, tenant)
    if hit is None:
        return None
    node = dict(hit.node)
    replaced: dict[str, Any] = {"text": hit.text}
    if metadata:
        changed = remarked(hit, metadata)
        if changed != hit.metadata:
            node["metadata"], replaced["metadata"] = changed, hit.metadata
    vector = None
    if text is not None and text != hit.text:
        vector = np.asarray(store.embedder.embed([unit_key(text, hit.details)]), np.float32)[0]
        store.check_dim(int(vector.shape[0]))
        node["text"] = text
    elif "metadata" not in replaced:
        return hit  # nothing changes: no edit to record
    node["edits"] = [*node.get("edits", []), {**replaced, "at": now_iso()}]
    own = None if "metadata" not in node else rows.dumps(node["metadata"])
    with store.db.transaction() as db:
        if vector is None:
            db.execute("UPDATE nodes SET data = ?, metadata = ? WHERE id = ?", (rows.dumps(node), own, hit.node_id))
        else:
            (user_pk,) = db.execute("SELECT user_id FROM nodes WHERE id = ?", (hit.node_id,)).fetchone()
            db.execute("UPDATE nodes SET text = ?, data = ?, vector = ?, metadata = ? WHERE id = ?",
                       (node["text"], rows.dumps(node), db.encode_vector(vector), own, hit.node_id))
            db.execute("UPDATE users SET generation = generation + 1 WHERE id = ?", (user_pk,))  # vectors changed
    if vector is not None:
        store.db.removed(int(user_pk))  # the cached index still holds the old vector
    return one(store, node_id, tenant)


def remarked(hit: Hit, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata ``hit`` carries with ``changes`` made (mem0's rule: given keys set, others kept), an
    ``expiration_date`` kept as an ISO day and removed by None; the :data:`SCOPES` as they are."""
    if not isinstance(changes, Mapping):
        raise InputError("must be a JSON object", field="metadata")
    try:
        json.dumps(dict(changes), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"must be JSON: {exc}", field="metadata") from None
    held = {**hit.metadata, "user_id": hit.user}
    out = dict(hit.metadata)
    for key, value in changes.items():
        if key in SCOPES:
            if held.get(key) != value:
                raise InputError(f"{key} is {held.get(key)!r}, the scope its session was added with; it does not "
                                 "change for one memory", field=f"metadata.{key}")
        elif key == EXPIRES and value is None:
            out.pop(EXPIRES, None)
        elif key == EXPIRES:
            try:
                out[EXPIRES] = kept_day(value)
            except TimeProblem as exc:
                raise InputError(str(exc), field=f"metadata.{EXPIRES}") from None
        else:
            out[key] = value
    return out


def reset(store: MemoryStore, tenant: str) -> int:
    """Remove every user of ``tenant`` with all their memory (gone from disk); returns the memories removed."""
    return sum(store.delete(tenant=tenant, user=user) for user in store.users(tenant=tenant))

