"""Approximate search for large users: same top hits as exact search on real embeddings, an index file that
only its owner can read, built once and rebuilt when it is gone, a deleted node gone from the index and the
file at once, and the older version's index file replaced."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from conftest import scripted_config
from promem_fast.config import EngineConfig
from promem_fast.store import MemoryStore
from promem_fast.store import ann as ann_module
from store_helpers import graph


def _chitchat_sentences(count: int) -> tuple[list[str], list[str]]:
    """``count`` distinct sentences of the Chit-Chat Challenge conversations, and 20 questions people asked in
    later conversations of it (real dialogue, not generated text)."""
    chitchat = pytest.importorskip("chitchat_dataset", reason="needs the dev extra (chitchat-dataset)")
    data = json.loads(Path(chitchat.__file__).with_name("dataset.json").read_text(encoding="utf-8"))
    texts = [u["text"] for c in data.values() for turn in c["messages"] for u in turn]
    found = list(dict.fromkeys(s.strip() for t in texts for s in re.split(r"(?<=[.!?])\s+", t)
                               if len(s.split()) >= 3))
    questions = [s for s in found[count:] if s.endswith("?")][:20]
    return found[:count], questions


@pytest.mark.slow
def test_approximate_search_finds_the_same_top_ten_as_exact_on_real_minilm_embeddings(tmp_path: Path) -> None:
    sentences, questions = _chitchat_sentences(800)
    db = tmp_path / "m.db"
    exact_config, approx_config = EngineConfig(), EngineConfig()
    exact_config.search_approximate_min = 0
    approx_config.search_approximate_min = 200  # forced low: the real default starts at 50,000 vectors
    with MemoryStore(db, exact_config, update_judge="off") as exact:
        exact.add([graph(f"s{i}", "Ana", sentences[i:i + 100]) for i in range(0, len(sentences), 100)])
        expected = [[h.node_id for h in exact.search("Ana", q, k=10)] for q in questions]
        user_pk = exact._user_pk("default", "Ana")
        assert user_pk is not None and not exact.index(user_pk).approximate
        with MemoryStore(db, approx_config, update_judge="off", embedder=exact.embedder) as approx:
            got = [[h.node_id for h in approx.search("Ana", q, k=10)] for q in questions]
            assert approx.index(user_pk).approximate
    assert len(expected) == 20 and all(len(ids) == 10 for ids in expected)
    assert got == expected


def _store(db: Path, threshold: int = 50) -> MemoryStore:
    config = scripted_config()
    config.search_approximate_min = threshold
    return MemoryStore(db, config, update_judge="off")


SESSIONS = [graph(f"t{i}", "Tom", [f"Tom noted item {j} of list {i}: {w}" for j, w in
                                   enumerate(["apples", "boots", "candles", "dahlias", "envelopes"] * 4)])
            for i in range(5)]  # 100 nodes


def test_the_graph_is_saved_for_its_owner_only_and_read_back_instead_of_built(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "m.db"
    with _store(db) as store:
        store.add(SESSIONS)
        first = [h.node_id for h in store.search("Tom", "candles of list 3", k=5)]
        assert store.index(store._user_pk("default", "Tom") or 0).approximate
    folder = tmp_path / "m.db.vectors"
    (saved,) = folder.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600

    def no_building(self: object, vectors: object) -> None:
        raise AssertionError("the saved graph was built again")

    monkeypatch.setattr(ann_module.ApproximateIndex, "add", no_building)
    with _store(db) as store:
        assert [h.node_id for h in store.search("Tom", "candles of list 3", k=5)] == first
        assert store.index(store._user_pk("default", "Tom") or 0).approximate


def _saved_user(db: Path, query: str) -> tuple[list[int], Path]:
    """Tom's 100 nodes added to a fresh store at ``db``: the top 5 for ``query``, and the index file saved."""
    with _store(db) as store:
        store.add(SESSIONS)
        top = [h.node_id for h in store.search("Tom", query, k=5)]
    (saved,) = db.with_name(f"{db.name}.vectors").iterdir()
    return top, saved


def test_a_missing_index_file_is_rebuilt_from_the_store_and_saved_again(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    first, saved = _saved_user(db, "dahlias of list 1")
    saved.unlink()
    with _store(db) as store:
        assert [h.node_id for h in store.search("Tom", "dahlias of list 1", k=5)] == first
        assert store.index(store._user_pk("default", "Tom") or 0).approximate
    assert [p.name for p in (tmp_path / "m.db.vectors").iterdir()] == [saved.name]


def test_a_user_below_the_threshold_and_a_store_set_to_exact_keep_exact_search(tmp_path: Path) -> None:
    with _store(tmp_path / "a.db", threshold=101) as store:
        store.add(SESSIONS)
        assert len(store.search("Tom", "boots", k=3)) == 3
        assert not store.index(store._user_pk("default", "Tom") or 0).approximate
    with _store(tmp_path / "a.db", threshold=0) as store:
        assert len(store.search("Tom", "boots", k=3)) == 3
        assert not store.index(store._user_pk("default", "Tom") or 0).approximate
    assert not (tmp_path / "a.db.vectors").exists()  # 100 exact vectors are not worth a file


def _stored_vector(db: Path, node: int) -> bytes:
    with sqlite3.connect(db) as con:
        (blob,) = con.execute("SELECT vector FROM nodes WHERE id = ?", (node,)).fetchone()
    return bytes(blob)


def _holds(index_folder: Path, vector: bytes) -> bool:
    return any(vector in p.read_bytes() for p in index_folder.iterdir())


def test_a_deleted_node_leaves_the_approximate_index_and_its_file(tmp_path: Path) -> None:
    db, folder = tmp_path / "m.db", tmp_path / "m.db.vectors"
    top, _ = _saved_user(db, "candles of list 3")
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


def test_an_index_file_of_the_older_plain_hnsw_version_is_rebuilt_and_replaced(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    expected, saved = _saved_user(db, "dahlias of list 1")
    with np.load(saved) as new:  # rewrite it as the plain HNSW version wrote it: a "graph"
        fields = {"ids": new["ids"], "store_id": new["store_id"], "state": new["state"]}
        vectors = ann_module.ApproximateIndex.deserialize(new["grouped"], int(new["state"][2])).vectors()
    faiss = ann_module.faiss_module()
    hnsw = faiss.IndexHNSWFlat(vectors.shape[1], 24, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors)
    np.savez(saved, graph=faiss.serialize_index(hnsw), **fields)
    with _store(db) as store:
        assert [h.node_id for h in store.search("Tom", "dahlias of list 1", k=5)] == expected
        index = store.index(store._user_pk("default", "Tom") or 0)
        assert index.approximate and np.array_equal(index.vectors(), vectors)
    with np.load(saved) as replaced:
        assert "grouped" in replaced.files and "graph" not in replaced.files


def test_a_store_opened_read_only_writes_no_index_file(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with _store(db) as store:
        store.add(SESSIONS)
    shutil.rmtree(tmp_path / "m.db.vectors", ignore_errors=True)
    before = db.stat().st_mtime_ns
    config = scripted_config()
    config.search_approximate_min = 50
    with MemoryStore(db, config, read_only=True) as store:
        assert len(store.search("Tom", "candles of list 3", k=5)) == 5
        assert store.index(store._user_pk("default", "Tom") or 0).approximate  # the index was built ...
    assert not (tmp_path / "m.db.vectors").exists() and db.stat().st_mtime_ns == before  # ... and not written
