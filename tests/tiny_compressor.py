"""A tiny randomly initialised LLMLingua-2-shaped token classifier, built on the fly for the compression tests.

The real compressors (``microsoft/llmlingua-2-*-meetingbank``) cannot be downloaded here, so the tests run the
real code path (tokenizer offsets, chunking, batching, attention of layers 8-11) on a model of the same shape:
a cased BERT encoder with a WordPiece vocabulary and a two-label token-classification head (label 1 = keep).
Twelve layers so that layers 8-11 exist; hidden size 32 so it runs in milliseconds. Its scores mean nothing.
"""

from __future__ import annotations

import logging
import string
from pathlib import Path

from promem_fast.models import tiny_corpus

log = logging.getLogger(__name__)

TINY_COMPRESSOR_MAX_LENGTH = 128
"""Positions of the tiny model: small, so texts of a few dozen words already need chunking."""

_EXTRA_SENTENCES = (
    "I adopted a beagle named Biscuit last Saturday and we walk every morning before work.",
    "My sister Ana moved to Lisbon in May for a job at Nordvik Labs near the river.",
    "We booked a table for 4 people at 7 pm on Friday, March 14, 2025 to celebrate.",
    "The assistant suggested running 5 km three times a week and stretching afterwards.",
    "How was the trip? It was lovely, although the train was late on Monday.",
)
"""Dialogue-like sentences so the vocabulary has whole words for the test texts (the rest splits into pieces)."""


def build_tiny_token_classifier(dst: str | Path, *, seed: int = 0, layers: int = 12) -> Path:
    """Write the tiny classifier (model + fast tokenizer) into ``dst`` and return ``dst``.

    ``layers`` can be lowered to check the clamping of the attention layers; ``seed`` fixes the weights.
    """
    import tokenizers
    import torch
    import transformers

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    wordpiece = tokenizers.BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    wordpiece.train_from_iterator([*tiny_corpus(), *_EXTRA_SENTENCES], vocab_size=1000, min_frequency=1,
                                  initial_alphabet=list(string.ascii_letters + string.digits + string.punctuation),
                                  show_progress=False)
    wordpiece.save_model(str(dst))
    tokenizer = transformers.BertTokenizerFast(str(dst / "vocab.txt"), do_lower_case=False,
                                               model_max_length=TINY_COMPRESSOR_MAX_LENGTH)
    tokenizer.save_pretrained(str(dst))
    config = transformers.BertConfig(
        vocab_size=wordpiece.get_vocab_size(), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=TINY_COMPRESSOR_MAX_LENGTH, type_vocab_size=1,
        initializer_range=0.5, num_labels=2, id2label={0: "LABEL_0", 1: "LABEL_1"},
        label2id={"LABEL_0": 0, "LABEL_1": 1},
    )
    torch.manual_seed(seed)
    transformers.BertForTokenClassification(config).eval().save_pretrained(str(dst))
    log.info("tiny token classifier (%d layers, vocab %d) written to %s", layers, wordpiece.get_vocab_size(), dst)
    return dst
