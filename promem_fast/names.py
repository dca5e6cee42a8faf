"""The one rule for user names, session ids and tenants, shared by extract, ingest, import, the service and MCP.

A name travels into URL paths (``/v1/users/{user}/sessions/{session_id}``), log lines, reject records and file
names, so one that is path-like, invisible or not text is refused where it enters, with the field named,
instead of being stored under a name that the service then cannot read or delete.

Names that look alike are refused rather than normalised: a name with spaces at either end, a space other
than the plain one (a no-break space), or an invisible formatting character (zero-width characters, the
text-direction overrides such as U+202E) would otherwise be a second user who reads the same as the first.
Refusing keeps every stored name exactly what its caller sent, with one clear error to fix the caller.
"""

from __future__ import annotations

import unicodedata

from promem_fast.jsonl import CONTROL, SURROGATE

MAX_NAME_CHARS = 256
"""Longest user name or session id (they appear in every log line, URL and reject record)."""


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot be a user name or session id, or None when it can."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if not value.strip():
        return "must not be empty"
    if len(value) > MAX_NAME_CHARS:
        return f"is {len(value):,} characters long; at most {MAX_NAME_CHARS} are allowed"
    if SURROGATE.search(value):
        return "holds a lone UTF-16 surrogate escape (such as \\ud800), which is not text"
    if CONTROL.search(value):
        return "must not contain line breaks or control characters"
    if value != value.strip():
        return "must not begin or end with spaces"
    odd = next((c for c in value if c.isspace() and c != " " or unicodedata.category(c) == "Cf"), None)
    if odd is not None:
        return (f"holds U+{ord(odd):04X} ({unicodedata.name(odd, 'unnamed')}), an invisible or look-alike "
                "character; use plain text with plain spaces")
    if value.strip() in (".", ".."):
        return f"must not be {value.strip()!r} (a path, not a name)"
    if "/" in value or "\\" in value:
        return "must not contain '/' or '\\' (it is one segment of a URL path)"
    return None
