"""What the store's helper modules (update detection, answering) use of a store, as a protocol.

They are handed the :class:`~promem_fast.store.store.MemoryStore` that calls them; typing it by this
protocol keeps them from importing the class, so the store's modules form no import circle.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from promem_fast.backends.base import Embedder
    from promem_fast.engine import Engine
    from promem_fast.types import MemoryGraph

    from .qa import RetrievalIndex
    from .hits import Hit
    from .vectors import VectorIndex


class StoreView(Protocol):
    path: Path
    update_judge: str
    update_neighbours: int
    update_min_cosine: float
    update_lookahead: int
    read_only: bool
    write_guard: Callable[[sqlite3.Connection, str, MemoryGraph], bool] | None
    _db: sqlite3.Connection

    @property
    def embedder(self) -> Embedder: ...

    def engine(self) -> Engine: ...

    def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def index(self, user_pk: int) -> VectorIndex: ...

    def search_vector(self, user_pk: int, vector: np.ndarray, k: int, *, history: bool = False,
                      scope: tuple[str, tuple[Any, ...]] | None = None) -> list[Hit]: ...

    def retrieval_index(self, session_ids: Iterable[str], *, tenant: str = "default",
                        history: bool = False) -> RetrievalIndex: ...

    def _user_pk(self, tenant: str, user: str) -> int | None: ...

    def _dim(self) -> int: ...

    def _embed_queries(self, texts: list[str]) -> np.ndarray: ...


