"""Stage 4b: detail anchoring by shared turn id (§3.5).

Details were extracted turn by turn and every purified entry was grounded to one turn during HV, so a
detail belongs to the entries grounded in its turn: no embedding needed. The engine answers the request
for all sessions in flight with one native call.
"""

from __future__ import annotations

import numpy as np

from promem_fast.requests import Anchor, Program
from promem_fast.types import Detail, MemoryEntry


def anchor_details(details: list[Detail], nodes: list[MemoryEntry], ordinal: dict[int | str, int]
                   ) -> Program[int]:
    """Fill ``node.details`` in place; returns how many details found at least one entry."""
    if not details or not nodes:
        return 0
    d_turns = np.array([ordinal.get(d.turn_id, -1) for d in details], np.int64)
    e_turns = np.array([ordinal.get(n.turn_ids[0], -1) if n.turn_ids else -1 for n in nodes], np.int64)
    (per_entry,) = yield [Anchor(stage="da", detail_turns=d_turns, entry_turns=e_turns)]
    anchored: set[int] = set()
    for node, indices in zip(nodes, per_entry):
        node.details = [int(i) for i in indices]
        anchored.update(node.details)
    return len(anchored)
