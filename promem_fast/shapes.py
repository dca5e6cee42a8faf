"""The one shape of memory results on every surface: the HTTP API, the Python client, the CLI's ``--json`` and MCP.

The store hands out rich rows (a hit carries the node's full extracted JSON, with that graph's own node index;
an answer carries evaluation's bookkeeping such as ``gold`` and ``dropped_for_budget``). A user of the memory
needs neither, and two ids on one hit invite joining on the wrong one. These functions cut a store row down to
the public shape, once, so the surfaces cannot drift apart; :mod:`promem_fast.serve.schemas` declares the
same shapes as typed OpenAPI models. No third-party import: the CLI uses this without the serve extra.

Times are ISO 8601 everywhere: a day (``2025-03-14``) for when a memory was said, a UTC instant with offset
(``2025-03-14T09:30:00+00:00``) for when the service did something.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from promem_fast.types import Session

DEFAULT_K = 10
"""Memories a search returns unless told otherwise, on every surface (the CLI, HTTP, the client, MCP)."""

TIME_FIELDS: tuple[str, ...] = ("valid_from", "valid_until", "recorded_at")
"""Optional time fields a memory row may carry; passed on (as ISO 8601) when the store gives them."""


def iso_instant(value: float | str | None) -> str | None:
    """A Unix time as ISO 8601 in UTC (seconds precision); strings pass as they are, ``None`` stays ``None``."""
    if value is None or isinstance(value, str):
        return value
    return datetime.fromtimestamp(float(value), timezone.utc).isoformat(timespec="seconds")


def memory(row: dict[str, Any]) -> dict[str, Any]:
    """One memory (a search hit, a ``get_all`` item or a ``history`` step) in the public shape: one id."""
    out = {
        "id": int(row["id"]),
        "user_id": row.get("user_id", row.get("user")),
        "session_id": row["session_id"],
        "text": row["text"],
        "date": row.get("date"),
        "turn_id": row.get("turn_id"),
        "score": row.get("score"),
        "details": list(row.get("details") or []),
        "edges": [{"relation": e["relation"], "direction": e["direction"], "node_id": int(e["node_id"]),
                   "text": e["text"]} for e in row.get("edges") or []],
        "superseded_by": row.get("superseded_by"),
    }
    for name in TIME_FIELDS:
        if name in row:
            out[name] = iso_instant(row[name])
    return out


def answer(row: dict[str, Any]) -> dict[str, Any]:
    """One answer: the question, the answer (``None`` with ``error`` when answering failed) and the dated
    memories it was shown, best first; no evaluation fields."""
    shown = sorted(row.get("retrieved") or [], key=lambda r: r.get("rank", 0))
    return {
        "question": row["question"],
        "answer": row.get("prediction", row.get("answer")),
        "error": row.get("error"),
        "memories": [{"session_id": r["session_id"], "date": r.get("date"), "score": r.get("score"),
                      "text": r["text"]} for r in shown],
    }


def job(row: dict[str, Any]) -> dict[str, Any]:
    """A job's progress with its creation time as ISO 8601."""
    return {
        "job_id": row["job_id"], "user_id": row.get("user_id", row.get("user")), "state": row["state"],
        "created": iso_instant(row.get("created")), "total": row["total"], "pending": row["pending"],
        "running": row["running"], "done": row["done"], "failed": row["failed"], "errors": list(row["errors"]),
    }


def as_sessions(data: Any, date: str | None = None) -> list[dict[str, Any]]:
    """What an ``add`` was given (client, MCP), as sessions: a conversation (messages with ``role`` and ``content``)
    becomes one session whose id is a digest of its messages and date, so adding it twice stores it once."""
    if isinstance(data, Session):
        return [data.to_dict()]
    if isinstance(data, dict):
        return [dict(data)]
    items = [s.to_dict() if isinstance(s, Session) else s for s in data]
    if items and all(isinstance(m, dict) and "role" in m and "content" in m for m in items):
        digest = hashlib.sha256(json.dumps([items, date], sort_keys=True).encode("utf-8")).hexdigest()[:16]
        session = {"session_id": f"msg-{digest}", "messages": items}
        return [session if date is None else {**session, "timestamp": date}]
    return [dict(s) for s in items]

