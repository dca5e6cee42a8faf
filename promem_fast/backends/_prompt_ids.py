"""Prompt token ids with each session's leading system turn tokenized once, not once per prompt.

Every pipeline prompt of a session is ``(system: the session block, user: role instructions + item)``
(:mod:`promem_fast.prompts`), and the block carries the whole dialogue: tokenizing each 3-4K-token prompt
whole re-tokenizes that dialogue for every one of a session's ~16 requests. Here the chat template is
rendered to text, the text is cut where the rendered system turn ends (the template rendered with the
system message alone, no generation prompt), that prefix is tokenized once per (system text, date) and
kept, and only the rest is tokenized per prompt.

Tokenizing two pieces gives the ids of tokenizing the whole only when the cut falls where the tokenizer
itself would cut (after a special token such as ChatML's ``<|im_end|>``, whose text is split off before any
merging). The engine's rule is that the ids counted are the ids sent, so the split is checked, per
instance, on the first prompt it sees: prefix + suffix ids must equal the whole prompt's ids. If they do
not (a template whose system turn ends inside ordinary text, a tokenizer that adds a prefix space to each
piece), or the template cannot render a system turn alone, every prompt is tokenized whole from then on,
said once in the log. A prompt whose text does not start with its cached prefix, or has no system turn,
is tokenized whole too.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from promem_fast.backends._message_cache import chat_template_ids, template_date
from promem_fast.deps import require
from promem_fast.errors import BackendError
from promem_fast.types import Message

logger = logging.getLogger(__name__)

PREFIXES = 1024
"""Prefixes kept (least recently used dropped first): more than the sessions of a full window, so a prefix
stays while its session runs. Kept as 32-bit arrays (about 16 KB for a 4K-token block)."""

RenderText = Callable[[Sequence[Message], "str | None", bool], str]
"""``(messages, date, add_generation_prompt)`` → the chat template's text."""


class PrefixSplitIds:
    """``(messages, date)`` → token ids, the leading system turn tokenized once per distinct one.

    ``render`` renders the template to text, ``tokenize`` turns text into ids the way the backend's whole
    prompt is tokenized, ``whole`` gives the whole prompt's ids as before (the reference of the check).
    Thread-safe: the render and tokenizer calls run under one lock (a Rust tokenizer used from two threads
    at once can fail), the prefix table under its own.
    """

    def __init__(self, render: RenderText, tokenize: Callable[[str], list[int]],
                 whole: Callable[[Sequence[Message], str | None], list[int]], *, name: str = "tokenizer",
                 prefixes: int = PREFIXES, lock: threading.Lock | None = None) -> None:
        self._render = render
        self._tokenize = tokenize
        self._whole_ids = whole
        self._name = name
        self._size = prefixes
        self._prefixes: OrderedDict[tuple[str, str | None], tuple[str, array]] = OrderedDict()
        self._lock = lock or threading.Lock()
        """Held around render and tokenizer calls (share it with ``whole`` when both use one tokenizer)."""
        self._table_lock = threading.Lock()
        self.split: bool | None = None
        """None until the first prompt is checked; then whether prompts are tokenized in two pieces."""
        self.prefix_tokenizations = 0
        """Prefixes tokenized so far (one per distinct system turn and date, while it stays cached)."""

    def whole(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        """The prompt tokenized whole (the reference; what every prompt gets when the split is off)."""
        return self._whole_ids(messages, date)

    def __call__(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        if self.split is False or not messages or messages[0]["role"] != "system":
            return self.whole(messages, date)
        if self.split is None:
            return self._check(messages, date)
        ids = self._split(messages, date)
        return ids if ids is not None else self.whole(messages, date)

    def system_length(self, messages: Sequence[Message], date: str | None = None) -> int:
        """How many leading ids of the prompt are its system turn (its session block), once the split is on;
        0 when it is off or undecided, or the prompt has no system turn: the point where a backend can keep
        a session's KV state apart from the role's text that follows."""
        if not self.split or not messages or messages[0]["role"] != "system":
            return 0
        return len(self._prefix(messages[0], date)[1])

    def _check(self, messages: Sequence[Message], date: str | None) -> list[int]:
        """The first prompt: tokenized both ways; the split is kept only when the ids agree."""
        whole = self.whole(messages, date)
        try:
            split = self._split(messages, date)
        except Exception as exc:  # a template that cannot render the system turn alone, a tokenizer without text
            logger.info("%s: prompts tokenized whole (the system turn could not be tokenized apart: %s: %s)",
                        self._name, type(exc).__name__, exc)
            self.split = False
            return whole
        self.split = split == whole
        if not self.split:
            logger.info("%s: prompts tokenized whole (the ids of the system turn and the rest tokenized apart "
                        "differ from the whole prompt's)", self._name)
            with self._table_lock:
                self._prefixes.clear()
        return whole

    def _split(self, messages: Sequence[Message], date: str | None) -> list[int] | None:
        with self._lock:
            text = self._render(messages, date, True)
        prefix_text, prefix_ids = self._prefix(messages[0], date)
        if not text.startswith(prefix_text):
            return None
        with self._lock:
            rest = self._tokenize(text[len(prefix_text):])
        return prefix_ids.tolist() + list(rest)

    def _prefix(self, system: Message, date: str | None) -> tuple[str, array]:
        key = (system["content"], date)
        with self._table_lock:
            found = self._prefixes.get(key)
            if found is not None:
                self._prefixes.move_to_end(key)
                return found
        with self._lock:
            text = self._render([system], date, False)
            ids = array("i", self._tokenize(text))
        with self._table_lock:
            self.prefix_tokenizations += 1
            self._prefixes[key] = (text, ids)
            if len(self._prefixes) > self._size:
                self._prefixes.popitem(last=False)
        return text, ids


def hf_prompt_ids(tokenizer: Any, name: str) -> PrefixSplitIds:
    """:func:`chat_template_ids` with each session's system turn tokenized once (:class:`PrefixSplitIds`):
    the template rendered to text, the text tokenized as ``apply_chat_template`` does (no added special
    tokens), checked against :func:`chat_template_ids` on the first prompt."""
    lock = threading.Lock()

    def text(messages: Sequence[Message], date: str | None, generation: bool) -> str:
        return str(tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=generation,
                                                 tokenize=False, **template_date(date)))

    def tokenize(piece: str) -> list[int]:
        return [int(t) for t in tokenizer(piece, add_special_tokens=False)["input_ids"]]

    return PrefixSplitIds(text, tokenize, chat_template_ids(tokenizer, lock), name=name, lock=lock)


def llama_prompt_ids(llm: Any, template: str, name: str) -> PrefixSplitIds:
    """Prompt ids for a ``llama_cpp.Llama`` (a vocabulary-only load is enough) and its GGUF chat template,
    rendered by llama-cpp-python's own Jinja formatter and tokenized as its chat handler does (special
    tokens parsed, no extra BOS: the template writes its own)."""
    chat_format = require("llama_cpp.llama_chat_format", "cpu", "llama-cpp-python")

    def special(token: int) -> str:
        return "" if token < 0 else llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    formatters = {generation: chat_format.Jinja2ChatFormatter(
        template=template, eos_token=special(llm.token_eos()), bos_token=special(llm.token_bos()),
        add_generation_prompt=generation) for generation in (True, False)}

    def text(messages: Sequence[Message], date: str | None, generation: bool) -> str:
        try:
            return str(formatters[generation](messages=[dict(m) for m in messages], **template_date(date)).prompt)
        except Exception as exc:  # the template's own raise_exception and Jinja errors alike
            raise BackendError(f"the chat template of {name} rejected the messages: {exc}") from exc

    def tokenize(piece: str) -> list[int]:
        return list(llm.tokenize(piece.encode("utf-8"), add_bos=False, special=True))

    lock = threading.Lock()

    def whole(messages: Sequence[Message], date: str | None) -> list[int]:
        with lock:
            return tokenize(text(messages, date, True))

    return PrefixSplitIds(text, tokenize, whole, name=name, lock=lock)


__all__ = ["PREFIXES", "PrefixSplitIds", "hf_prompt_ids", "llama_prompt_ids"]
