"""The vLLM backend against a recording stand-in of the vLLM API (``tests/fake_vllm``), no GPU needed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from promem_fast.backends.base import GenerationRequest
from promem_fast.config import LLMConfig
from promem_fast.errors import BackendError, BackendUnavailable, ContextOverflow, MissingDependency

FAKE = Path(__file__).resolve().parent / "fake_vllm"
SCHEMA = {"type": "object", "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
          "required": ["facts"]}


def _drop_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch):
    _drop_vllm(monkeypatch)
    monkeypatch.syspath_prepend(str(FAKE))
    import vllm

    yield vllm
    _drop_vllm(monkeypatch)


def _backend(**overrides):
    from promem_fast.backends.llm_vllm import VLLMBackend

    fields = {"backend": "vllm", "model": "some/model", "context_length": 64, **overrides}
    return VLLMBackend(LLMConfig(**fields))


def _request(text: str, **kw) -> GenerationRequest:
    fields = {"schema": None, "max_tokens": 8, **kw}
    return GenerationRequest(messages=({"role": "system", "content": "shared rules first"},
                                       {"role": "user", "content": text}), **fields)


def test_engine_built_from_config(fake_vllm) -> None:
    backend = _backend(dtype="bfloat16", tensor_parallel_size=2, gpu_memory_utilization=0.5, seed=7,
                       enable_prefix_caching=True, options={"load_format": "dummy", "enforce_eager": True})
    args = backend.llm.init_args
    assert args == {"model": "some/model", "tensor_parallel_size": 2, "dtype": "bfloat16", "seed": 7,
                    "gpu_memory_utilization": 0.5, "enforce_eager": True, "max_model_len": 64,
                    "enable_prefix_caching": True, "load_format": "dummy"}
    assert backend.context_length == 64


def test_context_length_read_from_engine(fake_vllm) -> None:
    assert _backend(context_length=None).context_length == 4096


def test_unknown_engine_option_is_rejected(fake_vllm) -> None:
    with pytest.raises(TypeError, match="load_fromat"):
        _backend(options={"load_fromat": "dummy"})


@pytest.mark.parametrize("size", [1, 5, 40])
def test_one_engine_call_per_batch(fake_vllm, size: int) -> None:
    backend = _backend()
    out = backend.generate([_request(f"message number {i}" + " word" * (i % 4)) for i in range(size)])
    assert len(backend.llm.calls) == 1
    call = backend.llm.calls[0]
    assert call.method == "generate" and call.use_tqdm is False
    assert len(call.prompts) == len(call.sampling_params) == size
    assert all(set(p) == {"prompt_token_ids"} for p in call.prompts)
    # answers stay in input order: each reply names its own prompt length
    for prompt, completion in zip(call.prompts, out):
        assert completion.text == f'{{"prompt_len": {len(prompt["prompt_token_ids"])}}}'


def test_schema_seed_temperature_per_request(fake_vllm) -> None:
    backend = _backend(ignore_eos=True)
    backend.generate([
        _request("a", schema=SCHEMA, seed=3, temperature=0.0, max_tokens=5),
        _request("b", schema=None, seed=11, temperature=0.7, max_tokens=9),
    ])
    first, second = backend.llm.calls[0].sampling_params
    assert isinstance(first.structured_outputs, fake_vllm.StructuredOutputsParams)
    assert first.structured_outputs.json == SCHEMA
    assert first.structured_outputs.disable_any_whitespace  # one-line JSON unless llm.compact_json is off
    assert second.structured_outputs is None
    assert (first.seed, first.temperature, first.max_tokens) == (3, 0.0, 5)
    assert (second.seed, second.temperature, second.max_tokens) == (11, 0.7, 9)
    assert first.ignore_eos and second.ignore_eos


def test_token_counts_and_finish_reason(fake_vllm) -> None:
    backend = _backend()
    messages = _request("one two three").messages
    expected = backend.count_tokens(messages)
    assert expected == (2 + 3) + (2 + 3) + 1  # frames + words of both messages + assistant header
    long, short = backend.generate([_request("one two three", max_tokens=8),
                                    _request("one two three", max_tokens=2)])
    assert long.prompt_tokens == short.prompt_tokens == expected
    assert (long.completion_tokens, long.finish_reason) == (3, "stop")
    assert (short.completion_tokens, short.finish_reason) == (2, "length")


def test_batch_encoding_from_tokenizer(fake_vllm) -> None:
    backend = _backend()
    plain = backend.count_tokens(_request("x y").messages)
    backend.tokenizer.as_batch_encoding = True
    assert backend.count_tokens(_request("x y z").messages) == plain + 1


def test_context_overflow_before_sending(fake_vllm) -> None:
    backend = _backend(context_length=20)
    fits = _request("w " * 5, max_tokens=4)
    too_long = _request("w " * 12, max_tokens=4)
    with pytest.raises(ContextOverflow, match="request 1"):
        backend.generate([fits, too_long])
    assert backend.llm.calls == []


def test_engine_errors_are_typed(fake_vllm, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend()

    class EngineDeadError(Exception):
        pass

    def dead(*args, **kwargs):
        raise EngineDeadError("core gone")

    monkeypatch.setattr(backend.llm, "generate", dead)
    with pytest.raises(BackendUnavailable):
        backend.generate([_request("a")])

    def broken(*args, **kwargs):
        raise RuntimeError("bad batch")

    monkeypatch.setattr(backend.llm, "generate", broken)
    with pytest.raises(BackendError, match="bad batch"):
        backend.generate([_request("a")])


def test_empty_batch_sends_nothing(fake_vllm) -> None:
    backend = _backend()
    assert backend.generate([]) == []
    assert backend.llm.calls == []


def test_missing_vllm_names_the_gpu_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _drop_vllm(monkeypatch)
    monkeypatch.setitem(sys.modules, "vllm", None)
    from promem_fast.backends.llm_vllm import VLLMBackend

    with pytest.raises(MissingDependency, match=r"promem-fast\[gpu\]"):
        VLLMBackend(LLMConfig(backend="vllm", model="some/model"))


# ------------------------------------------------------------------------------- the engine loop (continuous)
def test_stream_adds_requests_to_the_engine_loop_and_hands_back_each_as_it_finishes(fake_vllm) -> None:
    backend = _backend()
    stream = backend.open_stream()
    messages = _request("one two three").messages
    ids = backend.encode(messages, "2025-05-01")
    # the template got the session's day and printed it ("Today Date: 01 May 2025"): 3 more words + 2 frames
    assert len(ids) == backend.count_tokens(messages) + 5
    stream.submit(0, _request("one two three", max_tokens=8, prompt_ids=tuple(ids)))  # 3 tokens: 3 steps
    stream.submit(1, _request("four five", max_tokens=2))  # cut at 2 tokens: 2 steps
    engine = backend.llm.llm_engine
    assert [r[0] for r in engine.added] == ["promem-0", "promem-1"]
    assert engine.added[0][1] == ids  # the ids counted are the ids sent
    assert all(p.output_kind is fake_vllm.RequestOutputKind.FINAL_ONLY for _, _, p in engine.added)
    assert stream.complete(None) == []
    ((key, short),) = stream.complete(None)
    assert (key, short.completion_tokens, short.finish_reason) == (1, 2, "length")
    stream.submit(2, _request("six", max_tokens=1))  # added while request 0 is still running
    finished = dict(stream.complete(None))
    assert sorted(finished) == [0, 2] and finished[0].prompt_tokens == len(ids)
    assert stream.pending() == 0 and engine.steps == 3


def test_stream_request_the_engine_refuses_fails_alone(fake_vllm, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(context_length=20)
    stream = backend.open_stream()
    engine = backend.llm.llm_engine
    real_add = engine.add_request

    def picky(request_id, prompt, params, **kw):
        if params.seed == 13:
            raise ValueError("grammar does not compile")
        return real_add(request_id, prompt, params, **kw)

    monkeypatch.setattr(engine, "add_request", picky)
    stream.submit(0, _request("a", seed=13))
    stream.submit(1, _request("w " * 20, max_tokens=4))
    stream.submit(2, _request("b", max_tokens=1))
    done = dict(stream.complete(None))
    assert isinstance(done[0], BackendError) and "grammar does not compile" in str(done[0])
    assert isinstance(done[1], ContextOverflow)
    assert done[2].completion_tokens == 1


def test_stream_step_of_a_dead_engine_is_unavailable_and_close_aborts(fake_vllm, monkeypatch) -> None:
    backend = _backend()
    stream = backend.open_stream()
    stream.submit(0, _request("a"))
    stream.close()
    assert backend.llm.llm_engine.aborted == ["promem-0"]
    stream.submit(1, _request("b"))

    class EngineDeadError(Exception):
        pass

    def dead():
        raise EngineDeadError("core gone")

    monkeypatch.setattr(backend.llm.llm_engine, "step", dead)
    with pytest.raises(BackendUnavailable, match="core gone"):
        stream.complete(None)


def test_the_continuous_engine_drives_vllm_through_its_engine_loop_with_the_session_date(fake_vllm) -> None:
    from conftest import make_session, scripted_config
    from promem_fast.engine import Engine

    backend = _backend(context_length=4096)
    cfg = scripted_config()
    session = make_session("s", "Ann", [("I moved to Lisbon.", "Nice.")], timestamp="2025-03-14T09:30:00")
    Engine(cfg, llm=backend).extract([session])
    assert backend.llm.calls == []  # no batch generate: every request went through add_request / step
    added = backend.llm.llm_engine.added
    assert added
    words = {v: k for k, v in backend.tokenizer.vocab.items()}
    for _, ids, _ in added:
        assert [words.get(i) for i in ids[:5]] == ["Today", "Date:", "14", "Mar", "2025"]


def test_kv_cache_size_read_from_the_started_engine(fake_vllm) -> None:
    # vLLM's engine reports 3,000 blocks of 32 tokens: 96,000 tokens of KV cache
    backend = _backend(options={"num_gpu_blocks_override": 3000, "block_size": 32})
    assert backend.kv_cache_tokens == 96_000


def test_the_auto_window_follows_the_kv_cache(fake_vllm) -> None:
    """``max_in_flight: 0``: the window is the KV cache over a session's working set (5,000 tokens)."""
    from conftest import make_session, scripted_config
    from promem_fast.engine import Engine

    sessions = [make_session(f"s{i}", "Ann", [("I moved to Lisbon.", "Nice.")]) for i in range(3)]
    for blocks, window in ((46_250, 148),     # an H200's 740,000 tokens: 148 sessions
                           (10_000, 32),      # 160,000 tokens
                           (100, 8),          # 1,600 tokens: clamped up to 8
                           (1_000_000, 1024)):  # 16M tokens: clamped down to 1,024
        cfg = scripted_config()
        cfg.max_in_flight = 0
        engine = Engine(cfg, llm=_backend(context_length=4096, options={"num_gpu_blocks_override": blocks}))
        assert engine.window() == window, blocks
        assert len(engine.extract(sessions)) == 3


def test_a_set_window_is_kept_and_other_backends_get_the_default() -> None:
    from conftest import scripted_config
    from promem_fast.engine import Engine

    cfg = scripted_config()
    cfg.max_in_flight = 0
    assert Engine(cfg).window() == 64  # the scripted model states no KV cache size
    cfg = scripted_config()
    cfg.max_in_flight = 5
    assert Engine(cfg).window() == 5


def test_the_gpu_profile_sizes_its_window_to_the_kv_cache() -> None:
    from promem_fast.config import EngineConfig

    assert EngineConfig.profile("gpu").max_in_flight == 0


def test_a_sessions_system_turn_is_tokenized_once(fake_vllm) -> None:
    backend = _backend(context_length=4096)
    tokenizer = backend.tokenizer
    system = {"role": "system", "content": "the session block with its dialogue " * 40}
    prompts = [(system, {"role": "user", "content": f"task number {i}"}) for i in range(4)]
    got = [backend.encode(p, "2025-03-14") for p in prompts]
    whole = [tokenizer.apply_chat_template([dict(m) for m in p], add_generation_prompt=True, tokenize=True,
                                           date_string="14 Mar 2025") for p in prompts]
    assert got == whole
    block = str(tokenizer.vocab["dialogue"])
    # the system turn once, then each prompt's rest (the first prompt was also rendered whole, as a check)
    assert len(tokenizer.tokenized) == 1 + len(prompts)
    assert sum(block in text.split() for text in tokenizer.tokenized) == 1


def test_free_whitespace_in_structured_replies_only_when_asked_for(fake_vllm) -> None:
    """Pretty-printed JSON costs reply tokens and lets a reply run away in newlines; turning
    ``llm.compact_json`` off gives the grammar its free whitespace back."""
    for compact in (True, False):
        backend = _backend(compact_json=compact)
        backend.generate([_request("a", schema=SCHEMA, max_tokens=5)])
        [params] = backend.llm.calls[0].sampling_params
        assert params.structured_outputs.disable_any_whitespace is compact
