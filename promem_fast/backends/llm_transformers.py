"""Plain torch generation with Hugging Face ``transformers``, batched with left padding.

For machines without vLLM (a CPU box, a small GPU) and for checking the vLLM backend against a second
implementation. The model and tokenizer come from a local folder or hub id (``LLMConfig.model``) and the
prompt is rendered with the tokenizer's own chat template. ``dtype="auto"`` means bfloat16 on CUDA and
float32 on the CPU. ``LLMConfig.options`` goes to ``AutoModelForCausalLM.from_pretrained``.
``LLMConfig.n_threads``, when set, caps torch's CPU threads for the whole process: on a shared or small
machine fewer threads than cores is much faster for small models, whose matrix products are too small to
split.

No JSON grammar is enforced here: the schema only reaches the model as the instruction in the prompt, and
the engine repairs or retries a reply that does not parse.

Decoding: greedy at temperature 0, else temperature sampling from the full distribution with a
``torch.Generator`` seeded by the request's own seed. That choice is made per row inside one batch by a
logits processor that leaves greedy rows alone and, for sampled rows, draws the token with the row's
generator and masks every other token, so the (greedy) search picks it. A request's draw therefore
depends on its own seed and logits, never on its batch mates, and requests with different temperatures
and seeds share a batch. The model's ``generation_config`` (top-p, top-k, repetition penalty, ...) is
replaced by a neutral one so runs are the same as with the other backends.

Batching: requests are sorted by prompt length (ties by position) and cut into batches of
``LLMConfig.batch_size``, so a batch wastes little on padding and the grouping is a pure function of the
request set. ``max_new_tokens`` of a batch is its largest ``max_tokens``; a stopping criterion ends each row
at its own ``max_tokens``. Left padding is masked out of attention, so a row's answer is the same in
any batch up to floating-point rounding: matrix shapes change with the batch, and on a near-tie of the two
best tokens greedy decoding can flip. ``ignore_eos`` masks the end tokens so every reply runs to
``max_tokens`` (throughput runs on random weights).

Continuous batching: where the installed transformers has it (``model.init_continuous_batching``, 4.56+),
:meth:`TransformersLLM.open_stream` (on CUDA) feeds greedy requests to its manager as they are posted (paged KV cache,
requests join and leave the running batch step by step) and hands each back when it finishes; sampled
retries (temperature above 0, per-request seeds) and ``ignore_eos`` runs go through the batched
``generate`` above. Greedy answers can differ from the batched path's in floating-point near-ties (other
kernels), as between batch shapes.
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
from promem_fast.errors import BackendError, ConfigError, ContextOverflow

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT = 2048
"""Window assumed when neither the config nor the model says (``max_position_embeddings``)."""


class _RowDecoder:
    """Logits processor: masks end tokens under ``ignore_eos``, then samples the rows with a temperature.

    Plain callable with the ``(input_ids, scores)`` signature that ``LogitsProcessorList`` calls. It runs once
    per decode step, so everything it needs is put on the device once, here: indexing ``scores`` with a Python
    list copies the list to the GPU at every step, which waits for the step before it and so stops the host
    from queueing the next one. On an H200 with a Llama-3.1-8B-shaped model that made a 2-row decode step
    take 95 ms against 26 ms for ``generate`` without a processor (``benchmarks/results/gpu_run-h200.json``).
    """

    def __init__(self, torch: Any, temperatures: Sequence[float], seeds: Sequence[int], banned: Sequence[int],
                 device: Any) -> None:
        self.torch = torch
        self.sampled = [(row, float(t), torch.Generator(device=device).manual_seed(int(s)))
                        for row, (t, s) in enumerate(zip(temperatures, seeds)) if t > 0]
        self.banned = torch.tensor(list(banned), dtype=torch.long, device=device) if banned else None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        torch = self.torch
        if self.banned is not None:
            scores.index_fill_(1, self.banned, -float("inf"))
        for row, temperature, generator in self.sampled:
            probs = torch.softmax(scores[row].float() / temperature, dim=-1)
            choice = torch.multinomial(probs, 1, generator=generator)
            scores[row] = -float("inf")
            scores[row, choice] = 0.0
        return scores


class _RowBudget:
    """Stopping criterion: row ``i`` is done once it has ``budgets[i]`` new tokens."""

    def __init__(self, torch: Any, prompt_width: int, budgets: Sequence[int], device: Any) -> None:
        self.prompt_width = prompt_width
        self.budgets = torch.tensor(list(budgets), device=device)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        return (input_ids.shape[1] - self.prompt_width) >= self.budgets


def _dtype_keyword(transformers: Any) -> str:
    """``from_pretrained`` takes ``dtype`` since transformers 4.56 and ``torch_dtype`` before."""
    parts = [int(p) for p in transformers.__version__.split(".")[:2] if p.isdigit()]
    return "dtype" if tuple(parts) >= (4, 56) else "torch_dtype"


class TransformersLLM:
    """``AutoModelForCausalLM`` + ``AutoTokenizer``; batched, left padded, per-request seeds."""

    def __init__(self, config: LLMConfig) -> None:
        if not config.model:
            raise ConfigError("llm.model must name a local folder or hub id for the transformers backend")
        torch = require("torch", "cpu")
        transformers = require("transformers", "cpu")
        self.torch = torch
        self.config = config
        if config.device == "auto":
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.device = torch.device(config.device)
        if config.n_threads and self.device.type == "cpu":
            torch.set_num_threads(config.n_threads)
        if config.dtype == "auto":
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        else:
            dtype = getattr(torch, config.dtype)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(config.model)
        self._render = MessageCache(hf_prompt_ids(self.tokenizer, str(config.model)))
        """Prompt token ids by content: the engine counts a prompt's tokens, then sends it."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"{config.model}: the tokenizer has no chat template")
        options = {_dtype_keyword(transformers): dtype, **config.options}
        self.model = transformers.AutoModelForCausalLM.from_pretrained(config.model, **options)
        self.model.to(self.device).eval()

        eos: list[int] = []
        for source in (self.tokenizer.eos_token_id, self.model.generation_config.eos_token_id):
            for token in source if isinstance(source, (list, tuple)) else [source]:
                if token is not None and int(token) not in eos:
                    eos.append(int(token))
        if not eos:
            raise ConfigError(f"{config.model}: neither the tokenizer nor the model names an end token")
        self.eos_ids = eos
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0]
        # A neutral generation config: the model's own may ask for top-p sampling or a repetition penalty.
        self.model.generation_config = transformers.GenerationConfig(
            bos_token_id=self.tokenizer.bos_token_id, eos_token_id=eos, pad_token_id=self.pad_id)
        self._processors = transformers.LogitsProcessorList
        self._criteria = transformers.StoppingCriteriaList

        window = config.context_length or getattr(self.model.config, "max_position_embeddings", None)
        if not window:
            logger.warning("%s states no context window; assuming %d tokens", config.model, DEFAULT_CONTEXT)
        self.context_length = int(window or DEFAULT_CONTEXT)
        logger.info("transformers model %s on %s (%s), window %d", config.model, self.device, dtype,
                    self.context_length)

    # ------------------------------------------------------------------------------------ tokens
    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(self._render(messages))

    def encode(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        """The prompt's ids as sent (chat template given the session's date), rendered once per request."""
        return self._render(messages, date)

    def open_stream(self) -> Any:
        """Transformers' continuous batching on CUDA when the installed version has it, else the engine's
        batch adapter over :meth:`generate` (``None`` tells the engine to use it). Not on the CPU: the
        manager's warm-up there took 55 s for a 2-layer test model, longer than whole CPU runs."""
        if self.device.type != "cuda" or not hasattr(self.model, "init_continuous_batching"):
            return None
        return TransformersStream(self)

    def completion(self, prompt: Sequence[int], tokens: Sequence[int], budget: int) -> Completion:
        """A reply from its new tokens: cut at the first end token (counted) or at ``budget``."""
        tokens = list(tokens)[:budget]
        eos = set(self.eos_ids)
        end = next((k for k, t in enumerate(tokens) if t in eos), None)
        if end is None:
            text_ids, count, finish = tokens, len(tokens), "length"
        else:
            text_ids, count, finish = tokens[:end], end + 1, "stop"
        return Completion(text=self.tokenizer.decode(text_ids, skip_special_tokens=True), prompt_tokens=len(prompt),
                          completion_tokens=count, finish_reason=finish)  # type: ignore[arg-type]

    # -------------------------------------------------------------------------------- generation
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Answers in input order; :class:`ContextOverflow` before any work if a prompt does not fit."""
        prompts = [list(r.prompt_ids) if r.prompt_ids is not None else self._render(r.messages, r.date)
                   for r in requests]
        for index, (ids, request) in enumerate(zip(prompts, requests)):
            if len(ids) + request.max_tokens > self.context_length:
                raise ContextOverflow(
                    f"request {index} of the batch: {len(ids)} prompt tokens + max_tokens {request.max_tokens} "
                    f"exceed the context window of {self.context_length} tokens ({self.config.model})")
        order = sorted(range(len(requests)), key=lambda i: (len(prompts[i]), i))
        results: list[Completion | None] = [None] * len(requests)
        size = max(1, self.config.batch_size)
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            for i, completion in zip(chunk, self._run([prompts[i] for i in chunk], [requests[i] for i in chunk])):
                results[i] = completion
        done = [r for r in results if r is not None]
        assert len(done) == len(requests)
        return done

    def _run(self, prompts: list[list[int]], requests: list[GenerationRequest]) -> list[Completion]:
        """One left-padded ``model.generate`` call for a batch."""
        torch = self.torch
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids):] = 1
        budgets = [r.max_tokens for r in requests]
        decoder = _RowDecoder(torch, [r.temperature for r in requests], [r.seed for r in requests],
                              self.eos_ids if self.config.ignore_eos else [], self.device)
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                max_new_tokens=max(budgets),
                do_sample=False,
                logits_processor=self._processors([decoder]),
                stopping_criteria=self._criteria([_RowBudget(torch, width, budgets, self.device)]),
            )
        new_tokens = output[:, width:].tolist()
        return [self.completion(ids, tokens, budget) for ids, tokens, budget in zip(prompts, new_tokens, budgets)]


class TransformersStream:
    """Greedy requests on transformers' continuous-batching manager, the rest through batched ``generate``."""

    def __init__(self, backend: TransformersLLM) -> None:
        self._backend = backend
        transformers = require("transformers", "cpu")
        config = transformers.GenerationConfig(do_sample=False, max_new_tokens=256, eos_token_id=backend.eos_ids,
                                               pad_token_id=backend.pad_id)
        self._manager = backend.model.init_continuous_batching(generation_config=config)
        self._manager.start()
        self._running: dict[str, tuple[int, list[int], int]] = {}
        self._local: list[tuple[int, GenerationRequest]] = []

    def submit(self, key: int, request: GenerationRequest) -> None:
        if request.temperature > 0 or self._backend.config.ignore_eos:
            self._local.append((key, request))
            return
        ids = list(request.prompt_ids) if request.prompt_ids is not None else self._backend.encode(
            request.messages, request.date)
        request_id = f"promem-{key}"
        self._running[request_id] = (key, ids, request.max_tokens)
        self._manager.add_request(input_ids=ids, request_id=request_id, max_new_tokens=request.max_tokens,
                                  eos_token_id=self._backend.eos_ids)

    def pending(self) -> int:
        return len(self._running) + len(self._local)

    def complete(self, timeout: float | None) -> list[tuple[int, Completion | BaseException]]:
        done: list[tuple[int, Completion | BaseException]] = []
        if self._local:
            local, self._local = self._local, []
            try:
                answers: list[Any] = self._backend.generate([r for _, r in local])
            except Exception as exc:  # the engine's retry settles each request again
                answers = [exc] * len(local)
            done.extend((key, answer) for (key, _), answer in zip(local, answers))
        wait = 0.0 if done else timeout
        while self._running:
            out = self._manager.get_result(timeout=wait)
            if out is None:
                if not self._manager.is_running():
                    raise BackendError("transformers' continuous-batching loop stopped")
                break
            entry = self._running.pop(out.request_id, None)
            if entry is None:
                continue
            key, ids, budget = entry
            if out.error:
                done.append((key, BackendError(f"request {key}: {out.error}")))
            else:
                done.append((key, self._backend.completion(ids, out.generated_tokens, budget)))
            wait = 0.0
        return done

    def close(self) -> None:
        self._manager.stop(block=True, timeout=30)
        self._running.clear()
        self._local.clear()
