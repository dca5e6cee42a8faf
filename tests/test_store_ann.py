"""The grouped HNSW index (store/ann.py) that searches large users: the exact top 10 where the answer is known
by construction, near-duplicates grouped behind one leader and others not (the store-level behaviour, index
files and deletes, is in test_store_index.py)."""

from __future__ import annotations

import numpy as np
import pytest

from promem_fast.persistence import ann

pytest.importorskip("faiss", reason="needs the cpu extra (faiss-cpu)")

CLUSTERS, MEMBERS, SPACE, DIM = 400, 50, 32, 96


def _centres() -> np.ndarray:
    """``CLUSTERS`` random unit vectors in the first ``SPACE`` axes (neighbouring centres at cosine 0.5–0.8,
    as real sentence vectors are, so a graph walk has somewhere to go)."""
    centres = np.zeros((CLUSTERS, DIM), np.float32)
    centres[:, :SPACE] = np.random.default_rng(11).standard_normal((CLUSTERS, SPACE))
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def _clustered() -> np.ndarray:
    """``MEMBERS`` unit vectors per centre: member ``j`` of cluster ``c`` (row ``c·MEMBERS + j``) is
    ``a_j·centre_c + b_j·e_(SPACE + (j + c) mod 64)`` with ``a_j = 1 − j/1000``: its cosine with
    ``centre_c`` is ``a_j`` (the offset axes are outside the centres' space), so the nearest ten to
    ``centre_c`` are members 0–9 of cluster ``c`` in that order (0.991 or more, while another cluster's
    members are at most its centre's cosine with ``centre_c``)."""
    centres = _centres()
    out = np.zeros((CLUSTERS * MEMBERS, DIM), np.float32)
    for c in range(CLUSTERS):
        for j in range(MEMBERS):
            a = 1.0 - j / 1000.0
            out[c * MEMBERS + j] = a * centres[c]
            out[c * MEMBERS + j, SPACE + (j + c) % (DIM - SPACE)] = np.sqrt(1.0 - a * a)
    return out


def test_approximate_search_returns_the_exact_top_ten_of_the_nearest_cluster() -> None:
    vectors = _clustered()
    order = np.random.default_rng(5).permutation(len(vectors))
    row_of = np.argsort(order)  # original row → row in the index
    index = ann.ApproximateIndex(DIM)
    for start in range(0, len(vectors), 4000):  # grown block by block, as the store adds
        index.add(vectors[order[start:start + 4000]])
    # a cluster's members are within cosine 0.9 of each other; all members of a cluster that arrive in
    # the block where its first member does may lead (they were not compared with each other), and a
    # cluster of 50 fills more than one group of at most MAX_GROUP
    assert CLUSTERS <= index.graph.ntotal < len(vectors) // 2
    assert np.bincount(index.group).max() <= ann.MAX_GROUP
    centres = _centres()
    assert (centres @ centres.T - 2 * np.eye(CLUSTERS)).max() < 0.95  # no other cluster reaches 0.991
    for c in (0, 7, 123, 250, 399):
        rows, scores = index.search(centres[c], 10)
        assert rows.tolist() == [row_of[c * MEMBERS + j] for j in range(10)]
        assert np.allclose(scores, [1.0 - j / 1000.0 for j in range(10)], atol=1e-5)
    # between the two closest clusters, a little nearer the first: both groups are needed, interleaved
    near = centres @ centres.T - 2 * np.eye(CLUSTERS)
    first, second = np.unravel_index(np.argmax(near), near.shape)
    between = centres[first] + 0.9995 * centres[second]
    rows, _ = index.search(between / np.linalg.norm(between), 10)
    assert rows.tolist() == [row_of[c * MEMBERS + j] for j in range(5) for c in (first, second)]
    assert np.array_equal(index.vectors(), vectors[order])  # rows kept in the order added


def _unit(*pairs: tuple[int, float]) -> np.ndarray:
    v = np.zeros(8, np.float32)
    for axis, value in pairs:
        v[axis] = value
    return v


def test_a_near_duplicate_joins_its_leaders_group_and_a_different_vector_leads_its_own() -> None:
    index = ann.ApproximateIndex(8)
    index.add(np.stack([_unit((0, 1.0)), _unit((1, 1.0))]))  # two leaders: groups 0 and 1
    index.add(np.stack([
        _unit((0, 0.95), (2, np.sqrt(1 - 0.95**2))),  # cosine 0.95 with row 0: joins group 0
        _unit((1, 0.91), (3, np.sqrt(1 - 0.91**2))),  # 0.91 with row 1: joins group 1
        _unit((0, 0.85), (4, np.sqrt(1 - 0.85**2))),  # 0.85 with row 0, under 0.9: leads group 2
        _unit((5, 1.0)),  # far from everything: leads group 3
    ]))
    assert index.group.tolist() == [0, 1, 0, 1, 2, 3]
    assert index.leaders.tolist() == [0, 1, 4, 5]
    again = ann.ApproximateIndex.deserialize(index.serialize(), 8)  # the store's index file
    assert again.group.tolist() == [0, 1, 0, 1, 2, 3] and np.array_equal(again.vectors(), index.vectors())
    again.add(_unit((5, 0.99), (6, np.sqrt(1 - 0.99**2)))[None])  # after a restart: still grouped
    assert again.group.tolist()[-1] == 3
    again.probe_groups = 1  # the two nearest groups only (as many as the fetch): 3 and one at cosine 0
    rows, scores = again.search(_unit((5, 1.0)), 2)  # both members of group 3 found through its leader
    assert rows.tolist() == [5, 6] and np.allclose(scores, [1.0, 0.99])


def test_a_user_added_in_one_call_is_grouped_in_steps_so_its_first_rows_do_not_all_lead() -> None:
    rng = np.random.default_rng(2)
    distinct = rng.standard_normal((ann.ASSIGN_BATCH, 64)).astype(np.float32)  # random: far from each other
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    twin = 0.95 * distinct[0] + np.sqrt(1 - 0.95**2) * _orthogonal_to(distinct[0], rng)  # cosine 0.95 to row 0
    index = ann.ApproximateIndex(64)
    index.add(np.vstack([distinct, twin]))  # one call, as when a user crosses the threshold
    assert len(index.leaders) == ann.ASSIGN_BATCH and index.group.tolist()[-1] == 0


def _orthogonal_to(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    w = rng.standard_normal(v.shape).astype(np.float32)
    w -= (w @ v) * v
    return w / np.linalg.norm(w)


def test_groups_split_past_their_size_and_the_nearest_duplicates_are_still_found() -> None:
    """A thousand near-duplicates of one sentence (all within cosine 0.9 of it): no group grows past
    ``MAX_GROUP`` (a query scores a bounded number of members), and the ten nearest are still found."""
    rng = np.random.default_rng(3)
    v = rng.standard_normal(64).astype(np.float32)
    v /= np.linalg.norm(v)
    cosines = 1.0 - np.arange(1000) / 10_000  # copy j at cosine 1 - j/10,000 from v: 0.9001 or more
    copies = np.stack([a * v + np.sqrt(1 - a * a) * _orthogonal_to(v, rng) for a in cosines]).astype(np.float32)
    order = rng.permutation(len(copies))
    index = ann.ApproximateIndex(64)
    for start in range(0, len(copies), 256):
        index.add(copies[order[start:start + 256]])
    assert np.bincount(index.group).max() <= ann.MAX_GROUP
    rows, scores = index.search(v, 10)
    assert sorted(order[rows].tolist()) == list(range(10))
    assert np.allclose(scores, cosines[:10], atol=1e-5)


@pytest.mark.parametrize("kind, approximate_min", [("numpy", 0), ("faiss", 0), ("faiss", 1000)],
                         ids=["numpy", "faiss flat", "grouped graph"])
def test_an_exact_search_of_several_queries_answers_each_as_alone(kind: str, approximate_min: int) -> None:
    """Update judging scans a session's new memories in one pass (``search_many``): each query still gets
    the known top ten of its cluster, in order, and ties (a stored copy of a vector) go to the lower id."""
    from promem_fast.persistence.vectors import VectorIndex

    vectors = _clustered()
    order = np.random.default_rng(8).permutation(len(vectors))
    ids = np.arange(1, len(vectors) + 1, dtype=np.int64)  # node id of original row r: r + 1, stored shuffled
    index = VectorIndex(DIM, kind, 0, approximate_min)  # type: ignore[arg-type]
    index.add(ids[order], vectors[order])
    index.add(np.array([len(vectors) + 1]), vectors[7 * MEMBERS:7 * MEMBERS + 1])  # a copy of row 7·50, newest
    assert index.approximate == (approximate_min > 0)
    centres = _centres()
    picked = [0, 7, 123, 399]
    answers = index.search_many(centres[picked], 10, exact=True)
    for c, (found, scores) in zip(picked, answers, strict=True):
        expected = [c * MEMBERS + j + 1 for j in range(10)]
        if c == 7:  # the copy ties with member 0 and comes after it (a higher id)
            expected = [expected[0], len(vectors) + 1, *expected[1:9]]
        assert found.tolist() == expected
        assert scores[0] == pytest.approx(1.0, abs=1e-5)
    alone = [index.search(centres[c], 10, exact=True)[0].tolist() for c in picked]
    assert [found.tolist() for found, _ in answers] == alone
