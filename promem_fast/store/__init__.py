"""The memory store: extracted memory kept in a persistence backend (:mod:`promem_fast.persistence`),
searched, answered from, updated across sessions and exported (see :class:`MemoryStore`).

The names are loaded on first use, so the scripted backend can read the store's prompt templates without
importing the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from promem_fast.persistence.connection import StoreError
    from promem_fast.persistence.records import Hit
    from .store import MemoryStore

__all__ = ["Hit", "MemoryStore", "StoreError"]

_HOME = {"Hit": "promem_fast.persistence.records", "MemoryStore": "promem_fast.store.store",
         "StoreError": "promem_fast.persistence.connection"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOME[name]), name)
