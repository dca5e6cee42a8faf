"""The transformers backend on the CPU with a tiny random Llama and a tokenizer trained on the fly."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from promem_fast.backends.base import GenerationRequest  # noqa: E402
from promem_fast.backends.llm_transformers import TransformersLLM  # noqa: E402
from promem_fast.config import LLMConfig  # noqa: E402
from promem_fast.errors import ContextOverflow  # noqa: E402
from promem_fast.testing.tiny_llama import build_random_llama, train_tokenizer  # noqa: E402

PROMPTS = [
    "Maya adopted a beagle named Biscuit last Saturday.",
    "Hi",
    "I moved to Lisbon in May for a job, and my sister Ana visits me every month since then.",
    "What did I say about running?",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = train_tokenizer(folder, vocab_size=384)
    build_random_llama(folder, layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128,
                       vocab_size=len(tokenizer), rope_theta=10000.0, max_position=256, dtype="float32",
                       init_std=0.2)
    return folder


def _backend(model_dir: Path, **overrides) -> TransformersLLM:
    fields = {"backend": "transformers", "model": str(model_dir), "device": "cpu", "batch_size": 8, "n_threads": 1,
              **overrides}
    return TransformersLLM(LLMConfig(**fields))


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> TransformersLLM:
    return _backend(model_dir)


def _request(text: str, **kw) -> GenerationRequest:
    fields = {"schema": None, "max_tokens": 12, **kw}
    return GenerationRequest(messages=({"role": "system", "content": "Answer in JSON."},
                                       {"role": "user", "content": text}), **fields)


def test_no_pad_token_falls_back_to_eos(backend: TransformersLLM) -> None:
    assert backend.tokenizer.pad_token_id is None
    assert backend.pad_id == backend.tokenizer.eos_token_id
    assert backend.context_length == 256


def _reference_greedy(backend: TransformersLLM, ids: list[int], max_tokens: int) -> list[int]:
    """Greedy decoding by full forward passes, no cache, no padding: the answer the backend must give."""
    import torch

    tokens = list(ids)
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = backend.model(torch.tensor([tokens])).logits[0, -1]
            token = int(torch.argmax(logits))
            out.append(token)
            tokens.append(token)
            if token in backend.eos_ids:
                break
    return out


def test_counts_match_the_tokenizer(backend: TransformersLLM) -> None:
    request = _request(PROMPTS[0])
    expected = backend.tokenizer.apply_chat_template(list(request.messages), add_generation_prompt=True,
                                                     tokenize=True, return_dict=False)
    assert backend.count_tokens(request.messages) == len(expected)
    (out,) = backend.generate([request])
    assert out.prompt_tokens == len(expected)
    reference = _reference_greedy(backend, expected, request.max_tokens)
    assert out.completion_tokens == len(reference)
    assert out.finish_reason == ("stop" if reference[-1] in backend.eos_ids else "length")
    text_ids = reference[:-1] if out.finish_reason == "stop" else reference
    assert out.text == backend.tokenizer.decode(text_ids, skip_special_tokens=True)


def test_batch_in_input_order_equals_singles(backend: TransformersLLM) -> None:
    requests = [_request(p) for p in PROMPTS[:3]]
    batched = backend.generate(requests)
    singles = [backend.generate([r])[0] for r in requests]
    assert len(batched) == 3
    assert batched == singles
    assert [c.prompt_tokens for c in batched] == [backend.count_tokens(r.messages) for r in requests]


def test_max_tokens_respected_per_request(backend: TransformersLLM) -> None:
    requests = [_request(PROMPTS[0], max_tokens=3), _request(PROMPTS[1], max_tokens=9)]
    outs = backend.generate(requests)
    for out, request in zip(outs, requests):
        reference = _reference_greedy(backend, backend._render(request.messages), request.max_tokens)
        assert out.completion_tokens == len(reference) <= request.max_tokens


def test_stops_at_any_end_token(backend: TransformersLLM, model_dir: Path, tmp_path: Path) -> None:
    """Models such as Llama 3.1 list several end tokens in generation_config.json; any of them ends a reply."""
    request = _request(PROMPTS[2], max_tokens=12)
    reference = _reference_greedy(backend, backend._render(request.messages), 12)
    extra_end = reference[2]
    copy = tmp_path / "two-ends"
    shutil.copytree(model_dir, copy)
    config = json.loads((copy / "generation_config.json").read_text())
    config["eos_token_id"] = [backend.tokenizer.eos_token_id, extra_end]
    (copy / "generation_config.json").write_text(json.dumps(config))
    (out,) = _backend(copy).generate([request])
    stop = next(k for k, t in enumerate(reference) if t in (extra_end, backend.tokenizer.eos_token_id))
    assert (out.completion_tokens, out.finish_reason) == (stop + 1, "stop")
    assert out.text == backend.tokenizer.decode(reference[:stop], skip_special_tokens=True)


def test_ignore_eos_runs_to_max_tokens(model_dir: Path) -> None:
    backend = _backend(model_dir, ignore_eos=True)
    outs = backend.generate([_request(PROMPTS[0], max_tokens=7), _request(PROMPTS[2], max_tokens=15)])
    assert [(o.completion_tokens, o.finish_reason) for o in outs] == [(7, "length"), (15, "length")]


def test_sampling_is_seeded_per_request(backend: TransformersLLM) -> None:
    hot = _request(PROMPTS[3], temperature=1.5, seed=5, max_tokens=10)
    alone = backend.generate([hot])[0]
    mixed = backend.generate([_request(PROMPTS[0]), hot, _request(PROMPTS[2], temperature=0.9, seed=1)])[1]
    assert alone == mixed
    others = {backend.generate([_request(PROMPTS[3], temperature=1.5, seed=s, max_tokens=10)])[0].text
              for s in range(6, 10)}
    assert len(others | {alone.text}) > 1


def test_context_overflow(backend: TransformersLLM) -> None:
    with pytest.raises(ContextOverflow, match="request 1"):
        backend.generate([_request("short"), _request("word " * 300)])
    with pytest.raises(ContextOverflow):
        backend.generate([_request("short", max_tokens=300)])


def test_a_counted_prompt_is_not_rendered_again(model_dir: Path) -> None:
    backend = _backend(model_dir)
    calls = []
    render = backend.tokenizer.apply_chat_template

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0])
        return render(*args, **kwargs)

    backend.tokenizer.apply_chat_template = counting  # type: ignore[method-assign]
    requests = [_request("alpha beta"), _request("gamma")]
    sizes = [backend.count_tokens(r.messages) for r in requests]
    rendered = len(calls)
    out = backend.generate(requests)
    # the engine counts each prompt, then sends it: sending renders nothing again, and the counts are
    # what was sent (counting rendered the first prompt whole too, the check of the split system turn)
    assert rendered == 4 and len(calls) == rendered
    assert [c.prompt_tokens for c in out] == sizes


@pytest.mark.slow
def test_stream_on_continuous_batching_gives_the_greedy_answers(backend: TransformersLLM) -> None:
    """Requests submitted at different times to transformers' continuous batching come back each with the
    answer of plain greedy decoding; a sampled one (a retry) goes through batched generate. (The backend
    opens this stream on CUDA only; here it is built on the CPU directly, warm-up about a minute.)"""
    from promem_fast.backends.llm_transformers import TransformersStream

    assert backend.open_stream() is None  # on the CPU the engine uses batched generate
    if not hasattr(backend.model, "init_continuous_batching"):
        pytest.skip("this transformers has no continuous batching (init_continuous_batching)")
    stream = TransformersStream(backend)
    texts = ["hello there", "tell me about the weather today", "x"]
    try:
        stream.submit(0, _request(texts[0], max_tokens=6))
        stream.submit(1, _request(texts[1], max_tokens=9))
        answers: dict[int, Any] = {}
        answers.update(stream.complete(5.0))
        stream.submit(2, _request(texts[2], max_tokens=4))
        stream.submit(3, _request(texts[0], max_tokens=6, temperature=0.8, seed=4))
        deadline = time.monotonic() + 120
        while stream.pending() and time.monotonic() < deadline:
            answers.update(stream.complete(1.0))
    finally:
        stream.close()
    assert sorted(answers) == [0, 1, 2, 3]
    for key, (text, budget) in enumerate(zip(texts, (6, 9, 4))):
        ids = backend.encode(_request(text).messages)
        expected = _reference_greedy(backend, ids, budget)
        assert backend.tokenizer.decode([t for t in expected if t not in backend.eos_ids],
                                        skip_special_tokens=True) == answers[key].text, key
    sampled = backend.generate([_request(texts[0], max_tokens=6, temperature=0.8, seed=4)])[0]
    assert answers[3].text == sampled.text
