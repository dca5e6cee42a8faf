"""The native core must agree with the pure-Python reference, and refuse bad input with ValueError."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import promem_fast
from promem_fast import _native, native
from promem_fast.testing.native_reference import (
    anchor_details_brute,
    anchor_details_ref,
    clean_edges_brute,
    clean_edges_ref,
)

I64_MIN = int(np.iinfo(np.int64).min)
I64_MAX = int(np.iinfo(np.int64).max)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _i64(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _check_anchor(ds: list[int], dt: list[int], es: list[int], et: list[int]) -> None:
    offsets, indices = native.anchor_details(_i64(ds), _i64(dt), _i64(es), _i64(et))
    assert offsets.dtype == np.int64 and indices.dtype == np.int64
    assert offsets.ndim == 1 and indices.ndim == 1
    ref_offsets, ref_indices = anchor_details_ref(ds, dt, es, et)
    assert offsets.tolist() == ref_offsets
    assert indices.tolist() == ref_indices
    assert (ref_offsets, ref_indices) == anchor_details_brute(ds, dt, es, et)


def _check_edges(
    s: list[int], a: list[int], r: list[int], b: list[int], sym: list[bool] | None
) -> None:
    kept = native.clean_edges(_i64(s), _i64(a), _i64(r), _i64(b), None if sym is None else np.asarray(sym))
    assert kept.dtype == np.int64 and kept.ndim == 1
    ref = clean_edges_ref(s, a, r, b, sym)
    assert kept.tolist() == ref
    assert ref == clean_edges_brute(s, a, r, b, sym)


# ---------------------------------------------------------------------------------------------- strategies

@st.composite
def id_pool(draw: st.DrawFn, max_size: int) -> list[int]:
    """A few distinct ids, sometimes extreme ones, so hashing sees int64 edge values too."""
    small = st.integers(-3, 40)
    wide = st.integers(I64_MIN, I64_MAX)
    return draw(st.lists(st.one_of(small, small, wide), min_size=1, max_size=max_size, unique=True))


@st.composite
def anchor_inputs(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int]]:
    sessions = draw(st.sampled_from(["one", "few", "many"]))
    n_pool = {"one": 1, "few": 3, "many": 30}[sessions]
    session_pool = draw(id_pool(n_pool))
    turn_mode = draw(st.sampled_from(["mixed", "grounded", "negative"]))
    if turn_mode == "negative":
        turns = st.integers(-5, -1) | st.just(I64_MIN)
    elif turn_mode == "grounded":
        turns = st.integers(0, 6) | st.just(I64_MAX)
    else:
        turns = st.integers(-2, 6)
    n = draw(st.integers(0, 60))
    m = draw(st.integers(0, 30))
    ds = draw(st.lists(st.sampled_from(session_pool), min_size=n, max_size=n))
    dt = draw(st.lists(turns, min_size=n, max_size=n))
    es = draw(st.lists(st.sampled_from(session_pool), min_size=m, max_size=m))
    et = draw(st.lists(turns, min_size=m, max_size=m))
    if draw(st.booleans()):
        # Extraction order (by session, then turn): each key is one contiguous run of details.
        pairs = sorted(zip(ds, dt))
        ds, dt = [p[0] for p in pairs], [p[1] for p in pairs]
    return ds, dt, es, et


@st.composite
def edge_inputs(
    draw: st.DrawFn,
) -> tuple[list[int], list[int], list[int], list[int], list[bool] | None]:
    session_pool = draw(id_pool(draw(st.sampled_from([1, 4, 30]))))
    n_rel = draw(st.integers(1, 5))
    endpoint = st.integers(-2, draw(st.sampled_from([2, 6, 50])))
    base = draw(
        st.lists(
            st.tuples(st.sampled_from(session_pool), endpoint, st.integers(0, n_rel - 1), endpoint),
            max_size=50,
        )
    )
    edges = list(base)
    if base:
        # Repeats and reversed repeats of earlier edges: the cases dedup must collapse.
        picks = draw(st.lists(st.tuples(st.integers(0, len(base) - 1), st.booleans()), max_size=50))
        for k, flip in picks:
            s, a, r, b = base[k]
            edges.append((s, b, r, a) if flip else (s, a, r, b))
        edges = draw(st.permutations(edges))
    sym_mode = draw(st.sampled_from(["none", "random", "all", "longer"]))
    if sym_mode == "none":
        sym = None
    elif sym_mode == "all":
        sym = [True] * n_rel
    else:
        extra = draw(st.integers(0, 3)) if sym_mode == "longer" else 0
        sym = draw(st.lists(st.booleans(), min_size=n_rel + extra, max_size=n_rel + extra))
    s, a, r, b = ([e[i] for e in edges] for i in range(4))
    return s, a, r, b, sym


# ------------------------------------------------------------------------------------- anchor_details

@PROPERTY
@given(anchor_inputs())
def test_anchor_matches_reference(case: tuple[list[int], list[int], list[int], list[int]]) -> None:
    _check_anchor(*case)


def test_anchor_known_example() -> None:
    ds = [0, 0, 1, 0, 1, 0]
    dt = [2, 3, 2, 2, -1, 2]
    es = [0, 1, 0, 1, 0, 2]
    et = [2, 2, 3, -1, 9, 2]
    offsets, indices = native.anchor_details(ds, dt, es, et)
    assert offsets.tolist() == [0, 3, 4, 5, 5, 5, 5]
    assert indices.tolist() == [0, 3, 5, 2, 1]


def test_anchor_entries_sharing_a_turn_each_get_all_details() -> None:
    offsets, indices = native.anchor_details([7, 7, 7], [1, 1, 1], [7, 7], [1, 1])
    assert offsets.tolist() == [0, 3, 6]
    assert indices.tolist() == [0, 1, 2, 0, 1, 2]


def test_anchor_negative_turns_never_match() -> None:
    offsets, indices = native.anchor_details([0, 0], [-1, -1], [0, 0], [-1, 0])
    assert offsets.tolist() == [0, 0, 0]
    assert indices.size == 0


@pytest.mark.parametrize(
    ("n", "m"), [(0, 0), (0, 3), (4, 0)], ids=["both-empty", "no-details", "no-entries"]
)
def test_anchor_empty(n: int, m: int) -> None:
    offsets, indices = native.anchor_details(np.zeros(n, np.int64), np.zeros(n, np.int64),
                                             np.zeros(m, np.int64), np.zeros(m, np.int64))
    assert offsets.tolist() == [0] * (m + 1)
    assert indices.dtype == np.int64 and indices.shape == (0,)


def test_anchor_accepts_lists_other_int_dtypes_and_strided_views() -> None:
    rng = np.random.default_rng(0)
    ds = rng.integers(0, 5, 200)
    dt = rng.integers(-1, 8, 200)
    es = rng.integers(0, 5, 60)
    et = rng.integers(-1, 8, 60)
    expected = anchor_details_ref(ds.tolist(), dt.tolist(), es.tolist(), et.tolist())
    for conv in (lambda x: x.tolist(), lambda x: x.astype(np.int32), lambda x: x.astype(np.int8)):
        offsets, indices = native.anchor_details(conv(ds), conv(dt), conv(es), conv(et))
        assert (offsets.tolist(), indices.tolist()) == expected
    # Unsigned ids are fine where values are non-negative (session ids).
    offsets, indices = native.anchor_details(ds.astype(np.uint32), dt, es.astype(np.uint64), et)
    assert (offsets.tolist(), indices.tolist()) == expected
    wide = np.stack([ds, np.full_like(ds, 99)], axis=1)[:, 0]
    assert not wide.flags.c_contiguous
    offsets, indices = native.anchor_details(wide, dt, es, et)
    assert (offsets.tolist(), indices.tolist()) == expected


def test_anchor_large_random_matches_reference() -> None:
    rng = np.random.default_rng(1)
    n, m = 50_000, 4_000
    ds = rng.integers(0, 64, n)
    dt = rng.integers(-1, 40, n)
    es = rng.integers(0, 64, m)
    et = rng.integers(-1, 40, m)
    offsets, indices = native.anchor_details(ds, dt, es, et)
    ref_offsets, ref_indices = anchor_details_ref(ds.tolist(), dt.tolist(), es.tolist(), et.tolist())
    assert np.array_equal(offsets, ref_offsets)
    assert np.array_equal(indices, ref_indices)


def test_anchor_large_in_extraction_order_matches_reference() -> None:
    rng = np.random.default_rng(3)
    n, m = 40_000, 3_000
    ds = rng.integers(0, 100, n)
    dt = rng.integers(-1, 40, n)
    order = np.lexsort((dt, ds))
    ds, dt = ds[order], dt[order]
    es = rng.integers(0, 100, m)
    et = rng.integers(-1, 40, m)
    offsets, indices = native.anchor_details(ds, dt, es, et)
    ref_offsets, ref_indices = anchor_details_ref(ds.tolist(), dt.tolist(), es.tolist(), et.tolist())
    assert np.array_equal(offsets, ref_offsets)
    assert np.array_equal(indices, ref_indices)


# ---------------------------------------------------------------------------------------- clean_edges

@PROPERTY
@given(edge_inputs())
def test_edges_match_reference(
    case: tuple[list[int], list[int], list[int], list[int], list[bool] | None],
) -> None:
    _check_edges(*case)


def test_edges_known_example() -> None:
    s = [0, 0, 0, 0, 0, 1, 0, 0, 0]
    a = [1, 2, 1, 3, -1, 1, 2, 1, 4]
    r = [0, 0, 0, 0, 0, 0, 1, 1, 1]
    b = [2, 1, 2, 3, 2, 2, 1, 2, 4]
    assert native.clean_edges(s, a, r, b).tolist() == [0, 1, 5, 6, 7]
    # Relation 1 symmetric: edge 7 (1 -r1-> 2) repeats edge 6 (2 -r1-> 1); relation 0 stays directed.
    assert native.clean_edges(s, a, r, b, symmetric=[False, True]).tolist() == [0, 1, 5, 6]
    assert native.clean_edges(s, a, r, b, symmetric=np.array([1, 1], np.uint8)).tolist() == [0, 5, 6]


def test_edges_empty_and_all_dropped() -> None:
    empty = np.zeros(0, np.int64)
    kept = native.clean_edges(empty, empty, empty, empty)
    assert kept.dtype == np.int64 and kept.shape == (0,)
    assert native.clean_edges([], [], [], [], symmetric=[]).tolist() == []
    assert native.clean_edges([0, 0, 0], [1, -1, 5], [0, 0, 0], [1, 2, -3]).tolist() == []


def test_edges_sessions_keep_duplicates_apart() -> None:
    assert native.clean_edges([0, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0], [2, 2, 2, 2]).tolist() == [0, 1]


def test_edges_many_copies_of_one_edge() -> None:
    e = 5_000
    s, a, r, b = np.zeros(e, np.int64), np.ones(e, np.int64), np.zeros(e, np.int64), np.full(e, 2, np.int64)
    a[1::2], b[1::2] = 2, 1
    assert native.clean_edges(s, a, r, b).tolist() == [0, 1]
    assert native.clean_edges(s, a, r, b, symmetric=[True]).tolist() == [0]


def test_edges_large_random_matches_reference() -> None:
    rng = np.random.default_rng(2)
    e = 60_000
    s = rng.integers(0, 32, e)
    a = rng.integers(-1, 30, e)
    r = rng.integers(0, 8, e)
    b = rng.integers(-1, 30, e)
    sym = rng.integers(0, 2, 8).astype(bool)
    kept = native.clean_edges(s, a, r, b, sym)
    assert np.array_equal(kept, clean_edges_ref(s.tolist(), a.tolist(), r.tolist(), b.tolist(), sym.tolist()))


# -------------------------------------------------------------------------------------- input checking

def _z(n: int = 3, dtype: type = np.int64) -> np.ndarray:
    return np.zeros(n, dtype=dtype)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((_z().reshape(3, 1), _z(), _z(), _z()), "detail_session"),
        ((_z(), np.int64(3), _z(), _z()), "detail_turn"),
        ((_z(), _z(), _z(2), _z()), "entry_session"),
        ((_z(), _z(4), _z(), _z()), "detail_session"),
        ((_z(), _z(), _z(), _z(3, np.float64)), "entry_turn"),
        ((_z(3, np.float32), _z(), _z(), _z()), "detail_session"),
        ((_z(), _z(3, bool), _z(), _z()), "detail_turn"),
        ((_z(), _z(), np.array(["a", "b", "c"]), _z()), "entry_session"),
        ((_z(), _z(), _z(), [0.5, 1.0, 2.0]), "entry_turn"),
        ((_z(), np.array([2**64 - 1, 0, 0], np.uint64), _z(), _z()), "detail_turn"),
    ],
    ids=["2d", "0d", "entry-lengths", "detail-lengths", "float64", "float32", "bool", "str", "float-list",
         "uint64-overflow"],
)
def test_anchor_rejects(args: tuple, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        native.anchor_details(*args)


@pytest.mark.parametrize(
    ("args", "kwargs", "pattern"),
    [
        ((_z(), _z(), _z(), _z(2)), {}, "target"),
        ((_z(), _z(4), _z(), _z()), {}, "source"),
        ((_z(), _z(), _z(3).reshape(1, 3), _z()), {}, "relation"),
        ((_z(3, np.float64), _z(), _z(), _z()), {}, "session"),
        ((_z(), _z(), _z(), _z()), {"symmetric": np.zeros((1, 1), bool)}, "symmetric"),
        ((_z(), _z(), _z(), _z()), {"symmetric": np.array([0.0])}, "symmetric"),
        (([0, 0], [1, 2], [0, -1], [2, 1]), {}, "relation.*-1.*edge 1"),
        (([0, 0], [1, 2], [0, 3], [2, 1]), {"symmetric": [True, False, True]}, "relation.*3.*edge 1"),
        (([0], [1], [0], [2]), {"symmetric": []}, "relation.*0.*edge 0"),
        (([0], [1], [-2], [1]), {}, "relation.*-2"),
    ],
    ids=["target-length", "source-length", "relation-2d", "float-session", "symmetric-2d", "symmetric-float",
         "negative-relation", "relation-past-symmetric", "empty-symmetric", "negative-relation-on-self-loop"],
)
def test_edges_reject(args: tuple, kwargs: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        native.clean_edges(*args, **kwargs)


def test_reference_rejects_the_same_relation_ids() -> None:
    with pytest.raises(ValueError):
        clean_edges_ref([0], [1], [-1], [2])
    with pytest.raises(ValueError):
        clean_edges_ref([0], [1], [2], [3], [True, False])


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((_z(3, np.int32), _z(), _z(), _z()), "detail_session.*int64"),
        ((_z(), _z(6)[::2], _z(), _z()), "detail_turn.*contiguous"),
        ((_z(), _z(), [0, 0, 0], _z()), "entry_session.*numpy array"),
        ((_z(), _z(), _z(), _z(3).reshape(1, 3)), "entry_turn.*1-D"),
        ((_z(), _z(), _z(), _z(2)), "entry_session.*entry_turn.*same length"),
    ],
    ids=["int32", "strided", "list", "2d", "lengths"],
)
def test_raw_binding_validates_too(args: tuple, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _native.anchor_details(*args)


def test_raw_binding_validates_edges() -> None:
    with pytest.raises(ValueError, match="symmetric.*bool or uint8"):
        _native.clean_edges(_z(), _z(), _z(), _z(), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="relation.*same length"):
        _native.clean_edges(_z(), _z(), _z(2), _z())
    with pytest.raises(ValueError, match="source.*int64"):
        _native.clean_edges(_z(), _z(3, np.uint64), _z(), _z())
    assert _native.clean_edges(_i64([0]), _i64([1]), _i64([0]), _i64([2])).tolist() == [0]


def test_results_are_fresh_arrays() -> None:
    ds, dt = _i64([0, 0]), _i64([1, 1])
    offsets, indices = native.anchor_details(ds, dt, _i64([0]), _i64([1]))
    assert not np.shares_memory(indices, ds) and not np.shares_memory(offsets, dt)
    indices[0] = 42
    again = native.anchor_details(ds, dt, _i64([0]), _i64([1]))[1]
    assert again.tolist() == [0, 1]
    assert ds.tolist() == [0, 0]


def test_missing_extension_says_how_to_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "promem_fast._native", None)  # makes the import fail
    monkeypatch.delattr(promem_fast, "_native")
    monkeypatch.delitem(sys.modules, "promem_fast.native")
    with pytest.raises(ImportError, match=r"not built.*pip install -e \..*build_ext --inplace"):
        importlib.import_module("promem_fast.native")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(st.integers(-1, 5), max_size=8), st.lists(st.integers(-1, 5), max_size=6)),
                max_size=5))
def test_anchor_groups_equal_each_session_anchored_alone(groups: list[tuple[list[int], list[int]]]) -> None:
    """The engine anchors every session of a round in one call; each must get what it would get alone."""
    found = native.anchor_groups([d for d, _ in groups], [e for _, e in groups])
    assert len(found) == len(groups)
    for (details, entries), per_entry in zip(groups, found):
        offsets, indices = anchor_details_ref([0] * len(details), details, [0] * len(entries), entries)
        assert [list(a) for a in per_entry] == [list(indices[offsets[j]:offsets[j + 1]]) for j in range(len(entries))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(st.integers(-1, 4), st.integers(0, 2), st.integers(-1, 4)), max_size=10),
                max_size=5))
def test_clean_edge_groups_equal_each_session_cleaned_alone(groups: list[list[tuple[int, int, int]]]) -> None:
    symmetric = [False, True, False]
    triples = [tuple(list(col) for col in zip(*edges)) if edges else ([], [], []) for edges in groups]
    kept = native.clean_edge_groups(triples, symmetric)  # type: ignore[arg-type]
    assert len(kept) == len(groups)
    for (src, rel, dst), indices in zip(triples, kept):
        alone = clean_edges_ref([0] * len(src), src, rel, dst, symmetric)
        assert list(indices) == list(alone)
