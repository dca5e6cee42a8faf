"""A chat backend that misbehaves on purpose, deterministically, for fault-injection tests."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM

REPLY_FAULTS = ("prose", "fence", "truncated", "non_json", "empty", "wrong_types", "other_language",
                "out_of_range")
RAISE_FAULTS = ("exception", "timeout")


def _to_chinese(value: Any) -> Any:
    if isinstance(value, str):
        return "用户上周搬到了新的城市并开始了新工作"
    if isinstance(value, list):
        return [_to_chinese(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_chinese(v) if isinstance(v, (str, list)) else v for k, v in value.items()}
    return value


def corrupt(kind: str, text: str) -> str:
    """``text`` (a valid JSON reply) damaged the way ``kind`` says."""
    if kind == "prose":
        return f"Sure! Here is what I found:\n{text}\nLet me know if you need anything else."
    if kind == "fence":
        return f"```json\n{text}\n```"
    if kind == "truncated":
        return text[: max(1, int(len(text) * 0.7))]
    if kind == "non_json":
        return "The user seems to enjoy talking about their life."
    if kind == "empty":
        return ""
    value = json.loads(text)
    if kind == "wrong_types":
        return json.dumps({k: "a, b, c" if isinstance(v, list) else ["x"] for k, v in value.items()})
    if kind == "other_language":
        return json.dumps(_to_chinese(value), ensure_ascii=False)
    if kind == "out_of_range":
        if "links" in value:  # a relation reply: [source, type, target] triples
            value["links"].append([0, "causal", 17])
        return json.dumps(value)
    raise ValueError(kind)


class FaultyLLM(ScriptedLLM):
    """The scripted model, with a fault chosen per request from a hash of its prompt.

    ``rate`` of first attempts get a fault from ``kinds``; ``sticky`` of those keep it on every retry
    (a request that can never succeed). Exceptions fail the whole batch that holds the request.
    """

    def __init__(self, kinds: Sequence[str], rate: float = 0.3, sticky: float = 0.3, **kw: Any) -> None:
        super().__init__(**kw)
        self.kinds = tuple(kinds)
        self.rate, self.sticky = rate, sticky
        self.injected: Counter[str] = Counter()

    def fault_for(self, request: GenerationRequest) -> str | None:
        h = zlib.crc32(json.dumps(request.messages, sort_keys=True).encode())
        if (h % 1000) / 1000 >= self.rate:
            return None
        if request.seed != self.config.seed and ((h >> 10) % 1000) / 1000 >= self.sticky:
            return None
        return self.kinds[(h >> 20) % len(self.kinds)]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        faults = [self.fault_for(r) for r in requests]
        for fault in faults:
            if fault in RAISE_FAULTS:
                self.injected[fault] += 1
                raise (TimeoutError("backend timed out (injected)") if fault == "timeout"
                       else RuntimeError("CUDA out of memory (injected)"))
        out = super().generate(requests)
        for i, fault in enumerate(faults):
            if fault is not None:
                self.injected[fault] += 1
                c = out[i]
                out[i] = Completion(corrupt(fault, c.text), c.prompt_tokens, c.completion_tokens, c.finish_reason)
        return out
