"""The memory store on real SQLite files: what a user stores comes back from search with its details, edges
and dates; tenants and users never see each other; updates supersede without deleting; export → import is
byte-identical; a schema from the future is refused."""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import scripted_config
from promem_fast.errors import InputError
from promem_fast.store import MemoryStore, StoreError
from promem_fast.persistence.schema import SCHEMA_VERSION
from store_helpers import TopicEmbedder, graph


def open_store(path: Path | str, *overrides: str, **kwargs: object) -> MemoryStore:
    """A store with the scripted profile, ``overrides`` (``--set`` lines) applied."""
    return MemoryStore(path, scripted_config().with_overrides(list(overrides)), **kwargs)  # type: ignore[arg-type]


MAYA_1 = graph("m1", "Maya", ["Maya adopted a beagle named Biscuit.", "Maya moved to Lisbon for a job at Nordvik."],
               details=[["Biscuit", "beagle"], ["Lisbon", "Nordvik Labs"]], edges=[(1, 0, "temporal")],
               timestamp="2025-03-14T09:30:00")
MAYA_2 = graph("m2", "Maya", ["Maya runs 5 km every morning with Biscuit."], details=[["5 km"]],
               timestamp="2025-04-02T08:00:00")


def test_search_returns_nodes_with_details_edges_dates_and_adding_again_changes_nothing(store_at: str) -> None:
    with open_store(store_at) as store:
        assert store.add([MAYA_1, MAYA_2]) == 2
        assert store.add([MAYA_1, MAYA_2]) == 0
        hits = store.search("Maya", "Maya job in Lisbon", k=2)
        assert hits[0].text == "Maya moved to Lisbon for a job at Nordvik."
        top = hits[0]
        assert top.session_id == "m1" and top.date == "2025-03-14T09:30:00" and top.turn_id == 1
        assert list(top.details) == ["Lisbon", "Nordvik Labs"]
        assert [dict(e) for e in top.edges] == [{"relation": "temporal", "direction": "out",
                                                 "node_id": hits[0].node_id - 1,
                                                 "text": "Maya adopted a beagle named Biscuit."}]
        assert top.score >= hits[1].score  # type: ignore[operator]
        # a detail reaches the entry it is anchored to
        assert store.search("Maya", "5 km", k=1)[0].session_id == "m2"
        assert store.sessions("Maya") == ["m1", "m2"]
        assert len(store.hits("Maya")) == 3
    # a second open of the same file sees the same memory (nothing held only in memory)
    with open_store(store_at, read_only=True) as again:
        assert [h.text for h in again.hits("Maya")] == [
            "Maya adopted a beagle named Biscuit.", "Maya moved to Lisbon for a job at Nordvik.",
            "Maya runs 5 km every morning with Biscuit."]
        with pytest.raises(StoreError, match="read-only"):
            again.delete(user="Maya")


def test_tenants_and_users_are_isolated(store_at: str) -> None:
    other = graph("o1", "Maya", ["Maya is allergic to penicillin."])
    with open_store(store_at) as store:
        store.add([MAYA_1], tenant="acme")
        store.add([other], tenant="globex")
        store.add([graph("b1", "Ben", ["Ben moved to Lisbon in May."])], tenant="acme")
        assert store.users(tenant="acme") == ["Maya", "Ben"] and store.users(tenant="globex") == ["Maya"]
        assert store.users() == []
        texts = [h.text for h in store.search("Maya", "Lisbon penicillin allergy move", k=10, tenant="acme")]
        assert texts and all("penicillin" not in t and "Ben" not in t for t in texts)
        assert [h.text for h in store.search("Maya", "Lisbon", k=10, tenant="globex")] == [other.nodes[0].text]
        node = store.hits("Maya", tenant="globex")[0].node_id
        assert store.history_graph(node, tenant="acme")["nodes"] == []
        assert store.delete(tenant="acme", user="Maya", node=node) == 0  # not acme's node
        assert store.delete(tenant="acme", user="Maya") == 2
        assert store.users(tenant="acme") == ["Ben"]
        assert len(store.hits("Maya", tenant="globex")) == 1


JOBS = [("j1", "2024-01-10T09:00:00", "Maya works as a nurse at Mercy hospital in Boston."),
        ("j2", "2024-06-10T09:00:00", "Maya works as a teacher at Lincoln school in Boston."),
        ("j3", "2025-01-10T09:00:00", "Maya works as a pilot at Delta airline in Boston.")]

HOBBIES = ["Maya paints watercolor landscapes on weekends.", "Maya collects vintage stamps from Peru.",
           "Maya plays cello in a community orchestra."]


def test_updates_supersede_older_entries_in_a_chain_and_delete_nothing(store_at: str) -> None:
    graphs = [graph(sid, "Maya", [text, hobby], timestamp=ts)
              for (sid, ts, text), hobby in zip(JOBS, HOBBIES, strict=True)]
    with open_store(store_at, embedder=TopicEmbedder()) as store:
        store.add(graphs[:1])
        store.add(graphs[1:])  # the chain crosses a stored session and one of the same batch
        current = [h.text for h in store.search("Maya", "where does Maya work?", k=10)]
        assert JOBS[2][2] in current and JOBS[0][2] not in current and JOBS[1][2] not in current
        everything = store.search("Maya", "where does Maya work?", k=10, history=True)
        assert {JOBS[0][2], JOBS[1][2]} <= {h.text for h in everything}
        assert len(store.hits("Maya", history=True)) == 6
        newest = next(h for h in everything if h.text == JOBS[2][2])
        chain = store.history_graph(newest.node_id)["nodes"]
        assert [h["memory"] for h in chain] == [text for _, _, text in JOBS]
        assert [h["superseded_by"] for h in chain] == [chain[1]["id"], chain[2]["id"], None]
        # hobbies are different things: nothing superseded them
        assert {h.text for h in store.hits("Maya")} >= set(HOBBIES)
        drawn = store.graph("Maya")
        assert sum(e["relation"] == "superseded_by" for e in drawn["edges"]) == 2
        # removing the newest session makes the one it updated current again
        store.delete(user="Maya", session="j3")
        assert JOBS[1][2] in [h.text for h in store.search("Maya", "where does Maya work?", k=10)]


def test_the_update_judge_runs_on_the_model_that_roles_update_names(tmp_path: Path) -> None:
    """``roles.update`` chooses the chat model that judges updates, apart from the one that checks entailment
    (``roles.nli``): here a model whose context cannot hold the judge's prompt, so the judge fails and the
    older job stays current; the same model under ``roles.nli`` changes nothing."""
    jobs = [graph(sid, "Maya", [text], timestamp=ts) for sid, ts, text in JOBS[:2]]
    tiny = ["backend=scripted", "context_length=64"]
    current = {}
    for role in ("nli", "update"):
        config = scripted_config().with_overrides([f"roles.{role}.{value}" for value in tiny])
        with MemoryStore(tmp_path / f"{role}.db", config, embedder=TopicEmbedder()) as store:
            store.add(jobs[:1])
            store.add(jobs[1:])
            current[role] = {h.text for h in store.search("Maya", "where does Maya work?", k=10)}
    assert current["nli"] == {JOBS[1][2]}
    assert current["update"] == {JOBS[0][2], JOBS[1][2]}


def test_an_older_session_added_later_takes_its_place_in_time(store_at: str) -> None:
    newer = graph(JOBS[1][0], "Maya", [JOBS[1][2]], timestamp=JOBS[1][1])
    older = graph(JOBS[0][0], "Maya", [JOBS[0][2]], timestamp=JOBS[0][1])
    with open_store(store_at, embedder=TopicEmbedder()) as store:
        store.add([newer])
        store.add([older])
        # the older job never replaces the newer one; the newer replaces it, as if they had come in order
        assert [h.text for h in store.search("Maya", "where does Maya work?", k=5)] == [JOBS[1][2]]
        (old,) = [h for h in store.hits("Maya", history=True) if h.text == JOBS[0][2]]
        assert old.valid_until == "2024-06-10T09:00:00"


def test_export_then_import_is_byte_identical(tmp_path: Path) -> None:
    graphs = [graph(sid, "Maya", [text], timestamp=ts) for sid, ts, text in JOBS]
    with open_store(tmp_path / "a.db", embedder=TopicEmbedder()) as store:
        store.add([MAYA_1, MAYA_2])
        store.add(graphs)
        store.add([graph("x1", "Ben", ["Ben plays chess."])], tenant="acme")
        assert store.export(tmp_path / "a.jsonl") == 6
        assert store.export(tmp_path / "acme.jsonl", tenant="acme") == 1
    with open_store(tmp_path / "b.db", embedder=TopicEmbedder()) as copy:
        assert copy.import_(tmp_path / "a.jsonl") == 6
        assert copy.import_(tmp_path / "a.jsonl") == 0
        copy.export(tmp_path / "b.jsonl")
        assert len(copy.hits("Maya")) == 4  # two of the three jobs are superseded
        assert copy.search("Ben", "chess", tenant="acme")[0].text == "Ben plays chess."
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_import_names_the_bad_line(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as store:
        store.add([MAYA_1])
        store.export(tmp_path / "a.jsonl")
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    (tmp_path / "bad.jsonl").write_text("\n".join([lines[0], lines[1].replace('"nodes"', '"nodez"')]) + "\n")
    with open_store(tmp_path / "b.db") as store:
        with pytest.raises(Exception, match=r"bad.jsonl:2.*session 'm1'.*nodes"):
            store.import_(tmp_path / "bad.jsonl")
        assert store.users() == []  # nothing of the failed import is kept
    record = json.loads(lines[1])
    record["vectors"] = base64.b64encode(base64.b64decode(record["vectors"])[:-4 * 256]).decode()  # a node short
    (tmp_path / "short.jsonl").write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    with open_store(tmp_path / "b.db") as store:
        with pytest.raises(InputError, match=r"short.jsonl:2.*vectors for"):
            store.import_(tmp_path / "short.jsonl")
        assert store.users() == []


def test_schema_version_is_recorded_and_a_newer_file_is_refused(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db"):
        pass
    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer promem_fast"):
        open_store(tmp_path / "m.db")


def test_faiss_and_numpy_indexes_agree(tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    texts = [f"Maya visited city{i} with friend{i % 7} in month{i % 12}" for i in range(300)]
    with open_store(tmp_path / "m.db", index="faiss") as a:
        a.add([graph("s", "Maya", texts)])
        with open_store(tmp_path / "m.db", index="numpy") as b:
            for query in ("city5 friend5", "month3 visits", "friend2"):
                fa = [(h.node_id, round(h.score or 0, 5)) for h in a.search("Maya", query, k=15)]
                nb = [(h.node_id, round(h.score or 0, 5)) for h in b.search("Maya", query, k=15)]
                assert fa == nb


def test_a_reader_sees_removals_by_another_connection(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db") as writer, open_store(tmp_path / "m.db", read_only=True) as reader:
        writer.add([MAYA_1])
        assert reader.search("Maya", "Lisbon", k=1)[0].session_id == "m1"  # index built and cached
        writer.add([MAYA_2])
        writer.delete(user="Maya", session="m1")
        assert [h.session_id for h in reader.search("Maya", "Lisbon Biscuit", k=5)] == ["m2"]
        vectors = reader.db.index(reader.user_id("default", "Maya") or 0)
        assert len(vectors) == 1 and np.isfinite(vectors.search(np.ones(vectors.dim), 1)[1]).all()


def test_a_user_deleted_by_another_connection_after_lookup_has_an_empty_index(tmp_path: Path) -> None:
    """A search that found the user and then lost it to a concurrent delete answers with no memory (the
    service would otherwise fail that request with a 500)."""
    with open_store(tmp_path / "m.db") as writer, open_store(tmp_path / "m.db", read_only=True) as reader:
        writer.add([MAYA_1])
        user_pk = reader.user_id("default", "Maya")
        assert user_pk is not None and len(reader.db.index(user_pk)) == 2
        writer.delete(user="Maya")
        vectors = reader.db.index(user_pk)
        assert len(vectors) == 0 and len(vectors.search(np.ones(vectors.dim), 5)[0]) == 0


def test_a_graph_that_cannot_be_stored_is_named_and_leaves_nothing_behind(store_at: str) -> None:
    bad = graph("bad", "Maya", ["Maya likes tea.", "Maya likes coffee."])
    bad.nodes[1].id = 0  # two nodes with one id
    with open_store(store_at) as store:
        store.add([MAYA_1])
        with pytest.raises(InputError, match=r"session 'bad', field 'nodes'"):
            store.add([bad])
        assert store.add([MAYA_2]) == 1
        assert store.sessions("Maya") == ["m1", "m2"] and len(store.hits("Maya")) == 3


def test_threads_sharing_one_store_never_index_a_node_twice(store_at: str) -> None:
    failures: list[BaseException] = []
    # every memory is listed: the ranking's dedup would show near-repeats ("note 3 of batch 4") once
    with open_store(store_at, "ranking.dedup=false", update_judge="off") as store:
        store.add([graph("t0", "Maya", [f"Maya note {j} about travel plans" for j in range(20)])])

        def read() -> None:
            try:
                for _ in range(100):
                    ids = [h.node_id for h in store.search("Maya", "travel plans note", k=60)]
                    assert len(ids) == len(set(ids))
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        readers = [threading.Thread(target=read) for _ in range(4)]
        for thread in readers:
            thread.start()
        for i in range(1, 30):
            store.add([graph(f"t{i}", "Maya", [f"Maya note {j} of batch {i} about travel plans" for j in range(20)])])
        for thread in readers:
            thread.join(timeout=120)
        assert not failures, failures
        found = [h.node_id for h in store.search("Maya", "travel plans note", k=1000)]
        assert sorted(found) == sorted(h.node_id for h in store.hits("Maya"))


def test_a_store_searches_with_the_embedder_that_filled_it_and_refuses_another(tmp_path: Path) -> None:
    from promem_fast.testing.embed_hashing import HashingEmbedder
    from promem_fast.config import EngineConfig

    with MemoryStore(tmp_path / "m.db", scripted_config(), profile="scripted") as store:
        store.add([MAYA_1])
    # opened with the defaults (a sentence-transformers model): the recorded embedder is used, none loaded
    with MemoryStore(tmp_path / "m.db", EngineConfig(), read_only=True) as store:
        assert store.search("Maya", "Lisbon job", k=1)[0].text == "Maya moved to Lisbon for a job at Nordvik."
        assert isinstance(store.embedder, HashingEmbedder) and store.embedder.dim == 256
    # handed another embedder (an engine's): one line naming both, before anything is embedded
    other = scripted_config()
    other.embedder.dim = 64
    with pytest.raises(StoreError) as refused:
        MemoryStore(tmp_path / "m.db", other, embedder=HashingEmbedder(other.embedder))
    assert str(refused.value) == (f"{tmp_path / 'm.db'}: filled by embedder hashing (256 dims); this one is "
                                  "hashing (64 dims): use --profile scripted with this store, or another store")
    # a store from before embedders were recorded still refuses vectors of another dimension
    raw = sqlite3.connect(tmp_path / "m.db")
    raw.execute("DELETE FROM meta WHERE key = 'embedder'")
    raw.commit()
    raw.close()
    with MemoryStore(tmp_path / "m.db", other) as store:
        with pytest.raises(StoreError, match="filled by an embedder of 256 dims; this embedder gives 64 dims"):
            store.search("Maya", "Lisbon")
        with pytest.raises(StoreError, match="256 dims"):
            store.add([MAYA_2])


def test_a_large_users_index_is_saved_reused_and_refilled_when_stale(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with open_store(db) as store:
        store.db.cache_min_vectors = 1
        store.add([MAYA_1, MAYA_2])
        assert store.search("Maya", "Lisbon", k=1)[0].session_id == "m1"
    saved = list((tmp_path / "m.db.vectors").iterdir())
    assert len(saved) == 1
    raw = sqlite3.connect(db)
    raw.execute("UPDATE nodes SET vector = NULL")  # only the saved index can answer now
    raw.commit()
    raw.close()
    with open_store(db) as store:
        assert store.search("Maya", "Lisbon", k=1)[0].session_id == "m1"
        store.delete(user="Maya", session="m2")  # a new generation: the saved index is stale
    dense = scripted_config().with_overrides(["ranking.lexical=false", "ranking.names=false"])  # vectors alone
    with MemoryStore(db, dense) as store:
        assert store.search("Maya", "Lisbon", k=3) == []  # refilled from SQLite, where no vector is left
    db.unlink()
    with MemoryStore(db, dense) as store:  # another store at the same path never reads the old file
        store.add([graph("n1", "Maya", ["Maya sings in a choir.", "Maya grows tomatoes.", "Maya swims laps."])])
        hits = store.search("Maya", "Maya choir in Lisbon", k=3)
        query = store.embedder.embed(["Maya choir in Lisbon"])[0]
        assert [round(h.score or 0, 5) for h in hits] == [
            round(float(store.embedder.embed([h.key()])[0] @ query), 5) for h in hits]
        assert hits[0].text == "Maya sings in a choir."


def test_deleting_a_user_removes_their_saved_index(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with open_store(db) as store:
        store.db.cache_min_vectors = 1
        store.add([MAYA_1, MAYA_2])
        assert store.search("Maya", "Lisbon", k=1)
    with open_store(db) as store:
        store.db.cache_min_vectors = 1
        assert store.search("Maya", "Lisbon", k=1)  # the index is loaded (or refilled) and cached
        assert len(list((tmp_path / "m.db.vectors").iterdir())) == 1
        assert store.delete(user="Maya") > 0
    assert list((tmp_path / "m.db.vectors").iterdir()) == []  # close did not write the removed vectors back
    with open_store(db) as reader, open_store(db) as writer:  # removed through another connection
        reader.db.cache_min_vectors = 1
        writer.add([MAYA_1])
        assert reader.search("Maya", "Lisbon", k=1)
        assert writer.delete(user="Maya") > 0
    assert list((tmp_path / "m.db.vectors").iterdir()) == []


def test_an_older_file_is_migrated_step_by_step_and_a_failed_step_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from promem_fast.persistence import schema

    with open_store(tmp_path / "m.db") as store:
        store.add([MAYA_1])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", SCHEMA_VERSION + 2)
    monkeypatch.setitem(schema.MIGRATIONS, SCHEMA_VERSION + 1,
                        schema._run_script("ALTER TABLE nodes ADD COLUMN note TEXT"))
    monkeypatch.setitem(schema.MIGRATIONS, SCHEMA_VERSION + 2, schema._run_script("ALTER TABLE nope ADD x INT"))
    with pytest.raises(StoreError, match="no such table: nope"):
        open_store(tmp_path / "m.db")
    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # all steps or none
    assert "note" not in [row[1] for row in db.execute("PRAGMA table_info(nodes)")]
    db.close()
    monkeypatch.setitem(schema.MIGRATIONS, SCHEMA_VERSION + 2,
                        schema._run_script("CREATE INDEX nodes_note ON nodes (note)"))
    with open_store(tmp_path / "m.db") as store:
        assert [h.text for h in store.search("Maya", "Lisbon", k=1)] == [MAYA_1.nodes[1].text]
    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 2
    assert "note" in [row[1] for row in db.execute("PRAGMA table_info(nodes)")]
    db.close()


def test_memories_tied_within_the_tolerance_come_lowest_id_first(tmp_path: Path) -> None:
    """Texts on the same topics embed to one score up to the last float bits; the tie rule (the older, lower
    id first) decides the dense ranking's order, not those bits (dense alone: fusion reorders by words)."""
    words = ["cello", "chess", "stamps", "cat", "job", "watercolor", "orchestra", "dog", "works", "paints"]
    rng = np.random.default_rng(7)
    sessions = [graph(f"s{i}", "Ann", [" ".join(rng.choice(words, 3)) + f" note {i}-{j}" for j in range(20)])
                for i in range(15)]
    with open_store(tmp_path / "m.db", "ranking.lexical=false", embedder=TopicEmbedder(),
                    update_judge="off") as store:
        store.add(sessions)
        hits = store.search("Ann", "chess job", k=60)
        runs: dict[float, list[int]] = {}
        for hit in hits:
            runs.setdefault(round(hit.score or 0.0, 4), []).append(hit.node_id)
        assert len(runs) >= 2 and all(ids == sorted(ids) for ids in runs.values())
        assert [h.node_id for h in hits[:10]] == [h.node_id for h in store.search("Ann", "chess job", k=10)]
