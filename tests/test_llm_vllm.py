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
