"""Stand-in for ``vllm.sampling_params`` with the public field names of vllm >= 0.12.

Only the constructor surface matters to the backend under test: the same keyword names and defaults as
vLLM's ``SamplingParams`` and ``StructuredOutputsParams``, no catch-all, so a misspelt or removed argument
fails here as it would on a GPU box. Internal fields (set by vLLM after construction) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class RequestOutputKind(Enum):
    """What ``LLMEngine.step`` reports for a running request: everything so far, the new part, or only the end."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class StructuredOutputsParams:
    """One decoding constraint; vLLM rejects zero or several of them at construction."""

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None

    def __post_init__(self) -> None:
        count = sum(value is not None for value in (
            self.json, self.regex, self.choice, self.grammar, self.json_object, self.structural_tag))
        if count != 1:
            raise ValueError(f"exactly one structured outputs constraint is needed, got {count}")


@dataclass
class SamplingParams:
    """The user-facing fields of ``vllm.SamplingParams`` (a msgspec struct there, keyword-constructed)."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputsParams | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise TypeError("structured_outputs must be a StructuredOutputsParams")
