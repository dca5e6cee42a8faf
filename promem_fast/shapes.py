"""The one shape of memory results on every surface: the HTTP API, the Python client, the CLI's ``--json`` and MCP.

The shapes are :class:`promem_fast.Memory`'s (its module docstring lists them). The store hands out richer rows
(a hit carries the node's full extracted JSON, with that graph's own node index; an answer carries
evaluation's bookkeeping such as ``gold`` and ``dropped_for_budget``); a user of the memory needs neither, and
two ids on one hit invite joining on the wrong one. These functions cut a store row down to the public shape,
once, so the surfaces cannot drift apart; :mod:`promem_fast.serve.schemas` declares the same shapes as typed
OpenAPI models. No third-party import: the CLI uses this without the serve extra.

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
"""Memories a search returns unless told otherwise, on every surface (the CLI, HTTP, the client, MCP), as
:class:`promem_fast.Memory`."""


def iso_instant(value: float | str | None) -> str | None:
    """A Unix time as ISO 8601 in UTC (seconds precision); strings pass as they are, ``None`` stays ``None``."""
    if value is None or isinstance(value, str):
        return value
    return datetime.fromtimestamp(float(value), timezone.utc).isoformat(timespec="seconds")


def memory(row: dict[str, Any]) -> dict[str, Any]:
    """A store row (``Hit.to_dict()``) as a *memory*: ``{"id", "memory", "user_id", "session_ids",
    "valid_from", "valid_until", "recorded_at", "superseded_by", "reason", "score", "details", "links"}``;
    one id, the text once, no extraction internals."""
    return {
        "id": int(row["id"]),
        "memory": row["text"],
        "user_id": row.get("user_id", row.get("user")),
        "session_ids": list(row.get("session_ids") or [row["session_id"]]),
        "valid_from": row.get("valid_from", row.get("date")),
        "valid_until": row.get("valid_until"),
        "recorded_at": iso_instant(row.get("recorded_at")),
        "superseded_by": row.get("superseded_by"),
        "reason": row.get("reason"),
        "score": row.get("score"),
        "details": list(row.get("details") or []),
        "links": [{"relation": e["relation"], "direction": e["direction"], "id": int(e["node_id"]),
                   "memory": e["text"]} for e in row.get("edges") or []],
    }


def history(node_id: int, chain: list[dict[str, Any]]) -> dict[str, Any]:
    """The replacement graph through a memory, from the store's rows of it (oldest first):
    ``{"id", "nodes": [memory...], "edges": [{"old", "new", "kind", "reason"}]}``."""
    nodes = [memory(row) for row in chain]
    ids = {n["id"] for n in nodes}
    edges = [{"old": n["id"], "new": n["superseded_by"], "kind": "update", "reason": n["reason"]}
             for n in nodes if n["superseded_by"] in ids]
    return {"id": node_id, "nodes": nodes, "edges": edges}


def answer(row: dict[str, Any]) -> dict[str, Any]:
    """A store answer as ``{"question", "answer", "as_of", "error", "memories": [{"id", "memory", "session_id",
    "day", "score"}]}`` (the memories in the order the answerer was shown them); no evaluation fields."""
    shown = row.get("memories")
    if shown is None:
        shown = [{"id": None, "memory": r["text"], "session_id": r["session_id"], "day": r.get("date"),
                  "score": r.get("score")} for r in row.get("retrieved") or []]
    return {"question": row["question"], "answer": row.get("prediction", row.get("answer")),
            "as_of": row.get("as_of"), "error": row.get("error"),
            "memories": [{key: m.get(key) for key in ("id", "memory", "session_id", "day", "score")} for m in shown]}


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

