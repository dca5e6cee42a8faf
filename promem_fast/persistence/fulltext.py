"""The words of a lexical query, as each backend's full-text engine takes them.

A query is reduced to its words (letters and digits, lower case), any of which may match: FTS5 gets them
quoted and joined by ``OR`` (so no word is read as an operator), PostgreSQL a ``tsquery`` of the same words
joined by ``|`` under the ``simple`` configuration (no stemming and no stop words, as FTS5's default
tokenizer). Rankings differ between the backends (BM25 against ``ts_rank``); the words matched do not.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)

MAX_WORDS = 64
"""Words of one query kept (a pasted page would otherwise become a query of thousands of terms)."""


def words(query: str) -> list[str]:
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_WORDS]


def fts_query(query: str) -> str | None:
    """The FTS5 ``MATCH`` expression for ``query``; None when it has no word."""
    found = words(query)
    return " OR ".join(f'"{w}"' for w in found) if found else None


def ts_query(query: str) -> str | None:
    """The ``to_tsquery('simple', ...)`` text for ``query``; None when it has no word."""
    found = [w.replace("'", "") for w in words(query) if "'" not in w or w.replace("'", "")]
    return " | ".join(f"'{w}'" for w in found if w) or None
