"""The store on PostgreSQL with pgvector against the same store in an SQLite file: the same data gives the
same answers, memory moves between them byte for byte, and each fault of a server is one clear line with
nothing half-written. A real server (``pg_url``: the pgserver wheel, or ``PROMEM_TEST_PG_URL``)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, scripted_config
from store_helpers import TopicEmbedder, graph

from promem_fast.config import EngineConfig
from promem_fast.errors import ConfigError
from promem_fast.persistence.lexical import terms
from promem_fast.persistence.pg_schema import SCHEMA_VERSION as PG_VERSION
from promem_fast.store import MemoryStore, StoreError

JOBS = [("j1", "2024-01-10T09:00:00", "Maya works as a nurse at Mercy hospital in Boston."),
        ("j2", "2024-06-10T09:00:00", "Maya works as a teacher at Lincoln school in Boston."),
        ("j3", "2025-01-10T09:00:00", "Maya works as a pilot at Delta airline in Boston.")]


def fill(store: MemoryStore) -> None:
    store.add([graph(sid, "Maya", [text, f"Maya collects stamps from place {i}."], timestamp=ts,
                     details=[["shift work"]], edges=[(1, 0, "temporal")])
               for i, (sid, ts, text) in enumerate(JOBS)])
    store.add([graph("b1", "Ben", ["Ben plays chess on Sundays.", "Ben owns a cat named Io."])], tenant="acme")


def open_store(where: str | Path, config: EngineConfig | None = None, **kwargs: object) -> MemoryStore:
    return MemoryStore(where, config or scripted_config(), embedder=TopicEmbedder(),
                       **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("first", ["sqlite", "postgresql"])
def test_export_import_into_the_other_backend_and_export_again_gives_the_same_bytes(
        first: str, tmp_path: Path, pg_url: str) -> None:
    source, target = (tmp_path / "m.db", pg_url) if first == "sqlite" else (pg_url, tmp_path / "m.db")
    with open_store(source) as store:
        fill(store)
        assert store.export(tmp_path / "a.jsonl") == 4
    with open_store(target) as copy:
        assert copy.import_(tmp_path / "a.jsonl") == 4
        copy.export(tmp_path / "b.jsonl")
        # the replaced jobs came across as replaced: only the newest is current
        assert [h.text for h in copy.search("Maya", "where does Maya work?", k=2)][0] == JOBS[2][2]
    exported = (tmp_path / "a.jsonl").read_bytes()
    assert b'"kind":"supersede"' in exported and b'"vectors":"' in exported
    assert exported == (tmp_path / "b.jsonl").read_bytes()


class AxesEmbedder:
    """One unit on the axis of each of :data:`AXES` a text names, normalised: two texts that share one of
    their two axes have a cosine of exactly 0.5, the store's ``update_min_cosine``, in real numbers (each
    backend rounds it in its own last bits: 0.49999997 in float32)."""

    dim = 8
    AXES = ("works", "boston", "denver", "chess")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for axis, word in enumerate(self.AXES):
                out[row, axis] = float(word in text.lower())
            out[row] /= np.linalg.norm(out[row])
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def test_a_cosine_exactly_at_the_update_floor_gives_the_same_update_links_on_both_backends(
        tmp_path: Path, pg_url: str) -> None:
    old = graph("j1", "Maya", ["Maya works as a nurse in Boston.", "Maya plays chess in Boston."],
                timestamp="2024-01-10T09:00:00")
    new = graph("j2", "Maya", ["Maya works as a teacher in Denver."], timestamp="2024-06-10T09:00:00")
    replaced = {}
    for where in (tmp_path / "m.db", pg_url):
        with MemoryStore(where, scripted_config(), embedder=AxesEmbedder()) as store:  # type: ignore[arg-type]
            store.add([old, new])
            replaced[str(where)] = {h.text: h.superseded_by is not None for h in store.hits("Maya", history=True)}
    on_sqlite, on_postgres = replaced.values()
    # the nurse job shares one of its two axes with the teacher job (cosine 0.5): compared, and replaced
    assert on_sqlite == on_postgres == {"Maya works as a nurse in Boston.": True, "Maya plays chess in Boston.": False,
                                        "Maya works as a teacher in Denver.": False}


def test_the_same_search_gives_the_same_top_k_on_both_backends(tmp_path: Path, pg_url: str) -> None:
    """Exact dense search on both: the same ids in the same order (a tie, scores within TIE_TOLERANCE, goes
    to the lower id on both). The lexical side is off: its scores differ by backend (SQLite's BM25 against
    PostgreSQL's ``ts_rank``), so the fused order of the hybrid ranking is not the same on both."""
    rng = np.random.default_rng(7)
    words = ["cello", "chess", "stamps", "cat", "job", "watercolor", "orchestra", "dog", "works", "paints"]
    sessions = [graph(f"s{i}", "Ann", [" ".join(rng.choice(words, 3)) + f" note {i}-{j}" for j in range(20)],
                      timestamp=f"2024-01-{1 + i % 28:02d}T10:00:00") for i in range(15)]
    queries = [" ".join(rng.choice(words, 2)) for _ in range(25)]
    found = {}
    for where in (tmp_path / "m.db", pg_url):
        with open_store(where, scripted_config().with_overrides(["ranking.lexical=false"]),
                        update_judge="off") as store:
            store.add(sessions)
            found[str(where)] = [[h.text for h in store.search("Ann", q, k=10)] for q in queries]
    a, b = found.values()
    assert a == b and all(len(top) == 10 for top in a)


def test_lexical_search_finds_the_same_nodes_on_both_backends(tmp_path: Path, pg_url: str) -> None:
    matched = {}
    for where in (tmp_path / "m.db", pg_url):
        with open_store(where) as store:
            fill(store)
            user = store.user_id("default", "Maya")
            assert user is not None
            texts = {h.node_id: h.text for h in store.hits("Maya", history=True)}
            matched[str(where)] = sorted(texts[i] for i, _ in store.db.lexical(user, terms("Teacher, Lincoln!"), 10))
            assert store.db.lexical(user, ["chess"], 10) == []  # Ben's word, another tenant's user
    a, b = matched.values()
    assert a == b == [JOBS[1][2]]


def test_delete_on_postgresql_removes_the_rows(pg_url: str) -> None:
    import psycopg

    with open_store(pg_url) as store:
        fill(store)
        store.delete(tenant="acme", user="Ben")
        assert store.users(tenant="acme") == []
    with psycopg.connect(pg_url) as conn:
        left = conn.execute("SELECT count(*) FROM nodes WHERE text LIKE '%chess%' OR text LIKE '%Io.%'").fetchone()
        assert left == (0,)


def test_a_memory_deleted_on_postgresql_takes_its_details_with_it(pg_url: str) -> None:
    """The details anchored to the deleted memory alone leave the database; one it shares with a memory that
    stays is still that memory's."""
    import psycopg

    session = graph("d1", "Ann", ["Ann owns a ring.", "Ann plays the oboe."],
                    details=[["Zanzibarite stone", "bought in Porto"], ["cane reeds"]])
    session.nodes[1].details = [1, 2]  # "bought in Porto" is anchored to both memories
    with open_store(pg_url, update_judge="off") as store:
        store.add([session])
        ring = next(h.node_id for h in store.hits("Ann") if h.text == "Ann owns a ring.")
        assert store.delete(user="Ann", node=ring) == 1
        assert [(h.text, h.details) for h in store.hits("Ann")] == [("Ann plays the oboe.",
                                                                     ["bought in Porto", "cane reeds"])]
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM details WHERE text LIKE '%Zanzibarite%' OR data LIKE "
                            "'%Zanzibarite%'").fetchone() == (0,)


def test_a_wrong_url_is_one_line_naming_the_server_without_its_password(pg_url: str) -> None:
    bad = "postgresql://promem:s3cret@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError) as caught:
        open_store(bad)
    message = str(caught.value)
    assert message.startswith("postgresql://promem:***@127.0.0.1:1/nowhere: cannot connect")
    assert "s3cret" not in message and "\n" not in message


def test_a_database_of_a_newer_schema_is_refused_and_left_as_it_was(pg_url: str) -> None:
    import psycopg

    with open_store(pg_url) as store:
        fill(store)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"schema version 99 was written by a newer promem_fast"):
        open_store(pg_url)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (4,)


def test_a_server_without_usable_pgvector_is_named(pg_server: object, pg_url: str) -> None:
    """A role that may not create the extension, in a database that lacks it: what a server without
    pgvector installed answers too."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS promem_plain")
        conn.execute("CREATE ROLE promem_plain LOGIN")
    plain = pg_url.replace("postgresql://postgres:", "postgresql://promem_plain:", 1)
    with pytest.raises(StoreError, match=r"the server has no usable pgvector extension \(.*\); install pgvector"):
        open_store(plain)


def test_a_connection_dropped_inside_a_write_leaves_nothing_half_written(pg_url: str) -> None:
    import psycopg

    with open_store(pg_url) as store:
        fill(store)

        def drop_connection(db: object, tenant: str, g: object) -> bool:
            (pid,) = db.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[attr-defined]
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return True

        store.write_guard = drop_connection
        with pytest.raises(StoreError, match=r"connection lost .*rolled back, nothing of it is stored"):
            store.add([graph("late", "Maya", ["Maya moved to Denver."])])
        store.write_guard = None
        assert store.sessions("Maya") == ["j1", "j2", "j3"]  # the pool replaced the dropped connection
        assert store.add([graph("late", "Maya", ["Maya moved to Denver."])]) == 1


def promem(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promem_fast.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_the_command_line_takes_the_database_from_promem_db_url(tmp_path: Path, pg_url: str) -> None:
    with MemoryStore(tmp_path / "m.db", scripted_config(), profile="scripted") as store:  # the CLI's embedder
        fill(store)
        store.export(tmp_path / "a.jsonl")
        expected = store.search("Maya", "where does Maya work?", k=1)[0].text
    env = {"PROMEM_DB_URL": pg_url}
    first = promem("migrate", env=env)
    assert first.returncode == 0 and first.stdout.strip().endswith(f"schema version 0 -> {PG_VERSION}"), first.stderr
    assert promem("migrate", env=env).stdout.strip().endswith(f"schema version {PG_VERSION}, up to date")
    done = promem("import", str(tmp_path / "a.jsonl"), "--profile", "scripted", env=env)
    assert done.returncode == 0 and "imported 4 sessions" in done.stdout, done.stderr
    found = promem("search", "where does Maya work?", "--user", "Maya", "--json", env=env)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout.splitlines()[0])["memory"] == expected
    wrong = promem("search", "job", "--user", "Maya", "--db", "postgresql://me:pw@127.0.0.1:1/x")
    assert wrong.returncode == 2 and wrong.stderr.strip() == wrong.stderr.strip().splitlines()[0]
    assert wrong.stderr.startswith("promem: postgresql://me:***@127.0.0.1:1/x: cannot connect")


def test_a_version_2_database_gains_session_metadata_and_stemmed_full_text(pg_url: str) -> None:
    """The step to version 3 on PostgreSQL: sessions get an empty metadata object (filters then run), and the
    full text of the nodes already there is stemmed, so "working" finds "works" ("simple" kept words whole)."""
    import psycopg

    from promem_fast.persistence.pg_schema import migrate

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        migrate(conn, "test", read_only=False, target=2)
        conn.execute("INSERT INTO tenants (name) VALUES ('default')")
        conn.execute("INSERT INTO users (tenant_id, name) VALUES (1, 'Maya')")
        conn.execute("INSERT INTO sessions (user_id, session_id, mode, events, stats) "
                     "VALUES (1, 'j1', 'promem', '[]', '{}')")
        conn.execute("INSERT INTO nodes (session_pk, user_id, local_id, text, data) VALUES (1, 1, 0, %s, %s)",
                     (JOBS[0][2], json.dumps({"text": JOBS[0][2]})))
    with open_store(pg_url) as store:
        assert [i for i, _ in store.db.lexical(1, terms("Who is working?"), 5)] == [1]
        hits = store.db.execute("SELECT metadata FROM sessions").fetchall()
        assert [tuple(h) for h in hits] == [("{}",)]
        found = store.search("Maya", "nurse", k=5, filters={"topic": {"ne": "work"}})
        assert [h.text for h in found] == [JOBS[0][2]]
        assert store.search("Maya", "nurse", k=5, filters={"topic": "work"}) == []


def test_a_search_right_after_an_import_walks_the_vector_index(tmp_path: Path, pg_url: str) -> None:
    """An import fills the tables faster than autovacuum gathers statistics; without them PostgreSQL plans a
    user's nearest-vector query as a sort of all the user's rows (at 100,000 rows, tens of times slower). After
    the import the plan walks the HNSW index."""
    config = scripted_config()
    config.search_approximate_min = 1  # the index is asked for at every size, as for a large user
    with open_store(tmp_path / "m.db", update_judge="off") as source:
        source.add([graph(f"s{s}", "Maya", [f"Maya noted item {s}-{i} about the harbour and the garden"
                                            for i in range(100)]) for s in range(12)])
        source.export(tmp_path / "a.jsonl")
    with open_store(pg_url, config) as copy:
        assert copy.import_(tmp_path / "a.jsonl") == 12
        query = copy.db.encode_vector(TopicEmbedder().embed(["the harbour"])[0])
        plan = "\n".join(row[0] for row in copy.db.execute(
            "EXPLAIN SELECT id FROM nodes WHERE user_id = 1 AND vector IS NOT NULL ORDER BY vector <=> ?::vector "
            "LIMIT 26", (query,)).fetchall())
        assert "Index Scan using nodes_vector" in plan, plan


def test_pgvector_search_width_follows_the_users_size_and_the_configuration(pg_url: str) -> None:
    """``hnsw.ef_search`` decides the index's recall and its time: measured, 100 finds the exact top 10 up to
    100K vectors and 400 gains recall only near 1M (bench_pg_search); a query asking more rows than the width
    gets a width that can return them; the configured width caps it, and a value pgvector would reject is
    refused up front."""
    from promem_fast.persistence import rows
    from promem_fast.persistence.postgres import EF_SEARCH, PostgresPersistence, search_width

    sizes = (10, 50_000, 100_000, 1_000_000, 5_000_000)
    assert [search_width(n, 400, 26) for n in sizes] == [100, 100, 100, 400, 400]
    assert 100 < search_width(300_000, 400, 26) < 400
    assert search_width(50_000, 400, 150) == 150 and search_width(50_000, 400, 5000) == 1000
    assert search_width(2_000_000, 40, 26) == 40 and search_width(50_000, 40, 26) == 40

    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    filler = PostgresPersistence(pg_url)
    try:
        with filler.transaction() as tx:
            user = rows.ensure_user(tx, "t", "w")
            rows.insert_session(tx, user, {"session_id": "s", "timestamp": None, "mode": "promem", "edges": [],
                                           "nodes": [{"id": i, "text": f"memory {i}", "turn_ids": [], "details": []}
                                                     for i in range(len(vectors))],
                                           "details": [], "events": [], "stats": {}}, vectors)
        filler.dim_recorded(8)
        filler.analyze()
    finally:
        filler.close()
    for configured, k, expected in ((None, 10, "100"), (37, 10, "37"), (None, 150, "166")):
        db = PostgresPersistence(pg_url, approximate_min=1, ef_search=configured or EF_SEARCH)
        try:
            with db.snapshot():  # the search's width holds to the end of the transaction it ran in
                ids, _ = db.nearest(user, vectors[0], k)
                used = db.execute("SHOW hnsw.ef_search").fetchone()[0]
            assert (used, len(ids)) == (expected, k)
            assert db.execute("SHOW hnsw.ef_search").fetchone()[0] == "40"  # pgvector's default stays outside
        finally:
            db.close()
    config = dataclasses.replace(scripted_config(), pg_ef_search=37)
    with open_store(pg_url, config) as store:  # the engine configuration reaches the store's persistence
        assert store.db.ef_search == 37
    with pytest.raises(StoreError, match="ef_search 0: pgvector accepts 1 to 1000"):
        PostgresPersistence(pg_url, ef_search=0)
    with pytest.raises(StoreError, match="narrow_width 0: pgvector accepts 1 to 1000"):
        PostgresPersistence(pg_url, narrow_width=0)
    with pytest.raises(ConfigError, match="pg_ef_search must lie in 1..1000"):
        dataclasses.replace(scripted_config(), pg_ef_search=1001).validate()


def _index_options(url: str) -> tuple[list[str] | None, list[str]]:
    """The vector index's storage options as PostgreSQL's catalogue holds them, and every index on ``nodes``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'nodes_vector'").fetchone()
        names = [r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'nodes' "
                                            "ORDER BY indexname").fetchall()]
    return (None if row is None else row[0]), names


def test_a_new_stores_vector_index_is_built_to_find_the_exact_top_k_at_a_million(pg_url: str) -> None:
    """pgvector's own build (m 16, ef_construction 64) found 0.94 of the exact top 10 at a 1M user at any
    search width; a new store builds with ef_construction 128 (0.997 there), as the README's Deployment says."""
    config = scripted_config()
    with open_store(pg_url, config) as store:
        fill(store)
        assert store.db.index_build() == {"m": 16, "ef_construction": 128}
    assert _index_options(pg_url)[0] == ["m=16", "ef_construction=128"]


def test_migrate_builds_the_vector_index_again_with_other_hnsw_parameters(tmp_path: Path, pg_url: str) -> None:
    """pgvector's build parameters bound what a search at any width can find in a large user (bench_pg_search);
    ``promem migrate --hnsw-m/--hnsw-ef-construction`` records new ones and builds the index again beside the
    old one, after which searches find what they found before; an index made later uses them too."""
    import psycopg

    env = {"PROMEM_DB_URL": pg_url}
    # no vectors yet: the parameters are recorded, and the first fill's index is built with them
    first = promem("migrate", "--hnsw-m", "8", "--hnsw-ef-construction", "40", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1].endswith("no vectors indexed yet: the index will be built with m = 8, "
                                                  "ef_construction = 40")
    config = scripted_config()
    config.search_approximate_min = 1  # every search walks the index
    with open_store(pg_url, config) as store:
        fill(store)
        before = [h.text for h in store.search("Maya", "where does Maya work?", k=3)]
    assert _index_options(pg_url)[0] == ["m=8", "ef_construction=40"]
    # built again, while the old index serves; the half-built one of an interrupted try is dropped first
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE INDEX nodes_vector_next ON nodes (id)")
    again = promem("migrate", "--hnsw-m", "12", "--hnsw-ef-construction", "48", env=env)
    assert again.returncode == 0, again.stderr
    assert "vector index built again in" in again.stdout and "with m = 12, ef_construction = 48" in again.stdout
    options, indexes = _index_options(pg_url)
    assert options == ["m=12", "ef_construction=48"] and "nodes_vector_next" not in indexes
    with open_store(pg_url, config) as store:
        assert [h.text for h in store.search("Maya", "where does Maya work?", k=3)] == before
        assert store.db.index_build() == {"m": 12, "ef_construction": 48}
    # faults: one line each, the store unchanged
    for args, message in ((("--hnsw-m", "12"), "--hnsw-m and --hnsw-ef-construction go together"),
                          (("--hnsw-m", "20", "--hnsw-ef-construction", "30"),
                           "hnsw ef_construction 30: pgvector accepts 4 to 1000, and at least twice m (40)"),
                          (("--hnsw-m", "1", "--hnsw-ef-construction", "30"), "hnsw m 1: pgvector accepts 2 to 100")):
        wrong = promem("migrate", *args, env=env)
        assert wrong.returncode == 2 and message in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    assert _index_options(pg_url)[0] == ["m=12", "ef_construction=48"]
    sqlite = promem("migrate", "--db", str(tmp_path / "m.db"), "--hnsw-m", "8", "--hnsw-ef-construction", "40")
    assert sqlite.returncode == 2 and "HNSW build parameters are pgvector's, for a PostgreSQL store" in sqlite.stderr
    assert not (tmp_path / "m.db").exists()  # refused before anything was made
