"""The one rule for user names, session ids and tenants, shared by extract, ingest, import, the service and MCP.

A name travels into URL paths (``/v1/users/{user}/sessions/{session_id}``), log lines, reject records and file
names, so one that is path-like, invisible or not text is refused where it enters, with the field named,
instead of being stored under a name that the service then cannot read or delete.
"""

from __future__ import annotations

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
    if value.strip() in (".", ".."):
        return f"must not be {value.strip()!r} (a path, not a name)"
    if "/" in value or "\\" in value:
        return "must not contain '/' or '\\' (it is one segment of a URL path)"
    return None
