"""A tiny randomly initialised NLI classifier, for tests and smoke runs that need the real machinery
(tokenizer, pair template, ONNX export, ONNX Runtime) of roberta-large-mnli without downloading it."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from promem_fast.deps import require

log = logging.getLogger(__name__)

TINY_MAX_LENGTH = 128
"""Token limit of the tiny test model: small enough that windowing is easy to trigger in tests."""


def tiny_corpus() -> list[str]:
    """A few hundred varied sentences to train the tiny model's byte-level BPE tokenizer on."""
    people = ("I", "My sister", "The assistant", "Our neighbour", "A friend of mine", "Grandpa", "The team")
    actions = ("adopted", "visited", "cooked", "painted", "planned", "bought", "lost", "found", "fixed")
    things = ("a puppy", "the old museum", "spicy noodles", "a blue fence", "a trip to Kyoto", "new shoes",
              "the car keys", "a tiny kitten", "the kitchen sink", "two concert tickets")
    times = ("yesterday", "last week", "in May", "on Sunday morning", "after work")
    return [f"{p} {a} {t} {w}." for p in people for a in actions for t in things for w in times][::3]


def build_tiny_nli(dst: str | Path, *, seed: int = 0) -> Path:
    """A randomly initialised two-layer RoBERTa NLI classifier saved as a Hugging Face folder.

    It stands in for roberta-large-mnli wherever a test needs the real machinery (tokenizer, pair
    template, export, ONNX Runtime) without a download: same architecture family, same byte-level BPE
    tokenizer type (trained here on :func:`tiny_corpus`), and the same label order as roberta-large-mnli
    (0 = CONTRADICTION, 1 = NEUTRAL, 2 = ENTAILMENT). Its predictions mean nothing.
    """
    tokenizers = require("tokenizers", "cpu")
    transformers = require("transformers", "cpu")
    torch = require("torch", "cpu", package="torch==2.13.0")
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(tiny_corpus(), vocab_size=600, min_frequency=1, special_tokens=specials,
                            show_progress=False)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file, merges_file = bpe.save_model(scratch)
        tokenizer = transformers.RobertaTokenizerFast(vocab_file, merges_file, model_max_length=TINY_MAX_LENGTH)
        tokenizer.save_pretrained(str(dst))
    id2label = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    config = transformers.RobertaConfig(
        vocab_size=bpe.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=TINY_MAX_LENGTH + 2, type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, initializer_range=0.2,
        id2label=id2label, label2id={v: k for k, v in id2label.items()},
    )
    torch.manual_seed(seed)
    model = transformers.RobertaForSequenceClassification(config).eval()
    model.save_pretrained(str(dst))
    (dst / "README.md").write_text(
        "Tiny randomly initialised RoBERTa NLI classifier built by promem_fast.testing.tiny_nli.build_tiny_nli "
        "for tests. Its outputs are meaningless.\n", encoding="utf-8")
    log.info("tiny NLI model (vocab %d) written to %s", bpe.get_vocab_size(), dst)
    return dst

