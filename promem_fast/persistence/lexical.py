"""The lexical side of ranking: a question's words, and BM25 over a memory's words through SQLite FTS5.

Two indexes share one query rule (:func:`terms`, :func:`match_expression`) and SQLite's own BM25:

- the store's ``memory_fts`` table (schema version 4, :data:`FTS_SCHEMA`): one row per node (its id), its
  text and the text of its anchored details, kept in step with ``nodes`` by triggers (insert, update and
  delete, the cascades of a session's or a user's removal included); a search keeps the user's rows;
- :class:`PoolLexicon`, an in-memory FTS5 table over the units a question may be answered from (the answer
  program's pool, which may span several users of a tenant), built once per retrieval index.

A question's words are lower-cased, stop words and the memory owners' names left out (:func:`terms`): a name
repeated in every memory would otherwise match all of them. The words are joined by OR, so a memory that
shares any of them is a candidate and BM25 orders the candidates. PostgreSQL takes the same terms as a
``tsquery`` over its own ``tsvector`` column (:func:`ts_query`, :meth:`~.postgres.PostgresPersistence.lexical`).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence

TOKENIZER = "porter unicode61 remove_diacritics 2"
"""FTS5's tokenizer for both indexes: case-folded words split at anything not a letter or digit, reduced to
their stems (Porter), so "lives" matches "live" and "painted" "paint"."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves ever also many much get got did does
kind sort type any anything something things thing s t d ll m re ve like
""".split())
"""Words that carry no topic: left out of a question's terms (question words included)."""

_DETAILS = ("(SELECT group_concat(d.text, ' ; ') FROM json_each({n}.data, '$.details') j "
            "JOIN details d ON d.session_pk = {n}.session_pk AND d.local_id = j.value)")
_ROW = "INSERT INTO memory_fts (rowid, text, details) VALUES (new.id, new.text, {d});"

FTS_SCHEMA: tuple[str, ...] = (
    f"CREATE VIRTUAL TABLE memory_fts USING fts5(text, details, tokenize = '{TOKENIZER}')",
    "CREATE TRIGGER memory_fts_insert AFTER INSERT ON nodes BEGIN " + _ROW.format(d=_DETAILS.format(n="new"))
    + " END",
    "CREATE TRIGGER memory_fts_update AFTER UPDATE OF text, data ON nodes BEGIN DELETE FROM memory_fts WHERE "
    "rowid = old.id; " + _ROW.format(d=_DETAILS.format(n="new")) + " END",
    "CREATE TRIGGER memory_fts_delete AFTER DELETE ON nodes BEGIN DELETE FROM memory_fts WHERE rowid = old.id; END",
    "CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab(memory_fts, 'row')",
)
"""Schema version 4: the full-text table over nodes and the triggers that keep it in step. The vocabulary
table (``memory_fts_vocab``, a view of the index that stores nothing) is no longer read (:func:`rows_holding`
counts instead); it stays, since leaving it out would take a schema migration for what is written already."""

FILL_FTS = ("INSERT INTO memory_fts (rowid, text, details) SELECT n.id, n.text, " + _DETAILS.format(n="n")
            + " FROM nodes n")
"""Fills the table from the nodes an older store already holds (the migration to version 4)."""

WEIGHTS = "1.0, 0.5"
"""BM25 column weights: details count half as much as the memory's own text."""


def words(text: str) -> list[str]:
    """The text's words as FTS5's tokenizer cuts them (letters and digits), lower-cased."""
    return [w.lower() for w in _WORD.findall(text)]


def name_words(names: Iterable[str]) -> set[str]:
    """The words of people's names (``"Martin Mark"`` → ``{"martin", "mark"}``), as :func:`terms` drops them."""
    return {w for name in names for w in words(name)}


def terms(question: str, drop: Iterable[str] = ()) -> list[str]:
    """The question's content words, each once, in order: no stop words, no single letters (digits stay), none
    of ``drop``."""
    left_out = STOP_WORDS | set(drop)
    return list(dict.fromkeys(w for w in words(question) if (len(w) > 1 or w.isdigit()) and w not in left_out))


def match_expression(question_terms: Sequence[str]) -> str | None:
    """An FTS5 query matching any of the terms (each quoted, so no word is read as an operator); None if none."""
    if not question_terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in question_terms)


def ts_query(question_terms: Sequence[str]) -> str | None:
    """The ``to_tsquery('english', ...)`` text matching any of the terms (each quoted); None if none."""
    quoted = ["'" + t.replace("'", "") + "'" for t in question_terms if t.replace("'", "")]
    return " | ".join(quoted) or None


POSTINGS_BUDGET = 400
"""Rows a store search lets BM25 score at most: the question's rarest words are kept while the rows holding
them (over all users) add up to no more (:func:`rare_terms`). FTS5's BM25 costs about ten microseconds per
matching row on a loaded core (finding the rows, well under one), so this bounds the lexical side at a
million memories to a few milliseconds (``benchmarks/runs/bench_hybrid.py``). In a small store every word
is kept; in a large one the commonest go first, whose BM25 weight (inverse document frequency) is the lowest,
and the dense side still reads the whole question."""


def rows_holding(db: sqlite3.Connection, word: str, budget: int = POSTINGS_BUDGET) -> int:
    """How many memories (of every user) hold the word, counted up to ``budget + 1`` at most: a word past the
    budget is common whatever its exact count. FTS5 reads a word's rows as the query asks for them, so the
    limit bounds the count's cost (about 0.1 ms at a million memories); the vocabulary table's count reads
    all of them (milliseconds for a common word)."""
    match = match_expression([word])
    if match is None:
        return 0
    return int(db.execute("SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ? LIMIT ?)",
                          (match, budget + 1)).fetchone()[0])


def rarest(question_terms: Sequence[str], rows_of: Callable[[str], int], budget: int = POSTINGS_BUDGET
           ) -> list[str]:
    """The question's words a store's full-text search scores, rarest first, by either backend's count
    (``rows_of``, counted up to ``budget + 1``): those in no memory left out, then words kept while the rows
    holding them (over all users) add up to ``budget`` at most. A word in more memories than that is common:
    its BM25 weight (inverse document frequency) is low, and the rarer words rank."""
    held = {word: rows_of(word) for word in dict.fromkeys(question_terms)}
    kept, total = [], 0
    for word in sorted(held, key=held.__getitem__):
        rows = held[word]
        if rows == 0:
            continue
        if total + rows > budget:
            break
        kept.append(word)
        total += rows
    return kept


def rare_terms(db: sqlite3.Connection, question_terms: Sequence[str], budget: int = POSTINGS_BUDGET) -> list[str]:
    """The question's words the store's BM25 search scores (:func:`rarest` by :func:`rows_holding`)."""
    return rarest(question_terms, lambda word: rows_holding(db, word, budget), budget)


def search_store(db: sqlite3.Connection, user_pk: int, question_terms: Sequence[str], limit: int
                 ) -> list[tuple[int, float]]:
    """The user's ``limit`` best nodes by BM25 for the terms (the rarest, :func:`rare_terms`), best first, as
    ``(node id, score)`` (higher is better); the nodes of every state (superseded ones too): the caller keeps
    those in its scope. The rows of every user holding the words are scored (at most
    :data:`POSTINGS_BUDGET`) and the user's kept by a join on the node's id, in one statement: a user
    filter inside the match would make BM25 weigh it as a phrase of a million rows."""
    match = match_expression(rare_terms(db, question_terms))
    if match is None or limit <= 0:
        return []
    found = db.execute(f"SELECT f.rowid, bm25(memory_fts, {WEIGHTS}) AS score FROM memory_fts f JOIN nodes n ON "
                       "n.id = f.rowid WHERE memory_fts MATCH ? AND n.user_id = ? ORDER BY score LIMIT ?",
                       (match, user_pk, limit)).fetchall()
    return [(int(rowid), -float(score)) for rowid, score in found]


def purge_deleted(db: sqlite3.Connection) -> None:
    """Rewrite the full-text index without the rows deleted from it. FTS5 marks a deleted row's words as
    deleted but keeps them in its older index pages until a merge; ``optimize`` merges every page into one, so
    the removed memory's words leave the file (the freed pages are zeroed by ``secure_delete``)."""
    db.execute("INSERT INTO memory_fts (memory_fts) VALUES ('optimize')")


class PoolLexicon:
    """BM25 over a fixed list of texts (ids are their positions), in an in-memory FTS5 table.

    Thread-safe: the answer program may rank from several threads of the engine's driver.
    """

    def __init__(self, texts: Sequence[str]) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(f"CREATE VIRTUAL TABLE pool USING fts5(text, tokenize = '{TOKENIZER}')")
        self._db.executemany("INSERT INTO pool (rowid, text) VALUES (?, ?)", enumerate(texts))
        self.size = len(texts)

    def search(self, question_terms: Sequence[str], limit: int | None = None) -> list[tuple[int, float]]:
        """The best texts by BM25 for the terms, best first, as ``(position, score)`` (higher is better)."""
        match = match_expression(question_terms)
        if match is None:
            return []
        with self._lock:
            found = self._db.execute("SELECT rowid, bm25(pool) FROM pool WHERE pool MATCH ? ORDER BY rank LIMIT ?",
                                     (match, self.size if limit is None else limit)).fetchall()
        return [(int(rowid), -float(score)) for rowid, score in found]
