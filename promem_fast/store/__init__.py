"""The memory store: extracted memory kept in one SQLite file per store, searched, answered from, updated
across sessions and exported (see :class:`MemoryStore`).

The names are loaded on first use, so the scripted backend can read the store's prompt templates without
importing the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .records import Hit
    from .schema import StoreError
    from .store import MemoryStore

__all__ = ["Hit", "MemoryStore", "StoreError"]

_HOME = {"Hit": "records", "MemoryStore": "store", "StoreError": "schema"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
