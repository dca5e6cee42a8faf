"""Random-weight Llama models and freshly trained tokenizers, for tests and throughput runs.

Nothing is downloaded. The tokenizer is a byte-level BPE trained on generated sentences, with a small chat
template, so any text round-trips and prompts look like chat prompts. The model is a ``LlamaForCausalLM``
of any shape with random weights: tiny for CPU tests, Llama-3.1-8B-shaped for the GPU throughput harness,
where ``weights=False`` writes only ``config.json`` so that vLLM's ``load_format="dummy"`` can fill the
weights on the GPU without 16 GB going through the disk.

    train_tokenizer(folder, vocab_size=512)
    build_random_llama(folder, layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128,
                       vocab_size=512, rope_theta=10000.0, max_position=512, dtype="float32")
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BOS, EOS = "<|begin|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (BOS, EOS, *ROLE_TOKENS)
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""Role header, content, end marker; the end marker doubles as EOS so a reply stops where a turn would."""

_NAMES = ("Maya", "Ana", "Tomas", "Lena", "Ravi", "Oskar", "Ines", "Kenji", "Sofia", "Bruno")
_PLACES = ("Lisbon", "Porto", "Oslo", "Kyoto", "Lyon", "Quito", "Cork", "Graz")
_THINGS = ("a beagle", "the new job", "her sister", "a running plan", "the garden", "a guitar", "the trip",
           "a cooking class", "the apartment", "his bike")
_VERBS = ("talked about", "planned", "worried about", "enjoyed", "started", "finished", "cancelled", "booked")
_TIMES = ("last Saturday", "in May", "every morning", "on 3 March", "next week", "at 7 pm", "since 2021")
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "ch", "sh", "qu"]


def _sentences(count: int, seed: int) -> Iterator[str]:
    """Dialogue-like sentences, each with a few invented words so large vocabularies have pairs to merge."""
    rng = random.Random(seed)
    for _ in range(count):
        invented = " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 5)))
                            for _ in range(rng.randint(1, 4)))
        yield (f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} in {rng.choice(_PLACES)} "
               f"{rng.choice(_TIMES)}, {invented}; it cost {rng.randint(1, 999)} euros.")


def train_tokenizer(dst: str | Path, vocab_size: int, *, seed: int = 0) -> Any:
    """Train a byte-level BPE of ``vocab_size`` entries (specials included), save it with its chat template
    in ``dst`` and return it as a ``PreTrainedTokenizerFast``. There is no pad token on purpose: backends
    must cope with models that lack one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Enough text that the merges can fill the vocabulary: a few hundred sentences for a tiny one.
    core.train_from_iterator(_sentences(max(300, vocab_size // 2), seed), trainer=trainer)
    if core.get_vocab_size() < vocab_size:
        logger.warning("the tokenizer reached %d of the %d entries asked for", core.get_vocab_size(), vocab_size)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                        additional_special_tokens=list(ROLE_TOKENS))
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(dst)
    return tokenizer


def _llama_config(**fields: Any) -> Any:
    """A ``LlamaConfig`` whatever the transformers release: 5.x takes ``rope_parameters`` and ``dtype``,
    4.x ``rope_theta`` and ``torch_dtype``."""
    from transformers import LlamaConfig

    accepted = inspect.signature(LlamaConfig.__init__).parameters
    rope_theta = fields.pop("rope_theta")
    dtype = fields.pop("dtype")
    if "rope_parameters" in accepted:
        fields["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
    else:
        fields["rope_theta"] = rope_theta
    fields["dtype" if "dtype" in accepted else "torch_dtype"] = dtype
    return LlamaConfig(**fields)


def build_random_llama(dst: str | Path, *, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int,
                       vocab_size: int, rope_theta: float, max_position: int, dtype: str = "float32",
                       seed: int = 0, init_std: float = 0.02, weights: bool = True) -> Path:
    """Write a random-weight ``LlamaForCausalLM`` of this shape to ``dst`` and return the folder.

    Special token ids come from the tokenizer already saved in ``dst`` (see :func:`train_tokenizer`), so
    the model stops on the template's end marker. ``weights=False`` writes the configuration only (for
    vLLM's dummy loader). ``init_std`` is the weights' standard deviation; larger values give peakier
    next-token distributions, which keeps greedy decoding away from near-ties in tests.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaForCausalLM

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    bos_id, eos_id = 1, 2
    if (dst / "tokenizer.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(dst)
        bos_id, eos_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config = _llama_config(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_position,
        rope_theta=rope_theta, dtype=dtype, initializer_range=init_std, bos_token_id=bos_id,
        eos_token_id=eos_id, tie_word_embeddings=False,
    )
    config.architectures = ["LlamaForCausalLM"]
    GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id).save_pretrained(dst)
    if not weights:
        config.save_pretrained(dst)
        return dst
    torch_dtype = getattr(torch, dtype)
    previous = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_default_dtype(torch_dtype)
        try:
            model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(previous)
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id)
    model.save_pretrained(dst)
    logger.info("random Llama (%d layers, hidden %d, %.1fM parameters) written to %s", layers, hidden,
                sum(p.numel() for p in model.parameters()) / 1e6, dst)
    return dst
