"""Every foreign key of the store has an index on its child columns, on both backends.

Deleting a parent row runs the key's action (cascade, set null) on its children, and the database finds the
children by the child column: without an index that leads with it, every delete reads the whole child table
(SQLite's documentation on foreign keys, "Required and Suggested Database Indexes"; PostgreSQL's on
constraints say the same). A node of a million-memory user pointed at by ``merged_into`` without one made
deleting a 40-memory session read the node table 40 times.
"""

from __future__ import annotations

from typing import Any

from conftest import scripted_config
from store_helpers import TopicEmbedder, graph

from promem_fast.store import MemoryStore

SQLITE_KEYS = """
SELECT m.name, f."from" FROM sqlite_master m, pragma_foreign_key_list(m.name) f
WHERE m.type = 'table' ORDER BY 1, 2
"""

SQLITE_LEADING = """
SELECT m.name, i.name AS column_name FROM sqlite_master m, pragma_index_list(m.name) l,
       pragma_index_info(l.name) i
WHERE m.type = 'table' AND i.seqno = 0
UNION
SELECT m.name, t.name FROM sqlite_master m, pragma_table_info(m.name) t
WHERE m.type = 'table' AND t.pk = 1 AND upper(t.type) = 'INTEGER'
"""
"""Columns that lead an index, and each INTEGER PRIMARY KEY (the row's own id in SQLite, found without one)."""

PG_KEYS = """
SELECT c.conrelid::regclass::text, a.attname FROM pg_constraint c
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
WHERE c.contype = 'f' ORDER BY 1, 2
"""

PG_LEADING = """
SELECT i.indrelid::regclass::text, a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
"""


def _pairs(db: Any, sql: str) -> set[tuple[str, str]]:
    return {(str(table), str(column)) for table, column in db.execute(sql).fetchall()}


def test_every_foreign_key_can_find_its_children_by_an_index(store_at: str) -> None:
    with MemoryStore(store_at, scripted_config(), embedder=TopicEmbedder(), update_judge="off") as store:
        store.add([graph("s1", "Ann", ["Ann works as a nurse in Leeds."])])  # PostgreSQL types its vectors here
        sqlite = store.db.dialect == "sqlite"
        keys = _pairs(store.db, SQLITE_KEYS if sqlite else PG_KEYS)
        leading = _pairs(store.db, SQLITE_LEADING if sqlite else PG_LEADING)
    assert ("nodes", "merged_into") in keys and ("edges", "source") in keys  # the keys were read
    assert sorted(keys - leading) == []
