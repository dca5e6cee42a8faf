"""The scripted backend's reply to the store's update prompt: a word-overlap stand-in for a model.

A test stand-in, not product logic (the store decides with the configured model). Like a model it reads
only the prompt: the two entries' words.
"""

from __future__ import annotations

from typing import Any

from promem_fast.pipeline.words import content_set, content_words


def judge_update(fields: dict[str, str]) -> dict[str, Any]:
    """The same words → duplicate; the same subject (first word) with a partly shared wording and new words
    on both sides → update (a changed value); anything else → add."""
    old, new = content_words(fields["old"]), content_words(fields["new"])
    have_new, have_old = content_set(fields["new"]), content_set(fields["old"])
    if old and have_new == have_old:
        return {"verdict": "duplicate", "reason": "the same words"}
    if not old or not new or old[0] != new[0]:
        return {"verdict": "add", "reason": "another subject"}
    shared = sum(w in have_new for w in old) / len(old)
    if 0.3 <= shared < 1.0 and any(w not in have_old for w in new):
        return {"verdict": "update", "reason": f"same subject, {shared:.0%} of its words kept"}
    return {"verdict": "add", "reason": "too little in common"}


STORE_RULES = {"store_update": judge_update}
"""Replies of the scripted backend to the store's templates (by template name)."""
