"""API keys, each bound to one tenant, stored as digests only.

A key reads ``pmk_<id>_<secret>``: the id finds the row without scanning, the secret (32 random bytes) is
compared as a SHA-256 digest in constant time. A plain hash is enough because the secret is random, not a
password; the plaintext is shown once, at creation, and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from promem_fast.errors import PromemError

from .db import Tables

_KEY = re.compile(r"^pmk_([0-9a-f]{12})_([A-Za-z0-9_-]{20,})$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Caller:
    """Who is asking: the key's id (rate limits count per key) and the tenant every query is scoped to."""

    key_id: str
    tenant: str


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class KeyRing:
    """Creates, lists, revokes and checks keys in the ``serve_keys`` table."""

    def __init__(self, conn: Tables) -> None:
        self._conn = conn

    def create(self, tenant: str, name: str = "") -> str:
        """A new key for ``tenant``; the only time its plaintext exists."""
        if not _TENANT.match(tenant):
            raise PromemError(f"tenant {tenant!r} must be 1-64 letters, digits, '.', '_' or '-'")
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        self._conn.execute("INSERT INTO serve_keys (id, digest, tenant, name, created) VALUES (?, ?, ?, ?, ?)",
                           (key_id, _digest(secret), tenant, name, time.time()))
        return f"pmk_{key_id}_{secret}"

    def list(self) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT id, tenant, name, created, revoked FROM serve_keys ORDER BY created").fetchall()
        return [{"id": r[0], "tenant": r[1], "name": r[2], "created": r[3], "revoked": r[4]} for r in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke by id (or by the whole key); False when no live key has it."""
        match = _KEY.match(key_id)
        ident = match.group(1) if match else key_id
        cur = self._conn.execute("UPDATE serve_keys SET revoked=? WHERE id=? AND revoked IS NULL",
                                 (time.time(), ident))
        return cur.rowcount > 0

    def check(self, key: str) -> Caller | None:
        """The caller a presented key stands for, or None (malformed, unknown, revoked or wrong secret alike)."""
        match = _KEY.match(key or "")
        if match is None:
            return None
        row = self._conn.execute("SELECT digest, tenant FROM serve_keys WHERE id=? AND revoked IS NULL",
                                 (match.group(1),)).fetchone()
        if row is None or not hmac.compare_digest(row[0], _digest(match.group(2))):
            return None
        return Caller(key_id=match.group(1), tenant=row[1])
