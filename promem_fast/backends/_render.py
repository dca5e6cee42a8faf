"""Chat-template rendering with a bounded cache, shared by the backends that tokenize in Python.

The engine measures every prompt (``count_tokens``) before it sends it (``generate``), so without a cache
each prompt's chat template is rendered and tokenized twice; with it, once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from promem_fast.backends.base import Message

CACHE_SIZE = 8192
"""Rendered prompts kept: enough for every prompt of a round of a full window of sessions."""

_Key = tuple[tuple[str, str], ...]


def as_ids(rendered: Any) -> list[int]:
    """Token ids from ``apply_chat_template(tokenize=True)``: a list, or a ``BatchEncoding`` (transformers 5)."""
    if isinstance(rendered, Mapping):
        rendered = rendered["input_ids"]
    return [int(t) for t in rendered]


class RenderCache:
    """``messages`` → chat-template token ids (assistant turn opened), least recently used dropped first."""

    def __init__(self, tokenizer: Any, size: int = CACHE_SIZE) -> None:
        self._tokenizer = tokenizer
        self._size = size
        self._ids: OrderedDict[_Key, list[int]] = OrderedDict()

    def __call__(self, messages: Sequence[Message]) -> list[int]:
        key = tuple((m["role"], m["content"]) for m in messages)
        ids = self._ids.get(key)
        if ids is None:
            ids = as_ids(self._tokenizer.apply_chat_template([dict(m) for m in messages],
                                                             add_generation_prompt=True, tokenize=True))
            self._ids[key] = ids
            if len(self._ids) > self._size:
                self._ids.popitem(last=False)
        else:
            self._ids.move_to_end(key)
        return ids


__all__ = ["CACHE_SIZE", "RenderCache", "as_ids"]
