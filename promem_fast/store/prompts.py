"""The store's one prompt: what a newer memory entry means for an older one (add, update or duplicate).

Sent with role ``nli`` (the same kind of short closed judgement, so a role override for ``nli`` applies),
with its own completion budget (a verdict and a one-sentence reason do not fit the NLI label's); the
template name tells a scripted backend which prompt it is looking at.
The decision is the model's: the product holds no rule of its own. The wording is ours.
"""

from __future__ import annotations

from typing import Any

from promem_fast.prompts import Template

VERDICTS = ("add", "update", "duplicate")

UPDATE_MAX_TOKENS = 96
"""Completion budget of one verdict: the JSON with its enum and a short sentence of reason."""

STORE_TEMPLATES: dict[str, Template] = {
    "store_update": Template(
        system=(
            "Task: judge a newly remembered entry about {user} against an entry remembered earlier. Answer "
            '"update" when the new entry gives another value for the same thing (a changed job, home, plan, '
            'preference, relationship or number), corrects the older one or contradicts it, so the older no '
            'longer holds; "duplicate" when the new entry says what the older one already says, adding '
            'nothing; "add" when they are about different things or can both hold at once. Give the reason '
            "in one short sentence."
        ),
        user=('Earlier entry ({old_date}): {old}\nNew entry ({new_date}): {new}\n\n'
              'Reply as {{"verdict": "add" or "update" or "duplicate", "reason": "..."}}.'),
    ),
}

UPDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": list(VERDICTS)}, "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
}
