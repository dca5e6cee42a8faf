"""A CPU stand-in for the parts of vLLM (>= 0.12) that :mod:`promem_fast.backends.llm_vllm` touches.

``LLM`` keeps vLLM's constructor, ``generate``, ``chat`` and ``get_tokenizer`` signatures. vLLM's
constructor forwards ``**kwargs`` to the ``EngineArgs`` dataclass, which rejects unknown names; the
stand-in does the same against a list of real engine-argument names. Every call is recorded on
the instance, and the replies are canned ``RequestOutput``-shaped objects produced by ``LLM.responder``,
which a test may replace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

__all__ = [
    "LLM", "CompletionOutput", "LLMEngine", "RequestOutput", "RequestOutputKind", "SamplingParams",
    "StructuredOutputsParams",
]

ENGINE_ARGS = frozenset({
    "max_model_len", "enable_prefix_caching", "load_format", "max_num_seqs", "max_num_batched_tokens",
    "disable_log_stats", "enable_chunked_prefill", "block_size", "kv_cache_dtype", "download_dir",
    "pipeline_parallel_size", "distributed_executor_backend", "max_logprobs", "generation_config",
    "async_scheduling", "data_parallel_size", "num_gpu_blocks_override",
})
"""Engine arguments vLLM accepts through ``LLM(**kwargs)`` (a subset of ``EngineArgs`` fields)."""

instances: list[LLM] = []
"""Every ``LLM`` built since import, so a test can reach the one a backend holds."""


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool


class FakeTokenizer:
    """One token per whitespace-separated word, two per message frame, one for the assistant header."""

    def __init__(self, as_batch_encoding: bool = False) -> None:
        self.as_batch_encoding = as_batch_encoding
        self.vocab: dict[str, int] = {}
        self.tokenized: list[str] = []
        """Every text given to the tokenizer itself (``__call__``)."""
        self.template_kwargs: list[dict[str, Any]] = []
        """The extra template variables of every render (a real template reads ``date_string``)."""

    def _id(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab) + 10)

    def apply_chat_template(self, conversation: list[dict[str, str]], tools: Any = None, documents: Any = None,
                            chat_template: str | None = None, add_generation_prompt: bool = False,
                            continue_final_message: bool = False, tokenize: bool = True,
                            **kwargs: Any) -> Any:
        self.template_kwargs.append(dict(kwargs))
        ids: list[int] = []
        if "date_string" in kwargs:  # like Llama 3.1's system header, which prints the date it is given
            ids += [self._id("Today"), self._id("Date:"), *(self._id(w) for w in str(kwargs["date_string"]).split())]
        for message in conversation:
            ids += [1, self._id("<" + message["role"] + ">")]
            ids += [self._id(w) for w in message["content"].split()]
        if add_generation_prompt:
            ids.append(2)
        if not tokenize:
            return " ".join(map(str, ids))
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if self.as_batch_encoding else ids

    def __call__(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> dict[str, list[int]]:
        """Text as the template renders it (token ids written out) back to ids; every text is recorded."""
        self.tokenized.append(text)
        ids = [int(word) for word in text.split()]
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}


@dataclass
class ModelConfig:
    max_model_len: int


@dataclass
class CacheConfig:
    """vLLM's ``CacheConfig``: ``num_gpu_blocks`` is filled in once the engine has sized its KV cache (the
    V1 engine core reports it to the front end at start-up); a KV block holds ``block_size`` tokens."""

    block_size: int = 16
    num_gpu_blocks: int | None = None


@dataclass
class VllmConfig:
    model_config: ModelConfig
    cache_config: CacheConfig

DEFAULT_GPU_BLOCKS = 4096
"""KV blocks the stand-in reports unless ``num_gpu_blocks_override`` (a real engine argument) says."""


@dataclass
class _Running:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    steps_left: int


@dataclass
class LLMEngine:
    """The engine loop of ``vllm.v1.engine.llm_engine.LLMEngine``: ``add_request``, ``step``, ``abort_request``.

    A request takes one step per generated token, so requests added together finish together and one
    added later finishes later, while others keep running: outputs come back out of submission order.
    ``step`` reports finished requests, and under the default ``CUMULATIVE`` output kind the running
    ones too (``finished=False``), as vLLM does.
    """

    model_config: ModelConfig
    vllm_config: VllmConfig | None = None
    added: list[tuple[str, list[int], SamplingParams]] = field(default_factory=list)
    """Every ``add_request`` accepted, in order."""
    aborted: list[str] = field(default_factory=list)
    steps: int = 0
    _running: dict[str, _Running] = field(default_factory=dict)
    responder: Callable[[list[int], SamplingParams], tuple[str, list[int], str]] | None = None

    def add_request(self, request_id: str, prompt: Any, params: SamplingParams, arrival_time: float | None = None,
                    lora_request: Any = None, tokenization_kwargs: dict[str, Any] | None = None,
                    trace_headers: Any = None, priority: int = 0, prompt_text: str | None = None) -> None:
        if request_id in self._running:
            raise ValueError(f"request id {request_id} already running")
        if not isinstance(params, SamplingParams):
            raise TypeError("params must be SamplingParams")
        if not (isinstance(prompt, dict) and "prompt_token_ids" in prompt):
            raise TypeError(f"unsupported prompt {prompt!r}")
        ids = list(prompt["prompt_token_ids"])
        if len(ids) > self.model_config.max_model_len:
            raise ValueError(f"prompt of {len(ids)} tokens is longer than max_model_len")
        respond = self.responder or LLM.responder
        _, tokens, _ = respond(ids, params)
        self.added.append((request_id, ids, params))
        self._running[request_id] = _Running(request_id, ids, params, max(1, len(tokens)))

    def has_unfinished_requests(self) -> bool:
        return bool(self._running)

    def get_num_unfinished_requests(self) -> int:
        return len(self._running)

    def abort_request(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            if self._running.pop(request_id, None) is not None:
                self.aborted.append(request_id)

    def step(self) -> list[RequestOutput]:
        self.steps += 1
        respond = self.responder or LLM.responder
        outputs = []
        for request_id in list(self._running):
            running = self._running[request_id]
            running.steps_left -= 1
            finished = running.steps_left <= 0
            final_only = running.params.output_kind is RequestOutputKind.FINAL_ONLY
            if not finished and final_only:
                continue
            text, tokens, finish = respond(running.prompt_ids, running.params)
            outputs.append(RequestOutput(
                request_id=request_id, prompt=None, prompt_token_ids=list(running.prompt_ids), prompt_logprobs=None,
                outputs=[CompletionOutput(index=0, text=text if finished else "", token_ids=tokens if finished else [],
                                          finish_reason=finish if finished else None)],
                finished=finished))
            if finished:
                del self._running[request_id]
        return outputs


def default_responder(prompt_ids: list[int], params: SamplingParams) -> tuple[str, list[int], str]:
    """Three tokens of reply naming the prompt length, cut to ``max_tokens`` (all of them under ``ignore_eos``)."""
    limit = params.max_tokens or 16
    ended = not params.ignore_eos and limit >= 3
    n = 3 if ended else limit
    return f'{{"prompt_len": {len(prompt_ids)}}}', list(range(100, 100 + n)), "stop" if ended else "length"


@dataclass
class Call:
    method: str
    prompts: list[Any]
    sampling_params: list[SamplingParams]
    use_tqdm: Any
    extra: dict[str, Any] = field(default_factory=dict)


class LLM:
    responder: Callable[[list[int], SamplingParams], tuple[str, list[int], str]] = staticmethod(default_responder)

    def __init__(
        self,
        model: str,
        *,
        runner: str = "auto",
        convert: str = "auto",
        tokenizer: str | None = None,
        tokenizer_mode: str = "auto",
        skip_tokenizer_init: bool = False,
        trust_remote_code: bool = False,
        allowed_local_media_path: str = "",
        allowed_media_domains: list[str] | None = None,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        quantization: str | None = None,
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        seed: int = 0,
        gpu_memory_utilization: float = 0.9,
        swap_space: float = 4,
        cpu_offload_gb: float = 0,
        enforce_eager: bool = False,
        enable_return_routed_experts: bool = False,
        disable_custom_all_reduce: bool = False,
        hf_token: bool | str | None = None,
        hf_overrides: Any = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        pooler_config: Any = None,
        structured_outputs_config: Any = None,
        profiler_config: Any = None,
        attention_config: Any = None,
        kv_cache_memory_bytes: int | None = None,
        compilation_config: Any = None,
        logits_processors: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - ENGINE_ARGS)
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {unknown[0]!r}")
        self.init_args: dict[str, Any] = {
            "model": model, "tensor_parallel_size": tensor_parallel_size, "dtype": dtype, "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization, "enforce_eager": enforce_eager, **kwargs,
        }
        model_config = ModelConfig(max_model_len=kwargs.get("max_model_len") or 4096)
        cache_config = CacheConfig(block_size=kwargs.get("block_size") or 16,
                                   num_gpu_blocks=kwargs.get("num_gpu_blocks_override") or DEFAULT_GPU_BLOCKS)
        self.llm_engine = LLMEngine(model_config, VllmConfig(model_config, cache_config))
        self.tokenizer = FakeTokenizer()
        self.calls: list[Call] = []
        instances.append(self)

    def get_tokenizer(self) -> FakeTokenizer:
        return self.tokenizer

    def _run(self, prompt_ids: list[list[int]], params: SamplingParams | Sequence[SamplingParams] | None
             ) -> list[RequestOutput]:
        if params is None:
            params = SamplingParams()
        plist = [params] * len(prompt_ids) if isinstance(params, SamplingParams) else list(params)
        if len(plist) != len(prompt_ids):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        outputs = []
        for index, (ids, p) in enumerate(zip(prompt_ids, plist)):
            if len(ids) > self.llm_engine.model_config.max_model_len:
                raise ValueError(f"prompt of {len(ids)} tokens is longer than max_model_len")
            text, tokens, finish = type(self).responder(ids, p)
            outputs.append(RequestOutput(
                request_id=str(index), prompt=None, prompt_token_ids=list(ids), prompt_logprobs=None,
                outputs=[CompletionOutput(index=0, text=text, token_ids=tokens, finish_reason=finish)],
                finished=True))
        return outputs

    def generate(
        self,
        prompts: Any,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: Any = None,
        priority: list[int] | None = None,
        tokenization_kwargs: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        batch = list(prompts) if isinstance(prompts, (list, tuple)) else [prompts]
        ids = []
        for prompt in batch:
            if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
                ids.append(list(prompt["prompt_token_ids"]))
            elif isinstance(prompt, str):
                ids.append([self.tokenizer._id(w) for w in prompt.split()])
            else:
                raise TypeError(f"unsupported prompt {prompt!r}")
        plist = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else [sampling_params]
        self.calls.append(Call("generate", batch, plist, use_tqdm))
        return self._run(ids, sampling_params)

    def chat(
        self,
        messages: Any,
        sampling_params: SamplingParams | list[SamplingParams] | None = None,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: Any = None,
        chat_template: str | None = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        tokenization_kwargs: dict[str, Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        rendered = [self.tokenizer.apply_chat_template(c, add_generation_prompt=add_generation_prompt)
                    for c in conversations]
        ids = [r["input_ids"] if isinstance(r, dict) else r for r in rendered]
        plist = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else [sampling_params]
        self.calls.append(Call("chat", list(conversations), plist, use_tqdm))
        return self._run(ids, sampling_params)
