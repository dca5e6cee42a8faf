"""The memory store: extracted memory kept in a persistence backend (:mod:`promem_fast.persistence`),
searched, answered from, updated across sessions and exported (see :class:`MemoryStore`)."""

from __future__ import annotations

from promem_fast.persistence.connection import StoreError
from promem_fast.persistence.hits import Hit

from .store import MemoryStore

__all__ = ["Hit", "MemoryStore", "StoreError"]
