"""What the ONNX and torch NLI backends share: pair encoding with premise windows, length-sorted batching,
the model's label order, and the final decision. Only the forward pass differs between them.

Premise windows: a grounded turn can be longer than the model's input. Truncating it would hide the part
that supports (or contradicts) the entry, so the premise is cut into overlapping token windows, each
paired with the full hypothesis, and the window with the highest entailment probability speaks for the pair.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from promem_fast.backends.base import NLILabel, NLIResult, label_from_scores
from promem_fast.config import NLIConfig
from promem_fast.errors import ConfigError

log = logging.getLogger(__name__)

LABELS: tuple[NLILabel, ...] = ("entailment", "neutral", "contradiction")
LABEL_PREFIXES: tuple[tuple[str, NLILabel], ...] = (
    ("entail", "entailment"), ("neutral", "neutral"), ("contradict", "contradiction"),
)
"""Name prefixes accepted in ``id2label`` (case-insensitive): covers ENTAILMENT / entailed / contradict…"""

MIN_PREMISE_TOKENS = 8
"""A hypothesis is cut short rather than leave fewer premise tokens than this in each window."""

UNBOUNDED_LENGTH = 1_000_000
"""Tokenizers without a known limit report a huge ``model_max_length``; anything above this means 'unknown'."""


def label_columns(id2label: Mapping[Any, str], source: str) -> np.ndarray:
    """Column of the model's output holding each of (entailment, neutral, contradiction).

    The order differs between models (roberta-large-mnli: CONTRADICTION, NEUTRAL, ENTAILMENT; many
    others: entailment, neutral, contradiction), so it is read from the model's ``config.json``.
    """
    columns: dict[NLILabel, int] = {}
    for key, name in id2label.items():
        normalised = str(name).strip().lower()
        for prefix, label in LABEL_PREFIXES:
            if normalised.startswith(prefix):
                if label in columns:
                    raise ConfigError(f"{source}: id2label names {label!r} twice: {dict(id2label)}")
                columns[label] = int(key)
    if len(id2label) != 3 or len(columns) != 3:
        raise ConfigError(
            f"{source}: an NLI model needs exactly three labels named entailment / neutral / contradiction "
            f"(any case) in config.json id2label; found {dict(id2label)}"
        )
    return np.array([columns[label] for label in LABELS], dtype=np.int64)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (fp16 logits would otherwise lose the small probabilities)."""
    shifted = logits.astype(np.float64) - logits.astype(np.float64).max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def decide(scores: Sequence[float], threshold: float) -> NLIResult:
    """Arg-max label, except that entailment must also reach ``threshold``; failing that, the better of the
    two other labels is returned (the entry is not accepted on a weak majority)."""
    triple = (float(scores[0]), float(scores[1]), float(scores[2]))
    label = label_from_scores(triple)
    if label == "entailment" and triple[0] < threshold:
        label = "neutral" if triple[1] >= triple[2] else "contradiction"
    return NLIResult(label=label, scores=triple)


@dataclass(frozen=True)
class PairTemplate:
    """The special tokens a tokenizer puts around a (first, second) pair, with their token type ids.

    Learnt once from one encoded probe pair, so windows can be assembled from token ids directly with any
    tokenizer (BERT ``[CLS] a [SEP] b [SEP]``, RoBERTa ``<s> a </s></s> b </s>``, …) and the result is
    exactly what the tokenizer itself would produce for that pair.
    """

    prefix: tuple[int, ...]
    middle: tuple[int, ...]
    suffix: tuple[int, ...]
    types: tuple[tuple[int, ...], int, tuple[int, ...], int, tuple[int, ...]] | None
    """Token type ids of (prefix, first, middle, second, suffix), or ``None`` if the model takes none."""

    @property
    def special_count(self) -> int:
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    @classmethod
    def probe(cls, tokenizer: Any) -> PairTemplate:
        first_text, second_text = "premise words", "hypothesis words"
        first = list(tokenizer(first_text, add_special_tokens=False)["input_ids"])
        second = list(tokenizer(second_text, add_special_tokens=False)["input_ids"])
        want_types = "token_type_ids" in tokenizer.model_input_names
        encoded = tokenizer(first_text, second_text, return_token_type_ids=want_types)
        full = list(encoded["input_ids"])
        for i in range(len(full) - len(first) + 1):
            if full[i : i + len(first)] != first:
                continue
            for j in range(i + len(first), len(full) - len(second) + 1):
                if full[j : j + len(second)] == second:
                    a, b, c = i, i + len(first), j
                    d = j + len(second)
                    types = None
                    if want_types:
                        t = list(encoded["token_type_ids"])
                        types = (tuple(t[:a]), t[a], tuple(t[b:c]), t[c], tuple(t[d:]))
                    return cls(tuple(full[:a]), tuple(full[b:c]), tuple(full[d:]), types)
        raise ConfigError(f"cannot learn how {type(tokenizer).__name__} encodes a text pair (ids {full})")

    def build(self, first: Sequence[int], second: Sequence[int]) -> tuple[list[int], list[int] | None]:
        """Input ids (and token type ids) of the pair, specials included."""
        ids = [*self.prefix, *first, *self.middle, *second, *self.suffix]
        if self.types is None:
            return ids, None
        pre, t_first, mid, t_second, suf = self.types
        type_ids = [*pre, *([t_first] * len(first)), *mid, *([t_second] * len(second)), *suf]
        return ids, type_ids


def window_starts(length: int, budget: int, stride: int) -> list[int]:
    """Start offsets of premise windows of ``budget`` tokens covering ``length`` tokens.

    Consecutive windows overlap by ``stride`` tokens (at most half a window, so progress is always at least
    half a window); the last window ends exactly at the end instead of holding a short tail.
    """
    if length <= budget:
        return [0]
    overlap = min(stride, budget // 2)
    step = budget - overlap
    starts = list(range(0, length - budget, step))
    starts.append(length - budget)
    return starts


@dataclass(frozen=True)
class Window:
    """One model input: a premise window of pair ``pair`` followed by its hypothesis."""

    pair: int
    input_ids: list[int]
    token_type_ids: list[int] | None


class PairEncoder:
    """Turns (premise, hypothesis) pairs into model-ready windows of at most ``max_length`` tokens."""

    def __init__(self, tokenizer: Any, max_length: int, stride: int) -> None:
        limit = int(getattr(tokenizer, "model_max_length", UNBOUNDED_LENGTH) or UNBOUNDED_LENGTH)
        if limit < UNBOUNDED_LENGTH and max_length > limit:
            log.info("nli.max_length %d exceeds the model's %d tokens; using %d", max_length, limit, limit)
            max_length = limit
        self.tokenizer = tokenizer
        self.template = PairTemplate.probe(tokenizer)
        if max_length < self.template.special_count + 2 * MIN_PREMISE_TOKENS:
            raise ConfigError(f"nli.max_length = {max_length} leaves no room for a premise and a hypothesis")
        self.max_length = max_length
        self.stride = max(0, stride)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[Window]:
        """All windows of all pairs, in pair order (tokenised in two batched tokenizer calls)."""
        # verbose=False: premises longer than the model are expected here (they get windowed), not a mistake.
        premises = self.tokenizer([p for p, _ in pairs], add_special_tokens=False, verbose=False)["input_ids"]
        hypotheses = self.tokenizer([h for _, h in pairs], add_special_tokens=False, verbose=False)["input_ids"]
        windows: list[Window] = []
        for index, (premise, hypothesis) in enumerate(zip(premises, hypotheses, strict=True)):
            room = self.max_length - self.template.special_count
            if len(hypothesis) > room - MIN_PREMISE_TOKENS:
                log.warning("pair %d: hypothesis of %d tokens cut to %d to fit nli.max_length", index,
                            len(hypothesis), room - MIN_PREMISE_TOKENS)
                hypothesis = hypothesis[: room - MIN_PREMISE_TOKENS]
            budget = room - len(hypothesis)
            for start in window_starts(len(premise), budget, self.stride):
                ids, types = self.template.build(premise[start : start + budget], hypothesis)
                windows.append(Window(index, ids, types))
        return windows


def batches(
    windows: Sequence[Window], batch_size: int, pad_id: int
) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Length-sorted, padded int64 batches: ``(window positions, {input_ids, attention_mask, token_type_ids})``.

    Longest first, so a batch that does not fit in memory fails on the first call rather than the last;
    sorting keeps padding (wasted compute) small. Every batch carries token type ids (zeros when the model
    takes none) and the backend passes the inputs its model declares.
    """
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i].input_ids))
    for start in range(0, len(order), max(1, batch_size)):
        chosen = np.asarray(order[start : start + batch_size], dtype=np.int64)
        width = max(len(windows[i].input_ids) for i in chosen)
        input_ids = np.full((len(chosen), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(chosen), width), dtype=np.int64)
        type_ids = np.zeros((len(chosen), width), dtype=np.int64)
        for row, i in enumerate(chosen):
            window = windows[i]
            n = len(window.input_ids)
            input_ids[row, :n] = window.input_ids
            mask[row, :n] = 1
            if window.token_type_ids is not None:
                type_ids[row, :n] = window.token_type_ids
        yield chosen, {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": type_ids}


class WindowedNLI(ABC):
    """``entail`` for any sequence-classification NLI model; subclasses provide :meth:`logits`.

    Per call: encode every pair into windows, run length-sorted batches of ``config.batch_size``, map the
    model's label columns to (entailment, neutral, contradiction), keep each pair's best-entailment
    window, decide the label. Results come back in input order.
    """

    def __init__(self, tokenizer: Any, id2label: Mapping[Any, str], config: NLIConfig, source: str) -> None:
        self.encoder = PairEncoder(tokenizer, config.max_length, config.stride)
        self.columns = label_columns(id2label, source)
        self.batch_size = config.batch_size
        self.threshold = config.threshold

    @abstractmethod
    def logits(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        """Raw ``(rows, num_labels)`` logits of one padded batch."""

    def entail(self, pairs: Sequence[tuple[str, str]]) -> list[NLIResult]:
        if not pairs:
            return []
        windows = self.encoder.encode(pairs)
        probs = np.empty((len(windows), 3), dtype=np.float64)
        for chosen, batch in batches(windows, self.batch_size, self.encoder.pad_id):
            probs[chosen] = softmax(np.asarray(self.logits(batch)))[:, self.columns]
        best = np.full(len(pairs), -1, dtype=np.int64)
        for position, window in enumerate(windows):
            current = best[window.pair]
            if current < 0 or probs[position, 0] > probs[current, 0]:
                best[window.pair] = position
        return [decide(probs[b], self.threshold) for b in best]
