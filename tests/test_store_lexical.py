"""The store's lexical side: its FTS5 table follows the nodes (add, delete, cascades), an older store gains it on
open, a deleted memory's words leave the file, and search fuses it with the vectors by the documented rule.

The FTS5 table's own behaviour (rows per node with their details, the migration, the rewrite on delete) is
SQLite's and read from the file; the ranking tests run on both backends (PostgreSQL ranks its ``tsvector`` of
the memory's text, details and source with ``ts_rank``, SQLite its FTS5 columns with BM25; both weigh the
details and the source at half the text).

Memories are hand-written; :class:`TopicEmbedder` puts texts on the topics the tests choose, so which memory
the dense side ranks first is known without running the code under test.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import scripted_config
from store_helpers import TopicEmbedder, graph
from promem_fast.config import EngineConfig
from promem_fast.store import MemoryStore
from promem_fast.persistence.lexical import DROP_FTS
from promem_fast.persistence.pg_schema import SCHEMA_VERSION as PG_VERSION
from promem_fast.persistence.schema import MIGRATIONS, SCHEMA_VERSION
from promem_fast.types import MemoryGraph

FTS_VERSION = 4
"""The schema version that added the full-text table."""

ANN_1 = graph("a1", "Ann", ["Ann works as a nurse in Leeds.", "Ann plays chess on Sundays."],
              details=[["night shifts"], ["club in Headingley"]], timestamp="2025-03-10T09:00:00")
ANN_2 = graph("a2", "Ann", ["Ann feeds a quokka at the zoo.", "Ann works on weekends too."],
              timestamp="2025-05-20T09:00:00")
BEN_1 = graph("b1", "Ben", ["Ben collects stamps from Peru."], timestamp="2025-03-11T09:00:00")


def fts(db: Path) -> dict[str, list[tuple[str, str | None]]]:
    """The full-text rows, read straight from the file: user → (text, details) of each of their nodes."""
    raw = sqlite3.connect(db)
    try:
        rows: dict[str, list[tuple[str, str | None]]] = {}
        for user, text, details in raw.execute(
                "SELECT u.name, f.text, f.details FROM memory_fts f JOIN nodes n ON n.id = f.rowid "
                "JOIN users u ON u.id = n.user_id ORDER BY f.rowid"):
            rows.setdefault(user, []).append((text, details))
        orphans = raw.execute("SELECT count(*) FROM memory_fts WHERE rowid NOT IN (SELECT id FROM nodes)").fetchone()
        assert orphans == (0,), "full-text rows left behind by deleted nodes"
        return rows
    finally:
        raw.close()


def open_store(path: Path | str, config: EngineConfig | None = None) -> MemoryStore:
    return MemoryStore(path, config or scripted_config(), embedder=TopicEmbedder(), update_judge="off")


def test_the_full_text_table_follows_adds_and_every_kind_of_delete(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with open_store(db) as store:
        store.add([ANN_1, ANN_2, BEN_1])
        assert fts(db) == {
            "Ann": [("Ann works as a nurse in Leeds.", "night shifts"),
                        ("Ann plays chess on Sundays.", "club in Headingley"),
                        ("Ann feeds a quokka at the zoo.", None), ("Ann works on weekends too.", None)],
            "Ben": [("Ben collects stamps from Peru.", None)]}
        chess = next(h.node_id for h in store.hits("Ann") if "chess" in h.text)
        store.delete(user="Ann", node=chess)
        assert [t for t, _ in fts(db)["Ann"]] == ["Ann works as a nurse in Leeds.",
                                                     "Ann feeds a quokka at the zoo.", "Ann works on weekends too."]
        store.delete(user="Ann", session="a2")  # the session's nodes go by cascade
        assert [t for t, _ in fts(db)["Ann"]] == ["Ann works as a nurse in Leeds."]
        store.delete(user="Ann")
        assert fts(db) == {"Ben": [("Ben collects stamps from Peru.", None)]}


def on_disk(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())


def test_a_deleted_memorys_words_leave_the_file(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with open_store(db) as store:
        store.add([ANN_1, ANN_2, BEN_1])
    # the index keeps words lower-cased and stemmed ("quokka" is its own stem), apart from the text itself
    assert on_disk(db).count(b"quokka") > on_disk(db).count(b"Ann feeds a quokka")
    with open_store(db) as store:
        store.delete(user="Ann", session="a2")
        assert b"quokka" not in on_disk(db)
    assert b"quokka" not in on_disk(db)


def test_an_older_store_gains_the_table_on_open(tmp_path: Path) -> None:
    from promem_fast.persistence.connection import open_db
    from promem_fast.persistence.rows import ensure_user, graph_record, insert_session
    from promem_fast.persistence.sqlite import SqlitePersistence

    class Raw:  # the row functions over the bare connection: no migration on open
        dialect = "sqlite"
        encode_vector = staticmethod(SqlitePersistence.encode_vector)

        def __init__(self, conn: sqlite3.Connection) -> None:
            self.execute, self.executemany = conn.execute, conn.executemany

    db = tmp_path / "old.db"
    raw = open_db(db)
    for step in range(1, FTS_VERSION):  # the file as the version before the full-text table wrote it
        MIGRATIONS[step](raw)
    raw.execute(f"PRAGMA user_version = {FTS_VERSION - 1}")
    user = ensure_user(Raw(raw), "default", "Ann")  # type: ignore[arg-type]
    raw.execute("ALTER TABLE sessions ADD COLUMN shown INTEGER")  # what today's row writer fills (version 8)
    raw.execute("ALTER TABLE nodes ADD COLUMN metadata TEXT")  # and (version 9)
    insert_session(Raw(raw), user, graph_record(ANN_1),  # type: ignore[arg-type]
                   TopicEmbedder().embed([n.text for n in ANN_1.nodes]))
    raw.execute("ALTER TABLE sessions DROP COLUMN shown")
    raw.execute("ALTER TABLE nodes DROP COLUMN metadata")
    raw.commit()
    raw.close()
    lexical = scripted_config().with_overrides(["ranking.dense=false"])  # only the full-text side answers
    with open_store(db, lexical) as store:
        hits = store.search("Ann", "Where is Headingley?", k=5)
    assert [h.text for h in hits] == ["Ann plays chess on Sundays."]  # found by its detail's word
    assert fts(db)["Ann"][0] == ("Ann works as a nurse in Leeds.", "night shifts")


def said(session_id: str, user: str, memories: dict[str, str], timestamp: str = "2025-06-02T09:00:00"
         ) -> MemoryGraph:
    """A graph of ``memory text → source`` (the owner's words it was taken from, as extraction keeps them)."""
    made = graph(session_id, user, list(memories), timestamp=timestamp)
    for node, source in zip(made.nodes, memories.values(), strict=True):
        node.source = source
    return made


HIKES = said("h1", "Ann", {"Ann enjoys hiking.": "I spent the weekend on the trails above Tahoe.",
                           "Ann has a sister.": "My sister Meg lives in Oslo.",
                           "Ann visited Oslo in May.": "We flew up to see the fjords."})


POTTERY = said("p1", "Ann", {"Ann made a bowl.": "It came out lopsided but I love it.",
                             "Ann likes pottery.": "The pottery studio is my happy place."})
POTTERY.nodes[0].exchange = "How was the ceramics class on Tuesday?"  # what the other speaker asked first


@pytest.mark.parametrize(("said_in", "made", "question", "found"), [
    # "trails" and "Tahoe" were said by Ann, not kept in the memory's own words
    ("source", HIKES, "Which trails did Ann walk near Tahoe?", "Ann enjoys hiking."),
    # "ceramics" is in the question Ann answered, in neither memory nor its source
    ("exchange", POTTERY, "What did Ann make in the ceramics class?", "Ann made a bowl."),
])
def test_a_memory_is_found_by_the_words_it_was_said_in(store_at: str, said_in: str, made: MemoryGraph,
                                                       question: str, found: str) -> None:
    lexical = scripted_config().with_overrides(["ranking.dense=false"])  # only the full-text side answers
    with open_store(store_at, lexical) as store:
        store.add([made])
        assert [h.text for h in store.search("Ann", question, k=5)] == [found]
    with open_store(store_at, lexical.with_overrides([f"ranking.{said_in}=false"])) as store:
        assert store.search("Ann", question, k=5) == []


def test_a_word_of_a_memorys_own_text_outranks_the_same_word_where_it_was_said(store_at: str) -> None:
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(store_at, lexical) as store:
        store.add([HIKES, POTTERY])
        assert [h.text for h in store.search("Ann", "Oslo", k=5)] == ["Ann visited Oslo in May.",
                                                                      "Ann has a sister."]
    with open_store(store_at, lexical.with_overrides(["ranking.source=false"])) as store:
        assert [h.text for h in store.search("Ann", "Oslo", k=5)] == ["Ann visited Oslo in May."]
    with open_store(store_at, lexical.with_overrides(["ranking.exchange=false"])) as store:
        # the owner's own words still count with the exchange left out
        assert [h.text for h in store.search("Ann", "Which studio?", k=5)] == ["Ann likes pottery."]


def test_a_store_of_version_6_reads_its_memories_exchanges_after_the_migration(tmp_path: Path) -> None:
    db = tmp_path / "v6.db"
    with open_store(db) as store:
        store.add([POTTERY])
    as_version(db, 6, {"source": "json_extract(data, '$.source')"})  # text, details and source
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(db, lexical) as store:
        assert [h.text for h in store.search("Ann", "the ceramics class", k=5)] == ["Ann made a bowl."]
    assert migrated_column(db, "exchange") == [("How was the ceramics class on Tuesday?",), (None,)]


def as_version(db: Path, version: int, more: dict[str, str]) -> None:
    """Make ``db``'s full-text table the one ``version`` kept: text, details (empty) and the ``more`` columns
    (name → the SQL filling it from ``nodes``), and mark the file that version."""
    raw = sqlite3.connect(db)
    try:
        for statement in DROP_FTS:
            raw.execute(statement)
        columns = ", ".join(["text", "details", *more])
        raw.execute(f"CREATE VIRTUAL TABLE memory_fts USING fts5({columns}, tokenize = 'porter unicode61 "
                    "remove_diacritics 2')")
        raw.execute(f"INSERT INTO memory_fts (rowid, {columns}) SELECT id, {', '.join(['text', 'NULL', *more.values()])}"
                    " FROM nodes")
        raw.execute("DROP INDEX sessions_hidden")  # nor what readers are shown (version 8)
        raw.execute("ALTER TABLE sessions DROP COLUMN shown")
        raw.execute("DROP INDEX nodes_held")
        raw.execute("ALTER TABLE nodes DROP COLUMN held")
        raw.execute("ALTER TABLE nodes DROP COLUMN metadata")  # nor a memory's own metadata (version 9)
        raw.execute(f"PRAGMA user_version = {version}")
        raw.commit()
    finally:
        raw.close()


def migrated_column(db: Path, column: str) -> list[tuple[str | None]]:
    """A full-text column's rows once the store has opened the file, checking it is now at the current version."""
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        return raw.execute(f"SELECT {column} FROM memory_fts ORDER BY rowid").fetchall()
    finally:
        raw.close()


def test_a_memory_is_found_by_its_details_words_on_both_backends(store_at: str) -> None:
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(store_at, lexical) as store:
        store.add([ANN_1])
        assert [h.text for h in store.search("Ann", "Where is Headingley?", k=5)] == ["Ann plays chess on Sundays."]
    with open_store(store_at, lexical.with_overrides(["ranking.source=false"])) as store:  # details stay
        assert [h.text for h in store.search("Ann", "Where is Headingley?", k=5)] == ["Ann plays chess on Sundays."]


@pytest.mark.parametrize(("said_in", "stem"), [("source", b"taho"), ("exchange", b"ceram")])
def test_a_deleted_memorys_source_and_exchange_words_leave_the_file(tmp_path: Path, said_in: str, stem: bytes
                                                                    ) -> None:
    made = HIKES if said_in == "source" else POTTERY  # "Tahoe" in a source, "ceramics" in an exchange
    db = tmp_path / "m.db"
    with open_store(db) as store:
        store.add([made, BEN_1])
    assert stem in on_disk(db)  # the index's own stem, lower-cased, beside the node's JSON
    with open_store(db) as store:
        store.delete(user="Ann", session=made.session_id)
    assert stem not in on_disk(db).lower()


def test_a_store_of_version_5_reads_its_memories_sources_after_the_migration(tmp_path: Path) -> None:
    db = tmp_path / "v5.db"
    with open_store(db) as store:
        store.add([HIKES])
    as_version(db, 5, {})  # the full-text table as version 5 kept it: text and details only
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(db, lexical) as store:
        assert [h.text for h in store.search("Ann", "Tahoe trails", k=5)] == ["Ann enjoys hiking."]
    assert migrated_column(db, "source") == [
        ("I spent the weekend on the trails above Tahoe.",), ("My sister Meg lives in Oslo.",),
        ("We flew up to see the fjords.",)]


def test_a_postgresql_store_of_version_4_reads_its_memories_sources_after_the_migration(pg_url: str) -> None:
    import psycopg

    with open_store(pg_url) as store:
        store.add([HIKES, ANN_1, POTTERY])
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the words column as version 4 made it: text only
        conn.execute("DROP TRIGGER nodes_words ON nodes")
        conn.execute("DROP FUNCTION nodes_words()")
        conn.execute("DROP INDEX nodes_words")
        conn.execute("ALTER TABLE nodes DROP COLUMN words")
        conn.execute("ALTER TABLE nodes ADD COLUMN words tsvector GENERATED ALWAYS AS "
                     "(to_tsvector('english', text)) STORED")
        conn.execute("CREATE INDEX nodes_words ON nodes USING gin (words)")
        conn.execute("DROP INDEX sessions_hidden")  # nor what readers are shown (version 7)
        conn.execute("ALTER TABLE sessions DROP COLUMN shown")
        conn.execute("DROP INDEX nodes_held")
        conn.execute("ALTER TABLE nodes DROP COLUMN held")
        conn.execute("ALTER TABLE nodes DROP COLUMN metadata")  # nor a memory's own metadata (version 8)
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(pg_url, lexical) as store:
        assert [h.text for h in store.search("Ann", "Tahoe trails", k=5)] == ["Ann enjoys hiking."]
        assert [h.text for h in store.search("Ann", "Headingley", k=5)] == ["Ann plays chess on Sundays."]
        assert [h.text for h in store.search("Ann", "ceramics", k=5)] == ["Ann made a bowl."]  # its exchange
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(PG_VERSION),)


def test_a_postgresql_store_of_version_5_reads_its_memories_exchanges_after_the_migration(pg_url: str) -> None:
    import psycopg

    with open_store(pg_url) as store:
        store.add([HIKES, POTTERY])
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the words as version 5 kept them: no exchange
        conn.execute("UPDATE nodes SET words = setweight(to_tsvector('english', text), 'A') || "
                     "setweight(to_tsvector('english', coalesce(data::jsonb ->> 'source', '')), 'B')")
        conn.execute("DROP INDEX sessions_hidden")  # nor what readers are shown (version 7)
        conn.execute("ALTER TABLE sessions DROP COLUMN shown")
        conn.execute("DROP INDEX nodes_held")
        conn.execute("ALTER TABLE nodes DROP COLUMN held")
        conn.execute("ALTER TABLE nodes DROP COLUMN metadata")  # nor a memory's own metadata (version 8)
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(pg_url, lexical) as store:
        assert [h.text for h in store.search("Ann", "ceramics", k=5)] == ["Ann made a bowl."]
        assert [h.text for h in store.search("Ann", "Tahoe trails", k=5)] == ["Ann enjoys hiking."]


def test_search_fuses_the_word_a_question_shares_with_the_vectors(store_at: str) -> None:
    db = store_at
    question = "Which job keeps her busy on weekends?"
    with open_store(db) as store:
        store.add([ANN_1, ANN_2])
        hybrid = [h.text for h in store.search("Ann", question, k=2)]
    with open_store(db, scripted_config().with_overrides(["ranking.lexical=false"])) as store:
        alone = [h.text for h in store.search("Ann", question, k=2)]
    # "job" puts the question on the job topic, where both job memories tie: the older one first, alone;
    # "weekends" is a word of the newer one only, so BM25 ranks it first and the fusion (1/61 + 1/62 against
    # the older one's 1/61) puts it on top
    assert alone == ["Ann works as a nurse in Leeds.", "Ann works on weekends too."]
    assert hybrid == ["Ann works on weekends too.", "Ann works as a nurse in Leeds."]


def test_the_owners_name_is_not_a_search_word(store_at: str) -> None:
    lexical = scripted_config().with_overrides(["ranking.dense=false"])
    with open_store(store_at, lexical) as store:
        store.add([ANN_1, ANN_2])
        assert store.search("Ann", "Ann", k=5) == []  # in every memory of hers: it tells them apart not at all
        assert [h.text for h in store.search("Ann", "Ann's quokka", k=5)] == ["Ann feeds a quokka at the zoo."]


def test_a_month_the_question_names_ranks_what_was_said_then_first(store_at: str) -> None:
    with open_store(store_at) as store:
        store.add([ANN_1, ANN_2])
        # both job memories are equally near "work"; the one said in May 2025 comes first when May is asked
        may = [h.text for h in store.search("Ann", "What about work in May 2025?", k=2)]
        march = [h.text for h in store.search("Ann", "What about work in March 2025?", k=2)]
    assert may[0] == "Ann works on weekends too." and march[0] == "Ann works as a nurse in Leeds."


def test_a_memory_said_again_is_shown_once_and_a_fact_differing_by_a_number_is_not_a_repeat(tmp_path: Path) -> None:
    again = graph("a3", "Ann", ["Ann feeds a quokka at the zoo.", "Ann feeds a quokka at 2 zoos."],
                  timestamp="2025-06-01T09:00:00")
    with open_store(tmp_path / "m.db") as store:
        store.add([ANN_2, again])
        found = [h.text for h in store.search("Ann", "quokka", k=3)]
    with open_store(tmp_path / "m.db", scripted_config().with_overrides(["ranking.dedup=false"])) as store:
        every = [h.text for h in store.search("Ann", "quokka", k=3)]
    # the same sentence twice (cosine 1, the same words) is one memory to read; "2 zoos" says more
    # (its slot goes to the next memory)
    assert (found.count("Ann feeds a quokka at the zoo."), every.count("Ann feeds a quokka at the zoo.")) == (1, 2)
    assert "Ann feeds a quokka at 2 zoos." in found and "Ann feeds a quokka at 2 zoos." in every


COFFEE = graph("c1", "Ann", ["Ann drinks coffee at dawn.", "Ann buys coffee beans in Leeds.",
                             "Ann spilled coffee on her laptop.", "Ann feeds a quokka at the zoo."],
               timestamp="2025-04-01T09:00:00")


def test_counting_a_words_memories_stops_past_the_budget(tmp_path: Path) -> None:
    from promem_fast.persistence.lexical import rows_holding

    db = tmp_path / "m.db"
    many = graph("c2", "Ben", [f"Ben brews coffee number {i}." for i in range(12)], details=[["a quokka mug"]])
    with open_store(db) as store:
        store.add([COFFEE, many])
    raw = sqlite3.connect(db)
    try:
        # "coffee" is in 3 of Ann's memories and 12 of Ben's: counted over every user, exactly up to the budget
        assert rows_holding(raw, "coffee", budget=20) == 15
        # past the budget the count stops one row further: the word is common, however many more hold it
        assert rows_holding(raw, "coffee", budget=5) == 6
        # Ann's zoo memory and the detail anchored to Ben's first memory; "zebra" is in none
        assert (rows_holding(raw, "quokka", budget=5), rows_holding(raw, "zebra", budget=5)) == (2, 0)
    finally:
        raw.close()


def test_a_word_in_most_memories_leaves_the_ranking_to_the_rare_ones(store_at: str) -> None:
    from promem_fast.persistence.lexical import POSTINGS_BUDGET

    many = graph("c3", "Ann", [f"Ann drank coffee on day {i}." for i in range(POSTINGS_BUDGET + 1)]
                 + ["Ann feeds a quokka at the zoo."], timestamp="2025-04-02T09:00:00")
    lexical = scripted_config().with_overrides(["ranking.dense=false"])  # only the full-text side answers
    with open_store(store_at, lexical) as store:
        store.add([many])
        # "coffee" is in more of her memories than a search lets the full-text side score: it is left out, so
        # the search costs what the rare words cost, and the quokka alone ranks
        assert store.search("Ann", "coffee", k=5) == []
        assert [h.text for h in store.search("Ann", "coffee for the quokka", k=5)] == [
            "Ann feeds a quokka at the zoo."]


def test_the_day_a_question_names_is_a_window_not_a_search_word(store_at: str) -> None:
    moved = graph("a4", "Ann", ["Ann moved to York in May 2025.", "Ann drinks green tea."],
                  timestamp="2025-06-02T09:00:00")
    lexical = scripted_config().with_overrides(["ranking.dense=false"])  # only the full-text side answers
    question = "What does Ann drink as of May 20, 2025?"
    with open_store(store_at, lexical) as store:
        store.add([moved])
        found = [h.text for h in store.search("Ann", question, k=5)]
    with open_store(store_at, lexical.with_overrides(["ranking.when=false"])) as store:
        literal = [h.text for h in store.search("Ann", question, k=5)]
    # the window reads the day; "May" and "2025" would otherwise match the move, which says nothing on drinks
    assert found == ["Ann drinks green tea."]
    assert sorted(literal) == ["Ann drinks green tea.", "Ann moved to York in May 2025."]  # read as words


def test_the_time_phrases_the_window_reads_leave_the_question() -> None:
    from promem_fast.store.when import without_times

    assert without_times("What is Ann's favourite tea as of Mar 23, 2032?") == "What is Ann's favourite tea?"
    assert without_times("What did Melanie paint last May?") == "What did Melanie paint?"
    assert without_times("Where did she go two weeks ago?") == "Where did she go?"
    assert without_times("What did Ann cook on 8 May 2023 and in 2024?") == "What did Ann cook and?"
    # the bound word goes with its date: "prior" or "till" left behind would be searched as topic words
    assert without_times("Did he feel optimistic before June 2029?") == "Did he feel optimistic?"
    assert without_times("What did she paint prior to March 2023?") == "What did she paint?"
    assert without_times("Where did he live till 2030?") == "Where did he live?"
    assert without_times("Which car did she drive up to the 3rd May, 2031?") == "Which car did she drive?"
    # nothing left but the time: the question stays whole, so the dense side still has text to embed
    assert without_times("May 2023?") == "May 2023?"
    assert without_times("Why did Caroline march in the parade?") == "Why did Caroline march in the parade?"
