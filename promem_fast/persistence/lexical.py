"""The lexical side of ranking: a question's words, and BM25 over a memory's words through SQLite FTS5.

Two indexes share one query rule (:func:`terms`, :func:`match_expression`) and SQLite's own BM25:

- the store's ``memory_fts`` table (schema version 7, :data:`FTS_SCHEMA`): one row per node (its id), its
  text, the text of its anchored details, its source (the owner's words in the turns it was taken from) and
  its exchange (the other speaker's words around them), kept in step with ``nodes`` by triggers (insert, update and delete, the cascades of a session's or a user's
  removal included); a search keeps the user's rows;
- :class:`PoolLexicon`, an in-memory FTS5 table over the units a question may be answered from (the answer
  program's pool, which may span several users of a tenant), built once per retrieval index.

A question's words are lower-cased, stop words and the memory owners' names left out (:func:`terms`): a name
repeated in every memory would otherwise match all of them. The words are joined by OR, so a memory that
shares any of them is a candidate and BM25 orders the candidates. PostgreSQL takes the same terms as a
``tsquery`` over its own ``tsvector`` column (:func:`ts_query`, :meth:`~.postgres.PostgresPersistence.lexical`).

Why the source: a memory is a rewording. "Joan enjoys hiking" was said as "I spent the weekend on the trails
above Tahoe", and a question asks in the words that were said ("Where did Joan go on the trails?") at least
as often as in the memory's. The source's words find the memory; they weigh less than its own (:data:`WEIGHTS`),
and ``ranking.source = false`` leaves them out (a column filter, :func:`columns_read`). The same holds for the
other speaker's words of that exchange (``ranking.exchange``): "How was the pottery class?" asked before
"I made a bowl" names what a question about the bowl will name.
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
_SOURCE = "json_extract({n}.data, '$.source')"
_EXCHANGE = "json_extract({n}.data, '$.exchange')"
_ROW = "INSERT INTO memory_fts (rowid, text, details, source, exchange) VALUES (new.id, new.text, {d}, {s}, {x});"
_NEW_ROW = _ROW.format(d=_DETAILS.format(n="new"), s=_SOURCE.format(n="new"), x=_EXCHANGE.format(n="new"))

FTS_SCHEMA: tuple[str, ...] = (
    f"CREATE VIRTUAL TABLE memory_fts USING fts5(text, details, source, exchange, tokenize = '{TOKENIZER}')",
    "CREATE TRIGGER memory_fts_insert AFTER INSERT ON nodes BEGIN " + _NEW_ROW + " END",
    "CREATE TRIGGER memory_fts_update AFTER UPDATE OF text, data ON nodes BEGIN DELETE FROM memory_fts WHERE "
    "rowid = old.id; " + _NEW_ROW + " END",
    "CREATE TRIGGER memory_fts_delete AFTER DELETE ON nodes BEGIN DELETE FROM memory_fts WHERE rowid = old.id; END",
)
"""The full-text table over nodes and the triggers that keep it in step (made by the migration to version 4,
made again with the ``source`` column by the one to version 6, and with ``exchange`` by the one to 7)."""

DROP_FTS: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS memory_fts_insert", "DROP TRIGGER IF EXISTS memory_fts_update",
    "DROP TRIGGER IF EXISTS memory_fts_delete", "DROP TABLE IF EXISTS memory_fts_vocab",
    "DROP TABLE IF EXISTS memory_fts",
)
"""What versions 6 and 7 take away before they make the table again: the earlier table, its triggers and the
vocabulary view (``memory_fts_vocab``, which stored nothing and is no longer read: :func:`rows_holding` counts)."""

FILL_FTS = ("INSERT INTO memory_fts (rowid, text, details, source, exchange) SELECT n.id, n.text, "
            + _DETAILS.format(n="n") + ", " + _SOURCE.format(n="n") + ", " + _EXCHANGE.format(n="n") + " FROM nodes n")
"""Fills the table from the nodes a store already holds (the migrations to versions 4, 6 and 7)."""

WEIGHTS = "1.0, 0.5, 0.5, 0.5"
"""BM25 column weights: details, the source and the exchange count half as much as the memory's own text."""

POOL_WEIGHTS = "1.0, 0.5, 0.5"
""":class:`PoolLexicon`'s column weights: its text (the memory with its details), its source, its exchange."""


def columns_read(source: bool = True, exchange: bool = True, text: str = "text details") -> str | None:
    """The FTS5 column filter of a search leaving out the source or the exchange (``ranking.source``,
    ``ranking.exchange``), ``text`` being the columns always read; None when every column is read."""
    if source and exchange:
        return None
    return "{" + " ".join([text, *(["source"] if source else []), *(["exchange"] if exchange else [])]) + "}"


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


def match_expression(question_terms: Sequence[str], columns: str | None = None) -> str | None:
    """An FTS5 query matching any of the terms (each quoted, so no word is read as an operator), in the
    ``columns`` filter given (``{text details}``) or in every column; None if no term."""
    if not question_terms:
        return None
    expression = " OR ".join('"' + t.replace('"', '""') + '"' for t in question_terms)
    return expression if columns is None else f"{columns} : ({expression})"


def ts_query(question_terms: Sequence[str], source: bool = True, exchange: bool = True) -> str | None:
    """The ``to_tsquery('english', ...)`` text matching any of the terms (each quoted), in the memory's text
    and details (weights A and C), its source (B) when ``source`` and its exchange (D) when ``exchange``;
    None if none."""
    label = "" if source and exchange else ":AC" + "B" * source + "D" * exchange
    quoted = ["'" + t.replace("'", "") + "'" + label for t in question_terms if t.replace("'", "")]
    return " | ".join(quoted) or None


POSTINGS_BUDGET = 400
"""Rows a store search lets BM25 score at most: the question's rarest words are kept while the rows holding
them (over all users) add up to no more (:func:`rare_terms`). FTS5's BM25 costs about ten microseconds per
matching row on a loaded core (finding the rows, well under one), so this bounds the lexical side at a
million memories to a few milliseconds (``benchmarks/runs/bench_hybrid.py``). In a small store every word
is kept; in a large one the commonest go first, whose BM25 weight (inverse document frequency) is the lowest,
and the dense side still reads the whole question."""


def rows_holding(db: sqlite3.Connection, word: str, budget: int = POSTINGS_BUDGET, columns: str | None = None
                 ) -> int:
    """How many memories (of every user) hold the word, counted up to ``budget + 1`` at most: a word past the
    budget is common whatever its exact count. FTS5 reads a word's rows as the query asks for them, so the
    limit bounds the count's cost (about 0.1 ms at a million memories); the vocabulary table's count reads
    all of them (milliseconds for a common word)."""
    match = match_expression([word], columns)
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


def rare_terms(db: sqlite3.Connection, question_terms: Sequence[str], budget: int = POSTINGS_BUDGET,
               columns: str | None = None) -> list[str]:
    """The question's words the store's BM25 search scores (:func:`rarest` by :func:`rows_holding`)."""
    return rarest(question_terms, lambda word: rows_holding(db, word, budget, columns), budget)


def search_store(db: sqlite3.Connection, user_pk: int, question_terms: Sequence[str], limit: int,
                 source: bool = True, exchange: bool = True) -> list[tuple[int, float]]:
    """The user's ``limit`` best nodes by BM25 for the terms (the rarest, :func:`rare_terms`), best first, as
    ``(node id, score)`` (higher is better); the nodes of every state (superseded ones too): the caller keeps
    those in its scope. The rows of every user holding the words are scored (at most
    :data:`POSTINGS_BUDGET`) and the user's kept by a join on the node's id, in one statement: a user
    filter inside the match would make BM25 weigh it as a phrase of a million rows. ``source``, ``exchange``:
    whether the words a memory was taken from, and the other speaker's around them, count (see the module's
    docstring)."""
    columns = columns_read(source, exchange)
    match = match_expression(rare_terms(db, question_terms, columns=columns), columns)
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
    """BM25 over a fixed list of texts, their sources and exchanges (ids are their positions), in an in-memory
    FTS5 table; each weighs as in the store (:data:`WEIGHTS`: the text column there holds the details too).

    Thread-safe: the answer program may rank from several threads of the engine's driver.
    """

    def __init__(self, texts: Sequence[str], sources: Sequence[str] | None = None,
                 exchanges: Sequence[str] | None = None) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(f"CREATE VIRTUAL TABLE pool USING fts5(text, source, exchange, tokenize = '{TOKENIZER}')")
        empty = [""] * len(texts)
        self._db.executemany("INSERT INTO pool (rowid, text, source, exchange) VALUES (?, ?, ?, ?)",
                             zip(range(len(texts)), texts, sources or empty, exchanges or empty, strict=True))
        self.size = len(texts)

    def search(self, question_terms: Sequence[str], limit: int | None = None, source: bool = True,
               exchange: bool = True) -> list[tuple[int, float]]:
        """The best texts by BM25 for the terms, best first, as ``(position, score)`` (higher is better);
        ``source``, ``exchange``: whether the sources' and the exchanges' words count."""
        match = match_expression(question_terms, columns_read(source, exchange, text="text"))
        if match is None:
            return []
        with self._lock:
            found = self._db.execute(f"SELECT rowid, bm25(pool, {POOL_WEIGHTS}) AS score FROM pool WHERE pool "
                                     "MATCH ? ORDER BY score LIMIT ?",
                                     (match, self.size if limit is None else limit)).fetchall()
        return [(int(rowid), -float(score)) for rowid, score in found]
