"""Random-weight models' cost with working stand-ins' answers, and the reply lengths the models are held to.

Random weights write unparseable text and give meaningless labels and vectors, so each model is wrapped in a
replay: every request really runs through the model (its seconds and token counts are what is measured),
then the answer handed to the engine is the stand-in's (scripted LLM, lexical NLI, hashing embedder), so each
session takes the branches a working model would. Model and stand-in seconds are kept apart.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from promem_fast.backends.base import (
    Completion,
    Embedder,
    GenerationRequest,
    LLMBackend,
    Message,
    NLIBackend,
    NLIResult,
)
from promem_fast.prompts import TEMPLATES
from promem_fast.testing.llm_scripted import ScriptedLLM

log = logging.getLogger("throughput")

PAPER_TOKENS_PER_SESSION = 13_470
"""Paper, Appendix B, Table 6: average tokens (prompts and completions of every call) per HaluMem session
for Llama-3.1-8B. It is the cost of processing a session, not the length of its dialogue."""
PAPER_STAGE_SHARES = {"draft": 0.2740, "cc": 0.1353, "hv": 0.1522, "da": 0.2472, "rel": 0.1908}
"""Table 6's split of those tokens over the stages (Initial Draft, CC, HV, DA, REL)."""
GENERATED_TOKENS_PER_SESSION = 2_000
"""Assumed generated tokens per session (about 15% of Table 6's total). An estimate: the paper does not
split prompt from completion tokens, and no Llama replies were measured here."""

COMPLETION_TOKENS: dict[str, int] = {
    "draft": 512, "event": 40, "decompose": 56, "adjudicate": 48, "nli": 8, "detail": 22,
    "relation": 96, "probe": 28, "answer_flat": 14, "verify_relation": 8,
}
"""Tokens each reply runs to under ``ignore_eos`` (random weights). Derivation, an estimate and not a
measurement of Llama replies: :data:`GENERATED_TOKENS_PER_SESSION` split over the stages by
:data:`PAPER_STAGE_SHARES` gives draft 548, CC 271, HV 304, DA 494 and REL 382 tokens per session; each
stage's share is divided over its roles by the calls per session this engine makes on the HaluMem sample
(draft 1.0, event 5.7, decompose 2.7, adjudicate 3.1, detail 23, relation 1.0, probe 5.2, answer_flat 5.2,
verify_relation 5.2) and by what each reply holds (a JSON list of about 24 facts for the draft, two
sentences per event reply, a short list of fragments per detail reply, one question per probe, a boolean
per verification). On the HaluMem sample this gave 1,787 generated tokens per session."""

ROLE_STAGE = {"draft": "draft", "event": "cc", "decompose": "hv", "adjudicate": "hv", "nli": "hv",
              "detail": "da", "relation": "rel", "probe": "rel", "answer_flat": "rel", "verify_relation": "rel"}
"""The stage each role's requests are issued in (``promem_fast.pipeline``), to attribute model seconds."""

REPLAY_MAX_TOKENS = 1 << 20
"""The scripted reply is asked with this budget so it is never cut; the model's own budget stays as sent."""


def role_of(messages: Sequence[Message]) -> str:
    """Which of the pipeline's role templates rendered ``messages`` (by the start of its task; ``?`` if none)."""
    user = messages[-1]["content"] if messages else ""
    for role, template in TEMPLATES.items():
        if user.startswith(template.task.split("{", 1)[0]):
            return role
    return "?"


@dataclasses.dataclass
class RoleTally:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    """Wall seconds of the real model's batches, shared over their requests by prompt + completion tokens
    (the engine's own rule for stage seconds)."""


class _Replay:
    """What the replays share: the real backend's seconds and the stand-in's, kept apart."""

    def __init__(self) -> None:
        self.model_seconds = 0.0
        self.replay_seconds = 0.0

    def _both(self, real: Callable[[], Any], stand_in: Callable[[], Any]) -> tuple[Any, Any, float]:
        """Run ``real`` (timed as the model) then ``stand_in`` (timed as replay); both results and the first's
        seconds."""
        started = time.perf_counter()
        got = real()
        middle = time.perf_counter()
        answer = stand_in()
        self.model_seconds += middle - started
        self.replay_seconds += time.perf_counter() - middle
        return got, answer, middle - started

    def seconds(self) -> dict[str, float]:
        return {"model_seconds": round(self.model_seconds, 3), "replay_seconds": round(self.replay_seconds, 3)}

    def reset(self) -> None:
        """Zero the tallies, so one loaded model can be measured under several engine runs."""
        self.model_seconds = 0.0
        self.replay_seconds = 0.0


class TimedReplay(_Replay):
    """A real model's cost with the scripted backend's words.

    ``generate`` sends every request to ``model`` (schemas removed: a random model cannot follow a grammar,
    and constrained decoding is not what is measured) and keeps its token counts; then it asks ``replay``
    (a :class:`ScriptedLLM`, with an unbounded budget so its replies are never cut) for the same requests and
    returns the scripted texts, which parse, so each session takes the branches a working model would.
    Model and replay seconds are kept apart; the engine sees both inside its ``generate`` backend time.

    ``chunk``: send the model one batch of this many requests at a time, formed as the transformers backend
    forms its own (sorted by prompt length, ties by position), so the batches are the same but every one
    is logged and tallied as it finishes: a run stopped at a time limit keeps all but the last. ``None``
    sends each engine call whole (vLLM schedules a whole call better than any split of it).
    """

    def __init__(self, model: LLMBackend, replay: ScriptedLLM | None = None, chunk: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.replay = replay or ScriptedLLM()
        self.chunk = chunk
        self.context_length = model.context_length
        self.batches = 0
        self.roles: dict[str, RoleTally] = {}

    def reset(self) -> None:
        super().reset()
        self.batches = 0
        self.roles = {}

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self.model.count_tokens(messages)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if not self.chunk or len(requests) <= self.chunk:
            return self._batch(requests)
        sizes = [self.model.count_tokens(r.messages) for r in requests]
        order = sorted(range(len(requests)), key=lambda i: (sizes[i], i))
        out: list[Completion | None] = [None] * len(requests)
        for start in range(0, len(order), self.chunk):
            chosen = order[start:start + self.chunk]
            for i, completion in zip(chosen, self._batch([requests[i] for i in chosen])):
                out[i] = completion
        return [c for c in out if c is not None]

    def _batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        real, words, seconds = self._both(
            lambda: self.model.generate([dataclasses.replace(r, schema=None) for r in requests]),
            lambda: self.replay.generate([dataclasses.replace(r, max_tokens=REPLAY_MAX_TOKENS) for r in requests]))
        self.batches += 1
        weights = [c.prompt_tokens + c.completion_tokens for c in real]
        total = sum(weights) or 1
        for request, completion, weight in zip(requests, real, weights):
            tally = self.roles.setdefault(role_of(request.messages), RoleTally())
            tally.calls += 1
            tally.prompt_tokens += completion.prompt_tokens
            tally.completion_tokens += completion.completion_tokens
            tally.model_seconds += seconds * weight / total
        log.info("generate batch %d: %d requests, %d prompt + %d completion tokens, %.2f s model (%.0f tok/s)",
                 self.batches, len(requests), sum(c.prompt_tokens for c in real),
                 sum(c.completion_tokens for c in real), seconds, sum(weights) / max(seconds, 1e-9))
        return [Completion(text=w.text, prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                           finish_reason=w.finish_reason) for c, w in zip(real, words)]


class ReplayNLI(_Replay):
    """A random NLI classifier's cost with the lexical checker's labels: random logits would send a share of
    entries to decomposition and adjudication that no trained model would, changing the LLM calls."""

    def __init__(self, model: NLIBackend, stand_in: NLIBackend) -> None:
        super().__init__()
        self.model, self.stand_in = model, stand_in

    def entail(self, pairs: Sequence[tuple[str, str]]) -> list[NLIResult]:
        return self._both(lambda: self.model.entail(pairs), lambda: self.stand_in.entail(pairs))[1]


class ReplayEmbedder(_Replay):
    """A random embedder's cost with the hashing embedder's vectors: random-weight vectors are nearly all
    alike (cosine 0.98 on average between unrelated HaluMem turns, MiniLM shape), which would change topic
    cuts, grounding and the completeness check, hence the calls."""

    def __init__(self, model: Embedder, stand_in: Embedder) -> None:
        super().__init__()
        self.model, self.stand_in = model, stand_in
        self.dim = stand_in.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._both(lambda: self.model.embed(texts), lambda: self.stand_in.embed(texts))[1]
