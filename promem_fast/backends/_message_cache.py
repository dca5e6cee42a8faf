"""A bounded cache of values computed from chat messages, shared by the LLM backends.

The engine measures every prompt (``count_tokens``) before it sends it (``generate``), and measures the
same turn texts for several stages: without a cache each prompt's chat template would be rendered and
tokenized (or, for a server, counted over HTTP) more than once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from promem_fast.backends.base import Message

CACHE_SIZE = 8192
"""Entries kept: enough for every prompt of a round of a full window of sessions."""

V = TypeVar("V")
_Key = tuple[tuple[str, str], ...]


class MessageCache(Generic[V]):
    """``compute(messages)`` by message content, least recently used dropped first.

    Thread-safe (the OpenAI-compatible backend counts from a pool of threads); the value is computed
    outside the lock, so a slow computation never blocks another thread's lookups.
    """

    def __init__(self, compute: Callable[[Sequence[Message]], V], size: int = CACHE_SIZE) -> None:
        self._compute = compute
        self._size = size
        self._values: OrderedDict[_Key, V] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[Message]) -> V:
        key = tuple((m["role"], m["content"]) for m in messages)
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = self._compute(messages)
        with self._lock:
            self._values[key] = value
            if len(self._values) > self._size:
                self._values.popitem(last=False)
        return value


def chat_template_ids(tokenizer: Any) -> Callable[[Sequence[Message]], list[int]]:
    """The chat-template token ids of ``messages`` with the assistant turn opened, for a Hugging Face
    tokenizer (``apply_chat_template`` returns a list, or a ``BatchEncoding`` in transformers 5)."""

    def render(messages: Sequence[Message]) -> list[int]:
        rendered = tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True,
                                                 tokenize=True)
        if isinstance(rendered, Mapping):
            rendered = rendered["input_ids"]
        return [int(t) for t in rendered]

    return render


__all__ = ["CACHE_SIZE", "MessageCache", "chat_template_ids"]
