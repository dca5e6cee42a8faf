"""Pure-Python reference of the native core, written for obviousness rather than speed.

The tests check ``promem_fast.native`` against these functions; the benchmarks time them against it. It lives
with the test stand-ins, apart from the product, so both can import it.
Each function restates the contract with plain loops over Python ints.
"""

from __future__ import annotations

from collections.abc import Sequence


def anchor_details_ref(
    detail_session: Sequence[int],
    detail_turn: Sequence[int],
    entry_session: Sequence[int],
    entry_turn: Sequence[int],
) -> tuple[list[int], list[int]]:
    """CSR ``(offsets, indices)``: for each entry, the ascending detail indices sharing its (session, turn)."""
    if len(detail_session) != len(detail_turn):
        raise ValueError("detail_session and detail_turn differ in length")
    if len(entry_session) != len(entry_turn):
        raise ValueError("entry_session and entry_turn differ in length")
    by_key: dict[tuple[int, int], list[int]] = {}
    for i in range(len(detail_turn)):
        turn = int(detail_turn[i])
        if turn < 0:
            continue
        by_key.setdefault((int(detail_session[i]), turn), []).append(i)
    offsets = [0]
    indices: list[int] = []
    for j in range(len(entry_turn)):
        turn = int(entry_turn[j])
        if turn >= 0:
            indices.extend(by_key.get((int(entry_session[j]), turn), []))
        offsets.append(len(indices))
    return offsets, indices


def anchor_details_brute(
    detail_session: Sequence[int],
    detail_turn: Sequence[int],
    entry_session: Sequence[int],
    entry_turn: Sequence[int],
) -> tuple[list[int], list[int]]:
    """The same contract as a literal double loop over entries and details (small inputs only)."""
    offsets = [0]
    indices: list[int] = []
    for j in range(len(entry_turn)):
        for i in range(len(detail_turn)):
            if (
                entry_turn[j] >= 0
                and detail_turn[i] == entry_turn[j]
                and detail_session[i] == entry_session[j]
            ):
                indices.append(i)
        offsets.append(len(indices))
    return offsets, indices


def clean_edges_ref(
    session: Sequence[int],
    source: Sequence[int],
    relation: Sequence[int],
    target: Sequence[int],
    symmetric: Sequence[bool] | None = None,
) -> list[int]:
    """Indices of the edges kept: no self-loops, no negative endpoints, first of each duplicate only."""
    n = len(session)
    if not (len(source) == len(relation) == len(target) == n):
        raise ValueError("edge arrays differ in length")
    for k in range(n):
        r = int(relation[k])
        if r < 0 or (symmetric is not None and r >= len(symmetric)):
            raise ValueError(f"relation id {r} at edge {k} is out of range")
    seen: set[tuple[int, int, int, int]] = set()
    kept: list[int] = []
    for k in range(n):
        a, r, b = int(source[k]), int(relation[k]), int(target[k])
        if a < 0 or b < 0 or a == b:
            continue
        if symmetric is not None and symmetric[r] and b < a:
            a, b = b, a
        key = (int(session[k]), a, r, b)
        if key in seen:
            continue
        seen.add(key)
        kept.append(k)
    return kept


def clean_edges_brute(
    session: Sequence[int],
    source: Sequence[int],
    relation: Sequence[int],
    target: Sequence[int],
    symmetric: Sequence[bool] | None = None,
) -> list[int]:
    """The same contract by comparing each edge with every earlier kept edge (small, valid inputs only)."""

    def same(k: int, q: int) -> bool:
        if session[k] != session[q] or relation[k] != relation[q]:
            return False
        if source[k] == source[q] and target[k] == target[q]:
            return True
        sym = symmetric is not None and bool(symmetric[relation[k]])
        return sym and source[k] == target[q] and target[k] == source[q]

    kept: list[int] = []
    for k in range(len(session)):
        if source[k] < 0 or target[k] < 0 or source[k] == target[k]:
            continue
        if any(same(k, q) for q in kept):
            continue
        kept.append(k)
    return kept
