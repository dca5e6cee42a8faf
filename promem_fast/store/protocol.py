"""What the memory layer's helper modules (update judging, answering) use of a store, as a protocol.

They are handed the :class:`~promem_fast.store.store.MemoryStore` that calls them; typing it by this
protocol keeps them from importing the class, so the store's modules form no import circle. Every name is
public: the rows go through ``db`` (:class:`~promem_fast.persistence.api.Persistence`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from promem_fast.backends.base import Embedder
    from promem_fast.config import EngineConfig
    from promem_fast.engine import Engine
    from promem_fast.persistence.api import Database, Persistence
    from promem_fast.persistence.hits import Hit
    from promem_fast.types import MemoryGraph

    from .qa import RetrievalIndex


class StoreView(Protocol):
    db: Persistence
    config: EngineConfig
    update_judge: str
    update_neighbours: int
    update_min_cosine: float
    update_lookahead: int
    read_only: bool
    write_guard: Callable[[Database, str, MemoryGraph], bool] | None

    @property
    def location(self) -> str: ...

    @property
    def embedder(self) -> Embedder: ...

    def engine(self) -> Engine: ...

    def search_vector(self, user_pk: int, vector: np.ndarray, k: int, *, history: bool = False,
                      scope: tuple[str, tuple[Any, ...]] | None = None) -> list[Hit]: ...

    def retrieval_index(self, session_ids: Iterable[str], *, tenant: str = "default",
                        history: bool = False) -> RetrievalIndex: ...

    def user_id(self, tenant: str, user: str) -> int | None: ...

    def dim(self) -> int: ...

    def check_dim(self, dim: int | None) -> None: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...
