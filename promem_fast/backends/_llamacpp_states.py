"""Kept KV states of session blocks for the llama.cpp backend (see its module notes: kept session states)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np


class SessionStates:
    """KV states of token prefixes (session blocks), least recently used dropped first past ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._states: OrderedDict[bytes, Any] = OrderedDict()
        self.size = 0
        """Bytes held now."""
        self.restored = 0
        """States put back so far (each one a session block not evaluated again)."""

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.int32).tobytes()

    def get(self, tokens: Sequence[int]) -> Any:
        state = self._states.get(key := self._key(tokens))
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, tokens: Sequence[int], state: Any) -> None:
        if len(state) > self.budget:
            return
        self.drop(tokens)
        self._states[self._key(tokens)] = state
        self.size += len(state)
        while self.size > self.budget:
            self.size -= len(self._states.popitem(last=False)[1])

    def drop(self, tokens: Sequence[int]) -> None:
        state = self._states.pop(self._key(tokens), None)
        if state is not None:
            self.size -= len(state)

    def clear(self) -> None:
        self._states.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._states)
