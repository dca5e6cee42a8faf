"""Typed front of the native core ``promem_fast._native``.

Two array kernels sit on the engine's hot path once every session of a batch is verified: anchoring fine
details to memory entries by shared turn id, and cleaning the relation edges (self-loops, edges to discarded
entries, duplicates). Both run in C++ over the whole batch at once, with the GIL released, so the driver
thread keeps feeding the model backends meanwhile.

This module only normalises inputs (any integer array or list becomes a contiguous int64 array) and
documents the contract; the raw binding validates shapes again. There is deliberately no pure-Python
fallback: a missing extension is a build problem and must be visible, not a silent 100x slowdown. The
pure-Python reference of both functions lives in the tests, which check that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    from promem_fast import _native
except ImportError as exc:
    raise ImportError(
        "promem_fast._native (the C++ extension) is not built or cannot be loaded "
        f"({exc}). Rebuild it from the source tree with `pip install -e .` or "
        "`python setup.py build_ext --inplace` (needs a C++17 compiler and pybind11)."
    ) from exc

__all__ = ["anchor_details", "anchor_groups", "clean_edge_groups", "clean_edges"]

_INT64_MAX = np.iinfo(np.int64).max

ArrayLike = npt.ArrayLike
Int64Array = npt.NDArray[np.int64]


def _as_int64(func: str, name: str, values: Any) -> Int64Array:
    """1-D contiguous int64 copy (or view) of ``values``; refuses anything that is not integer data.

    Floats are refused rather than cast: a float id means something upstream went wrong (a NaN-padded
    column, a mean taken by mistake), and truncating it would anchor details to the wrong turn.
    """
    is_array = isinstance(values, np.ndarray)
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{func}: argument {name!r} must be 1-D, got ndim={arr.ndim}")
    if not is_array and arr.size == 0:
        # An empty Python list comes out of numpy as float64; it holds no values to misread.
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{func}: argument {name!r} must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize >= 8 and arr.size and int(arr.max()) > _INT64_MAX:
        raise ValueError(f"{func}: argument {name!r} has values that do not fit in int64")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _as_flags(func: str, name: str, values: Any) -> npt.NDArray[np.uint8]:
    """1-D contiguous uint8 0/1 array from a bool or integer sequence (nonzero means set)."""
    is_array = isinstance(values, np.ndarray)
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{func}: argument {name!r} must be 1-D, got ndim={arr.ndim}")
    if not is_array and arr.size == 0:
        return np.empty(0, dtype=np.uint8)
    if arr.dtype.kind not in "biu":
        raise ValueError(f"{func}: argument {name!r} must hold booleans, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr != 0, dtype=np.uint8)


def anchor_details(
    detail_session: ArrayLike,
    detail_turn: ArrayLike,
    entry_session: ArrayLike,
    entry_turn: ArrayLike,
) -> tuple[Int64Array, Int64Array]:
    """Anchor every detail to the entries grounded in the same (session, turn).

    A detail is a fine fact extracted from one turn; an entry is grounded to its best-matching turn.
    Sharing the turn id is what ties a detail to an entry in the memory graph, so this is an exact key
    join, done for all sessions of a batch in one call (session ids keep the batches apart).

    Args:
        detail_session, detail_turn: per detail, its session id and turn index (equal lengths ``n``).
        entry_session, entry_turn: per entry, its session id and grounded turn (equal lengths ``m``).
            A negative turn marks an ungrounded entry (or detail); it is never anchored.

    Returns:
        ``(offsets, indices)`` in CSR form, both int64: the details of entry ``j`` are
        ``indices[offsets[j]:offsets[j + 1]]``, in ascending detail order; ``len(offsets) == m + 1``.

    Raises:
        ValueError: an argument is not 1-D, holds non-integers, or the paired lengths differ.
    """
    fn = "anchor_details"
    return _native.anchor_details(
        _as_int64(fn, "detail_session", detail_session),
        _as_int64(fn, "detail_turn", detail_turn),
        _as_int64(fn, "entry_session", entry_session),
        _as_int64(fn, "entry_turn", entry_turn),
    )


def clean_edges(
    session: ArrayLike,
    source: ArrayLike,
    relation: ArrayLike,
    target: ArrayLike,
    symmetric: ArrayLike | None = None,
) -> Int64Array:
    """Indices of the relation edges worth keeping, in input order.

    Candidate relations are mapped from events onto purified entries, and that mapping collapses
    several events onto one entry (making self-loops and repeats) or onto a discarded entry (endpoint
    ``-1``). Those edges would waste a verification call each, so they are removed before probing.

    An edge is dropped when it is a self-loop (``source == target``), when either endpoint is negative,
    or when an earlier kept edge has the same ``(session, source, relation, target)``. For a relation
    ``r`` with ``symmetric[r]`` set, ``(s, a, r, b)`` and ``(s, b, r, a)`` count as the same edge.

    Args:
        session, source, relation, target: int arrays of equal length ``e``, one row per edge.
        symmetric: optional bool array indexed by relation id; without it every relation is directed.

    Returns:
        Ascending int64 indices into the edge arrays; the first occurrence of each edge is the one kept.

    Raises:
        ValueError: bad shapes or dtypes, different lengths, a negative relation id, or a relation id
            ``>= len(symmetric)`` when ``symmetric`` is given.
    """
    fn = "clean_edges"
    flags = None if symmetric is None else _as_flags(fn, "symmetric", symmetric)
    return _native.clean_edges(
        _as_int64(fn, "session", session),
        _as_int64(fn, "source", source),
        _as_int64(fn, "relation", relation),
        _as_int64(fn, "target", target),
        flags,
    )


def _group_ids(sizes: Sequence[int]) -> Int64Array:
    """The group index of every row when groups of ``sizes`` rows are laid end to end."""
    return np.repeat(np.arange(len(sizes), dtype=np.int64), np.asarray(sizes, dtype=np.int64))


def anchor_groups(detail_turns: Sequence[ArrayLike], entry_turns: Sequence[ArrayLike]) -> list[list[Int64Array]]:
    """:func:`anchor_details` for many sessions in one call: per session, per entry, its detail indices.

    Each group (session) gives the grounded turn of its details and of its entries; the indices returned
    are local to the group's own details, so callers never see the batch they were part of.
    """
    d_turn = [_as_int64("anchor_groups", "detail_turns", t) for t in detail_turns]
    e_turn = [_as_int64("anchor_groups", "entry_turns", t) for t in entry_turns]
    d_sizes, e_sizes = [len(t) for t in d_turn], [len(t) for t in e_turn]
    offsets, indices = anchor_details(_group_ids(d_sizes), np.concatenate(d_turn) if d_turn else [],
                                      _group_ids(e_sizes), np.concatenate(e_turn) if e_turn else [])
    d_base = np.cumsum([0, *d_sizes])
    out: list[list[Int64Array]] = []
    e_base = 0
    for group, n in enumerate(e_sizes):
        out.append([indices[offsets[e_base + j]:offsets[e_base + j + 1]] - d_base[group] for j in range(n)])
        e_base += n
    return out


def clean_edge_groups(edges: Sequence[tuple[ArrayLike, ArrayLike, ArrayLike]],
                      symmetric: ArrayLike | None = None) -> list[Int64Array]:
    """:func:`clean_edges` for many sessions in one call: per session, the indices of its edges kept.

    ``edges`` holds one ``(source, relation, target)`` triple of arrays per session; indices are local to
    that session's arrays.
    """
    columns = [[_as_int64("clean_edge_groups", name, part[k]) for part in edges]
               for k, name in enumerate(("source", "relation", "target"))]
    sizes = [len(s) for s in columns[0]]
    session = _group_ids(sizes)
    kept = clean_edges(session, *(np.concatenate(c) if c else [] for c in columns), symmetric)
    base = np.cumsum([0, *sizes])
    owner = session[kept]
    return [kept[owner == group] - base[group] for group in range(len(sizes))]
