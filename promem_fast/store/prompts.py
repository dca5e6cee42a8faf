"""The store's one prompt: does a newer memory entry replace an older one? And its scripted reply.

Sent with role ``nli`` (the same kind of short closed judgement, so ``pipeline.max_tokens["nli"]`` and a
role override for ``nli`` apply); the template name tells a scripted backend which prompt it is looking at.
The wording is ours.
"""

from __future__ import annotations

from typing import Any

from promem_fast.backends._text import content_set, content_words
from promem_fast.prompts import Template

STORE_TEMPLATES: dict[str, Template] = {
    "store_update": Template(
        system=(
            "Task: two memory entries about {user} were taken from conversations on different dates. Decide "
            "whether the newer entry replaces the older one: it gives a new value for the same thing (a "
            "changed job, home, plan, preference, relationship or number), corrects it, or contradicts it. "
            "Entries about different things, or that can both still be true, do not replace each other."
        ),
        user=('Older entry ({old_date}): {old}\nNewer entry ({new_date}): {new}\n\n'
              'Reply as {{"replaces": true or false}}.'),
    ),
}

UPDATE_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"replaces": {"type": "boolean"}},
                                 "required": ["replaces"]}


def _replaces(fields: dict[str, str]) -> dict[str, bool]:
    """Scripted stand-in: the same subject (first word) and a partly shared wording with new words on both
    sides reads as a changed value; a near restatement or an unrelated entry does not."""
    old, new = content_words(fields["old"]), content_words(fields["new"])
    if not old or not new or old[0] != new[0]:
        return {"replaces": False}
    have_new, have_old = content_set(fields["new"]), content_set(fields["old"])
    shared = sum(w in have_new for w in old) / len(old)
    return {"replaces": 0.3 <= shared < 1.0 and any(w not in have_old for w in new)}


STORE_RULES = {"store_update": _replaces}
"""Replies of the scripted backend to the store's templates (by template name)."""
