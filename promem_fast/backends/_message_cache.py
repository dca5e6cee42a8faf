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
from promem_fast.times import day_of

CACHE_SIZE = 8192
"""Entries kept: enough for every prompt of a round of a full window of sessions."""

V = TypeVar("V")
_Key = tuple[Any, ...]


class MessageCache(Generic[V]):
    """``compute(messages)`` by message content, least recently used dropped first.

    Thread-safe (the OpenAI-compatible backend counts from a pool of threads); the value is computed
    outside the lock, so a slow computation never blocks another thread's lookups.
    """

    def __init__(self, compute: Callable[[Sequence[Message], str | None], V], size: int = CACHE_SIZE) -> None:
        self._compute = compute
        self._size = size
        self._values: OrderedDict[_Key, V] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[Message], date: str | None = None) -> V:
        key = (date, *((m["role"], m["content"]) for m in messages))
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = self._compute(messages, date)
        with self._lock:
            self._values[key] = value
            if len(self._values) > self._size:
                self._values.popitem(last=False)
        return value


def template_date(date: str | None) -> dict[str, str]:
    """Chat-template variables that set the template's own date to the session's day.

    Llama 3.1's template writes "Today Date: 26 Jul 2024" into every system header unless it is given
    ``date_string`` (in that "%d %b %Y" form); templates that print no date ignore the variable. The day is
    read by :func:`promem_fast.times.day_of`, the reader every other stage uses.
    """
    day = day_of(date)
    return {"date_string": day.strftime("%d %b %Y")} if day is not None else {}


def chat_template_ids(tokenizer: Any, lock: threading.Lock | None = None
                      ) -> Callable[[Sequence[Message], str | None], list[int]]:
    """The chat-template token ids of ``messages`` with the assistant turn opened, for a Hugging Face
    tokenizer (``apply_chat_template`` returns a list, or a ``BatchEncoding`` in transformers 5); extra
    keyword arguments of ``apply_chat_template`` reach the template, which is how the date gets there.

    Renders one at a time: the engine renders on the generation thread while session programs measure
    prompts on the driver's, and a Rust tokenizer used from two threads at once can fail ("Already borrowed").
    """
    lock = lock or threading.Lock()

    def render(messages: Sequence[Message], date: str | None = None) -> list[int]:
        with lock:
            rendered = tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True,
                                                     tokenize=True, **template_date(date))
        if isinstance(rendered, Mapping):
            rendered = rendered["input_ids"]
        return [int(t) for t in rendered]

    return render


__all__ = ["CACHE_SIZE", "MessageCache", "chat_template_ids", "template_date"]
