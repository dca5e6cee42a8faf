"""In-process vLLM: requests go straight into vLLM's engine loop as sessions post them.

The continuous driver uses :meth:`VLLMBackend.open_stream`: each request is added to the ``LLMEngine`` as
soon as it is posted (``add_request``), and the generation thread calls ``step`` over and over, handing
back each request the moment its output is finished, while new ones keep arriving; vLLM's scheduler keeps
its batch full across sessions. The round driver uses :meth:`VLLMBackend.generate`, one ``LLM.generate``
call per batch.

Supported versions: vllm >= 0.12, < 1.0 (the range pinned by the ``gpu`` extra). 0.12 is the release that
removed the ``guided_*`` sampling fields; from then on structured decoding is requested per request as
``SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))``. The names used here:

* ``vllm.LLM(model, *, dtype, tensor_parallel_size, gpu_memory_utilization, seed, **engine_args)`` with the
  engine arguments ``max_model_len``, ``enable_prefix_caching`` and whatever ``LLMConfig.options`` adds
  (``load_format="dummy"`` runs the throughput benchmarks on random weights, ``enforce_eager``, ...);
* ``vllm.SamplingParams`` (``temperature``, ``seed``, ``max_tokens``, ``ignore_eos``, ``structured_outputs``);
* ``vllm.sampling_params.StructuredOutputsParams(json=..., disable_any_whitespace=...)`` (``llm.compact_json``);
* ``LLM.generate(prompts, sampling_params=[...], use_tqdm=False)`` with token prompts
  ``{"prompt_token_ids": [...]}`` (the ``vllm.inputs.TokensPrompt`` typed dict);
* ``LLM.get_tokenizer()``, ``LLM.llm_engine.model_config.max_model_len`` and
  ``LLM.llm_engine.vllm_config.cache_config.{num_gpu_blocks, block_size}`` (the KV cache's size);
* ``RequestOutput.prompt_token_ids`` and ``RequestOutput.outputs[0].{text, token_ids, finish_reason}``;
* the engine loop ``LLM.llm_engine``: ``add_request(request_id, prompt, params)``, ``step()`` (a list of
  ``RequestOutput``; ``finished`` tells the last one of a request), ``abort_request(request_ids)``, and
  ``vllm.sampling_params.RequestOutputKind.FINAL_ONLY`` so ``step`` reports a request only when it is done.

Chat template date: Llama 3.1's template prints a "Today Date" of its own; the session's date goes in as
``date_string`` (:func:`~promem_fast.backends._message_cache.template_date`) so the header agrees with the
prompt.

Why ``generate`` on token ids rather than ``LLM.chat``: the prompt is rendered with the model's own chat
template exactly once, here, and the same ids serve :meth:`VLLMBackend.count_tokens`, the context check and
the engine. ``chat`` would render and tokenize every conversation a second time inside vLLM, which costs
real CPU time at thousands of long prompts per batch, and its count could in principle differ from ours.
Prefix caching works on token ids, so the shared text our prompts put first is reused either way.

Batch independence: vLLM answers a request the same way whatever its batch mates only when run with
``VLLM_BATCH_INVARIANT=1`` in the environment (beta, recent GPUs); without it, greedy answers can differ
in rare near-ties between batch compositions. Set it for byte-identical reruns.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from promem_fast.deps import require
from promem_fast.backends._message_cache import MessageCache
from promem_fast.backends._prompt_ids import hf_prompt_ids
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.config import LLMConfig
from promem_fast.errors import BackendError, BackendUnavailable, ConfigError, ContextOverflow

logger = logging.getLogger(__name__)

def _is_engine_dead(exc: BaseException) -> bool:
    """vLLM signals a dead engine core with ``EngineDeadError``; its module moved between releases."""
    return any(cls.__name__ == "EngineDeadError" for cls in type(exc).__mro__)


def _kv_cache_tokens(engine: Any) -> int | None:
    """GPU KV blocks × tokens per block: vLLM's V1 front end copies ``num_gpu_blocks`` (and the block size
    the workers settled on) into ``llm_engine.vllm_config.cache_config`` when the engine core has started."""
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    return int(blocks) * int(size) if blocks and size else None


class VLLMBackend:
    """``vllm.LLM`` held in this process; one ``generate`` call per batch, JSON schemas enforced by vLLM."""

    def __init__(self, config: LLMConfig) -> None:
        if not config.model:
            raise ConfigError("llm.model must name a hub id or a local folder for the vllm backend")
        vllm = require("vllm", "gpu")
        sampling = require("vllm.sampling_params", "gpu")
        self.config = config
        self._sampling_params_cls = vllm.SamplingParams
        self._structured_cls = sampling.StructuredOutputsParams
        # Options come last so a user can override any field set from the typed config.
        kwargs: dict[str, Any] = {
            "model": config.model,
            "dtype": config.dtype,
            "tensor_parallel_size": config.tensor_parallel_size,
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "seed": config.seed,
            "max_model_len": config.context_length,
            "enable_prefix_caching": config.enable_prefix_caching,
            **config.options,
        }
        logger.info("starting vLLM: %s", ", ".join(f"{k}={v!r}" for k, v in kwargs.items()))
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.context_length = int(self.llm.llm_engine.model_config.max_model_len)
        self.kv_cache_tokens = _kv_cache_tokens(self.llm.llm_engine)
        """KV cache size in tokens (None when this vLLM does not say): sizes the auto window of sessions."""
        self._render = MessageCache(hf_prompt_ids(self.tokenizer, str(config.model)))
        """Prompt token ids by content: the engine counts a prompt's tokens, then sends it."""

    # ------------------------------------------------------------------------------------ tokens
    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(self._render(messages))

    def encode(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        """The prompt's ids as sent: chat template (dated) and tokenizer, once per request."""
        return self._render(messages, date)

    def open_stream(self) -> VLLMStream:
        """Submit/complete on vLLM's engine loop (the continuous driver's way in)."""
        return VLLMStream(self)

    # -------------------------------------------------------------------------------- generation
    def _sampling_params(self, request: GenerationRequest, **extra: Any) -> Any:
        structured = None if request.schema is None else self._structured_cls(
            json=dict(request.schema), disable_any_whitespace=self.config.compact_json)
        return self._sampling_params_cls(
            temperature=request.temperature,
            seed=request.seed,
            max_tokens=request.max_tokens,
            ignore_eos=self.config.ignore_eos,
            structured_outputs=structured,
            **extra,
        )

    def _prompt(self, index: int, request: GenerationRequest) -> dict[str, list[int]]:
        """The token prompt of a request (its ids as encoded, else rendered now), checked against the window."""
        ids = list(request.prompt_ids) if request.prompt_ids is not None else self._render(request.messages,
                                                                                             request.date)
        if len(ids) + request.max_tokens > self.context_length:
            raise ContextOverflow(
                f"request {index} of the batch: {len(ids)} prompt tokens + max_tokens {request.max_tokens} "
                f"exceed the context window of {self.context_length} tokens ({self.config.model})")
        return {"prompt_token_ids": ids}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """All ``requests`` in one engine call; answers come back in input order.

        A prompt whose tokens plus its ``max_tokens`` exceed the window raises :class:`ContextOverflow`
        before anything is sent, naming the request's position in the batch.
        """
        if not requests:
            return []
        prompts = [self._prompt(index, request) for index, request in enumerate(requests)]
        params = [self._sampling_params(r) for r in requests]
        try:
            outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        except Exception as exc:
            if _is_engine_dead(exc):
                raise BackendUnavailable(f"the vLLM engine died: {exc}") from exc
            raise BackendError(f"vLLM failed on a batch of {len(requests)} requests: {exc}") from exc
        if len(outputs) != len(requests):
            raise BackendError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
        return [self.completion(index, out) for index, out in enumerate(outputs)]

    @staticmethod
    def completion(index: int, out: Any) -> Completion:
        choice = out.outputs[0]
        if choice.finish_reason not in ("stop", "length"):
            raise BackendError(f"request {index} of the batch ended with finish_reason={choice.finish_reason!r}")
        return Completion(
            text=choice.text,
            prompt_tokens=len(out.prompt_token_ids),
            completion_tokens=len(choice.token_ids),
            finish_reason=choice.finish_reason,
        )


class VLLMStream:
    """Requests added to ``LLM.llm_engine`` one by one; each ``complete`` runs one engine step.

    A request vLLM refuses when it is added (a schema its grammar backend cannot compile) fails alone; a
    step that raises means the engine is gone, and the requests in it are aborted.
    """

    def __init__(self, backend: VLLMBackend) -> None:
        self._backend = backend
        self._engine = backend.llm.llm_engine
        sampling = require("vllm.sampling_params", "gpu")
        kind = getattr(sampling, "RequestOutputKind", None)
        self._extra = {"output_kind": kind.FINAL_ONLY} if kind is not None else {}
        self._in_flight: set[str] = set()
        self._refused: list[tuple[int, BaseException]] = []

    def submit(self, key: int, request: GenerationRequest) -> None:
        request_id = f"promem-{key}"
        try:
            prompt = self._backend._prompt(key, request)
            self._engine.add_request(request_id, prompt, self._backend._sampling_params(request, **self._extra))
        except ContextOverflow as exc:
            self._refused.append((key, exc))
            return
        except Exception as exc:
            if _is_engine_dead(exc):
                raise BackendUnavailable(f"the vLLM engine died: {exc}") from exc
            self._refused.append((key, BackendError(f"vLLM refused request {key}: {exc}")))
            return
        self._in_flight.add(request_id)

    def pending(self) -> int:
        return len(self._in_flight) + len(self._refused)

    def complete(self, timeout: float | None) -> list[tuple[int, Completion | BaseException]]:
        done: list[tuple[int, Completion | BaseException]] = list(self._refused)
        self._refused.clear()
        if not self._in_flight:
            return done
        try:
            outputs = self._engine.step()
        except Exception as exc:
            if _is_engine_dead(exc):
                raise BackendUnavailable(f"the vLLM engine died: {exc}") from exc
            raise BackendUnavailable(f"a vLLM engine step failed with {len(self._in_flight)} requests in it: "
                                     f"{exc}") from exc
        for out in outputs:
            if not out.finished or out.request_id not in self._in_flight:
                continue
            self._in_flight.discard(out.request_id)
            key = int(out.request_id.rsplit("-", 1)[1])
            try:
                done.append((key, VLLMBackend.completion(key, out)))
            except BackendError as exc:
                done.append((key, exc))
        return done

    def close(self) -> None:
        """Abort what is still running (a run that ended early, or a dead engine)."""
        if self._in_flight:
            try:
                self._engine.abort_request(sorted(self._in_flight))
            except Exception:  # the engine is gone anyway
                logger.debug("could not abort vLLM requests", exc_info=True)
            self._in_flight.clear()
        self._refused.clear()
