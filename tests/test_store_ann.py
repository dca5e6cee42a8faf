"""The inverted file (store/ann.py) that searches large users: the exact top 10 where the answer is known by
construction, retraining as the user grows, deletes gone from the index and its file, and index files of the
older HNSW version still read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import scripted_config
from promem_fast.store import MemoryStore
from promem_fast.store import ann
from promem_fast.store.vectors import VectorIndex
from store_helpers import graph

faiss = pytest.importorskip("faiss", reason="needs the cpu extra (faiss-cpu)")

CLUSTERS, MEMBERS, DIM = 400, 50, 512


def _clustered() -> np.ndarray:
    """``CLUSTERS`` tight clusters of ``MEMBERS`` unit vectors: member ``j`` of cluster ``c`` (row
    ``c·MEMBERS + j``) is ``a_j·e_c + b_j·e_(400 + j)`` with ``a_j = 1 − j/1000``, so its cosine with the
    axis ``e_c`` is ``a_j``: the nearest ten to ``e_c`` are members 0–9 of cluster ``c``, in that order,
    and every other cluster is at cosine 0 or less from it."""
    out = np.zeros((CLUSTERS * MEMBERS, DIM), np.float32)
    for c in range(CLUSTERS):
        for j in range(MEMBERS):
            a = 1.0 - j / 1000.0
            out[c * MEMBERS + j, c] = a
            out[c * MEMBERS + j, CLUSTERS + (j + c) % (DIM - CLUSTERS)] = np.sqrt(1.0 - a * a)
    return out


def test_approximate_search_returns_the_exact_top_ten_of_the_nearest_cluster() -> None:
    vectors = _clustered()
    order = np.random.default_rng(5).permutation(len(vectors))  # every block holds members of every cluster
    row_of = np.argsort(order)  # original row → row in the index
    index = ann.ApproximateIndex(DIM)
    for start in range(0, len(vectors), 4000):  # grown block by block: trained at 4,000, again at 16,000
        index.add(vectors[order[start:start + 4000]])
    assert index.trained_at == 16_000 and index.lists > ann.NPROBE  # a query reads only part of the lists
    for c in (0, 7, 123, 250, 399):
        query = np.zeros(DIM, np.float32)
        query[c] = 1.0
        rows, scores = index.search(query, 10)
        assert rows.tolist() == [row_of[c * MEMBERS + j] for j in range(10)]
        assert np.allclose(scores, [1.0 - j / 1000.0 for j in range(10)], atol=1e-5)
    between = np.zeros(DIM, np.float32)  # between clusters 40 and 41, a little nearer 40: their lists both count
    between[40], between[41] = 1.0, 0.9995
    rows, _ = index.search(between / np.linalg.norm(between), 10)
    assert rows.tolist() == [row_of[c * MEMBERS + j] for j in range(5) for c in (40, 41)]  # 40/0, 41/0, 40/1…
    assert np.array_equal(index.vectors(), vectors[order])  # rows kept in the order added across both trainings


def test_the_lists_are_trained_again_when_the_user_has_grown_four_fold_even_across_a_restart(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((4000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex(16, "faiss", 0, approximate_min=1000)
    index.add(np.arange(1, 1001), vectors[:1000])
    assert (index._approx.trained_at, index._approx.lists) == (1000, 25)  # 1,000 / 39 lists: FAISS's minimum
    index.add(np.arange(1001, 3000), vectors[1000:2999])
    assert (index._approx.trained_at, index._approx.lists) == (1000, 25)  # 2,999 < 4 × 1,000: lists kept
    index.save(tmp_path / "u.npz", "store")
    again = VectorIndex.load(tmp_path / "u.npz", "faiss", 0, 16, "store", approximate_min=1000)
    assert again is not None and again.approximate
    again.add(np.array([3000]), vectors[2999:3000])
    assert (again._approx.trained_at, again._approx.lists) == (1000, 25)  # the file remembers 1,000
    again.add(np.arange(3001, 4001), vectors[3000:])
    assert (again._approx.trained_at, again._approx.lists) == (4000, 102)  # 4 × 1,000: 4,000 / 39 lists
    assert np.array_equal(again.vectors(), vectors)


def _stored_vector(db: Path, node: int) -> bytes:
    with sqlite3.connect(db) as con:
        (blob,) = con.execute("SELECT vector FROM nodes WHERE id = ?", (node,)).fetchone()
    return bytes(blob)


SESSIONS = [graph(f"t{i}", "Tom", [f"Tom noted item {j} of list {i}: {w}" for j, w in
                                   enumerate(["apples", "boots", "candles", "dahlias", "envelopes"] * 4)])
            for i in range(5)]  # 100 nodes


def _store(db: Path) -> MemoryStore:
    config = scripted_config()
    config.search_approximate_min = 50
    return MemoryStore(db, config, update_judge="off")


def _holds(index_folder: Path, vector: bytes) -> bool:
    return any(vector in p.read_bytes() for p in index_folder.iterdir())


def test_a_deleted_node_leaves_the_approximate_index_and_its_file(tmp_path: Path) -> None:
    db, folder = tmp_path / "m.db", tmp_path / "m.db.vectors"
    with _store(db) as store:
        store.add(SESSIONS)
        top = [h.node_id for h in store.search("Tom", "candles of list 3", k=5)]
    gone = top[0]
    vector = _stored_vector(db, gone)
    assert _holds(folder, vector)  # the file holds the vectors whole: what must leave it
    with _store(db) as writer, _store(db) as reader:
        user = writer._user_pk("default", "Tom") or 0
        assert reader.search("Tom", "candles of list 3", k=5)[0].node_id == gone
        assert writer.delete(user="Tom", node=gone) == 1
        assert not _holds(folder, vector)  # gone from disk at once, not at the next close
        for store in (writer, reader):  # the reader's index was built before the delete
            index = store.index(user)
            assert index.approximate and len(index) == 99
            assert not (index.vectors() == np.frombuffer(vector, np.float32)).all(axis=1).any()
            assert [h.node_id for h in store.search("Tom", "candles of list 3", k=5)][:4] == top[1:5]
    assert not _holds(folder, vector)


def test_an_index_file_of_the_older_hnsw_version_is_rebuilt_and_replaced_by_an_inverted_file(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with _store(db) as store:
        store.add(SESSIONS)
        expected = [h.node_id for h in store.search("Tom", "dahlias of list 1", k=5)]
    (saved,) = (tmp_path / "m.db.vectors").iterdir()
    with np.load(saved) as new:  # rewrite it as the HNSW version wrote it: a "graph" and no "trained_at"
        fields = {"ids": new["ids"], "store_id": new["store_id"], "state": new["state"]}
        vectors = ann.saved_vectors(new["ivf"], int(new["state"][2]))
    hnsw = faiss.IndexHNSWFlat(vectors.shape[1], 24, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors)
    np.savez(saved, graph=faiss.serialize_index(hnsw), **fields)
    with _store(db) as store:
        assert [h.node_id for h in store.search("Tom", "dahlias of list 1", k=5)] == expected
        index = store.index(store._user_pk("default", "Tom") or 0)
        assert index.approximate and np.array_equal(index.vectors(), vectors)
    with np.load(saved) as replaced:
        assert "ivf" in replaced.files and "graph" not in replaced.files
