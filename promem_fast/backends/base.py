"""The four small protocols every model service implements.

The engine only ever talks to these. Each method is batch-first (an LLM backend may add the
submit/complete :class:`GenerationStream`, which the continuous driver prefers): it takes every pending request of one
kind from all sessions in flight, so a GPU backend can fill its batch and a CPU backend can sort by length.
A backend must answer a request the same way whatever else is in the batch (the engine's output is
promised to be independent of batch size and window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from promem_fast.types import Message

NLILabel = Literal["entailment", "neutral", "contradiction"]

TIE_TOLERANCE = 1e-5
"""Scores this close to a row's best count as tied with it, and the lowest index among them wins.

Exact float equality is not a usable notion of a tie: BLAS kernels round a dot product differently
depending on where a row sits in the matrix and on how many queries share the call, so two identical keys
(a repeated "ok, thanks" turn) can score one ulp apart. Float32 rounding of a unit-vector inner product
stays well below this for the dimensions in use (384 to 4096), and cosines that close are the same match."""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One chat completion to run.

    ``schema`` is the JSON schema the answer must satisfy; backends that can constrain decoding
    (grammars, structured outputs) must enforce it, others just pass it on as an instruction.
    ``seed`` and ``temperature`` change only on retries of a reply that did not parse.
    """

    messages: tuple[Message, ...]
    schema: Mapping[str, Any] | None
    max_tokens: int
    seed: int = 0
    temperature: float = 0.0
    prompt_ids: tuple[int, ...] | None = None
    """The prompt already rendered and tokenized by the backend's :class:`Encoder` ``encode`` (backends that
    have one); a backend sends these ids as they are, so the ids the engine counted are the ids sent."""
    date: str | None = None
    """The session's date (``2025-05-01``) for chat templates that write a date of their own into the
    system header (Llama 3.1's "Today Date"), so the header agrees with the date the prompt gives."""


@dataclass(frozen=True, slots=True)
class Completion:
    """A backend's answer with the token counts the engine accounts for."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: Literal["stop", "length", "loop"] = "stop"
    """``length``: cut by ``max_tokens``; ``loop``: stopped early because it repeated itself verbatim
    (:mod:`promem_fast.loops`), a cut whose rest would have been more of the same."""


@runtime_checkable
class LLMBackend(Protocol):
    """Chat model. ``context_length`` is the window in tokens; ``count_tokens`` uses the model's own
    tokenizer and chat template so the engine can check every prompt before it is sent."""

    context_length: int

    def count_tokens(self, messages: Sequence[Message]) -> int: ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]: ...


@runtime_checkable
class Encoder(Protocol):
    """An LLM backend that can render and tokenize a prompt once, ahead of sending it: the engine calls
    ``encode`` off the generation thread's critical path and puts the ids in
    :attr:`GenerationRequest.prompt_ids`, which ``generate`` / ``submit`` then send unchanged."""

    def encode(self, messages: Sequence[Message], date: str | None = None) -> list[int]: ...


@runtime_checkable
class GenerationStream(Protocol):
    """Submit/complete: requests go in one at a time as sessions post them, answers come out as they finish.

    ``submit`` must not block on generation; ``complete`` waits up to ``timeout`` seconds (``None``: until
    at least one request finishes, when any is pending) and returns the requests finished since the last
    call as ``(key, Completion or the exception that request raised)``, in any order. An exception raised
    by ``complete`` itself means the backend is gone. An LLM backend offers one through ``open_stream()``;
    one that has none (or whose ``open_stream`` returns None) is driven through ``generate`` by the
    engine's batch adapter.
    """

    def submit(self, key: int, request: GenerationRequest) -> None: ...

    def complete(self, timeout: float | None) -> list[tuple[int, Completion | BaseException]]: ...

    def pending(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class NLIResult:
    """Label plus probabilities in the fixed order (entailment, neutral, contradiction)."""

    label: NLILabel
    scores: tuple[float, float, float]


@runtime_checkable
class NLIBackend(Protocol):
    """Natural language inference over (premise, hypothesis) pairs."""

    def entail(self, pairs: Sequence[tuple[str, str]]) -> list[NLIResult]: ...


@runtime_checkable
class Embedder(Protocol):
    """Sentence embeddings. Rows come back L2-normalised as float32, so a dot product is a cosine.

    One embedder serves several threads at once (the engine's embedding lane, a store's searches and writes), so
    an implementation guards whatever is not thread-safe in it: a Rust tokenizer called from two threads at
    once can fail ("Already borrowed")."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class Similarity(Protocol):
    """Best match of each query row among key rows, many independent (queries, keys) pairs per call.

    For each pair ``(Q (m, d), K (n, d))`` of normalised float32 rows it returns ``(index (m,) int64,
    score (m,) float32)``: the key with the highest inner product, the lowest index among keys within
    :data:`TIE_TOLERANCE` of it. With no keys
    (``n == 0``) every index is -1 and every score is ``-inf``.
    """

    def top1(self, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]: ...


def check_pair(queries: np.ndarray, keys: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
    """Both matrices as C-contiguous float32 (no copy when they already are), shapes checked.

    FAISS reads raw row-major float32 buffers, so anything else would be misread rather than rejected.
    """
    q = np.ascontiguousarray(queries, dtype=np.float32)
    k = np.ascontiguousarray(keys, dtype=np.float32)
    if q.ndim != 2 or k.ndim != 2:
        raise ValueError(f"pair {position}: queries and keys must be 2-D, got shapes {q.shape} and {k.shape}")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"pair {position}: query dim {q.shape[1]} differs from key dim {k.shape[1]}")
    if q.shape[1] == 0:
        raise ValueError(f"pair {position}: vectors have dimension 0")
    return q, k


def no_match(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The contract's answer when there are no keys: index -1, score -inf for each of ``m`` queries."""
    return np.full(m, -1, dtype=np.int64), np.full(m, -np.inf, dtype=np.float32)


def prepare_pairs(pairs: Sequence[tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]], list[int]]:
    """Checked float32 pairs, results already settled for pairs with no queries or no keys, and the
    positions of the pairs that still need a search (shared by every :class:`Similarity` backend)."""
    results: list[tuple[np.ndarray, np.ndarray]] = [no_match(0)] * len(pairs)
    checked: list[tuple[np.ndarray, np.ndarray]] = []
    work: list[int] = []
    for position, (queries, keys) in enumerate(pairs):
        q, k = check_pair(queries, keys, position)
        checked.append((q, k))
        if q.shape[0] == 0:
            results[position] = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        elif k.shape[0] == 0:
            results[position] = no_match(q.shape[0])
        else:
            work.append(position)
    return results, checked, work


def label_from_scores(scores: Sequence[float]) -> NLILabel:
    """The arg-max label of (entailment, neutral, contradiction) scores; ties go to the earlier label."""
    order: tuple[NLILabel, ...] = ("entailment", "neutral", "contradiction")
    return order[int(np.argmax(np.asarray(scores, dtype=np.float64)))]


@runtime_checkable
class Compressor(Protocol):
    """Prompt compression by token classification (LLMLingua-2).

    ``compress`` keeps about ``rate`` of each text's tokens, always keeping ``force_tokens`` and the words
    the model is most confident about; ``sentence_attention`` gives, for consecutive sentences, the
    row-normalised sentence-to-sentence attention of the encoder that LightMem's coarse cut reads.
    """

    def compress(self, texts: Sequence[str], rate: float, force_tokens: Sequence[str] = ()) -> list[str]: ...

    def sentence_attention(self, sentences: Sequence[str]) -> np.ndarray: ...
