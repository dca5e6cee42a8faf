"""Content words of a text (lower-cased, crudely stemmed, stop words out), for the pipeline's word-overlap
checks: a detail that only repeats the prompt's words, a relation's entries against the dialogue. The test
stand-ins compare texts the same way."""

from __future__ import annotations

import re
from functools import lru_cache

STOPWORDS = frozenset(
    "a an the and or but if of to in on at for from by with about as into over after before is are was were be "
    "been being am do does did have has had i me my mine we our you your he him his she her it its they them "
    "their this that these those there here what which who whom when where why how so very just also too not "
    "no yes can could will would should may might must shall up down out off than then now really quite some "
    "any all each every other such own same s t don doesn didn im ive id ill".split()
)

_WORD = re.compile(r"[0-9]+(?:[.,:][0-9]+)*|[^\W\d_]+", re.UNICODE)


def stem(word: str) -> str:
    """A deliberately crude suffix stripper: enough to match 'moved'/'moving'/'moves'."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


@lru_cache(maxsize=1 << 16)
def _term(word: str) -> str | None:
    """One word as the checks compare it, or None for a stop word (cached: a dialogue's words repeat, and
    every statement a model returns is compared against its source)."""
    word = word.lower()
    return None if word in STOPWORDS else stem(word)


@lru_cache(maxsize=2048)
def content_words(text: str) -> tuple[str, ...]:
    """Lower-cased, stemmed words of ``text`` without stop words, in order (cached: the same dialogue text
    comes back in many prompts)."""
    return tuple(term for term in map(_term, _WORD.findall(text)) if term is not None)


@lru_cache(maxsize=2048)
def content_set(text: str) -> frozenset[str]:
    return frozenset(content_words(text))
