"""The memory store: extracted memory kept in one SQLite file per store, searched, answered from, updated
across sessions and exported (see :class:`MemoryStore`)."""

from __future__ import annotations

from .hits import Hit
from .schema import StoreError
from .store import MemoryStore

__all__ = ["Hit", "MemoryStore", "StoreError"]
