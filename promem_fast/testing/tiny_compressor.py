"""A tiny randomly initialised LLMLingua-2-shaped token classifier, built on the fly for the compression tests.

The real compressors (``microsoft/llmlingua-2-*-meetingbank``) cannot be downloaded here, so the tests run the
real code path (tokenizer offsets, chunking, batching, attention of layers 8-11) on a model of the same shape:
a cased BERT encoder with a WordPiece vocabulary, or an XLM-RoBERTa encoder with a SentencePiece vocabulary,
and a two-label token-classification head (label 1 = keep). Twelve layers so that layers 8-11 exist; hidden
size 32 so it runs in milliseconds. Its scores mean nothing.
"""

from __future__ import annotations

import logging
import string
from pathlib import Path
from typing import Any, Literal

from promem_fast.testing.tiny_nli import tiny_corpus

log = logging.getLogger(__name__)

Family = Literal["bert", "xlm-roberta"]

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


def build_tiny_token_classifier(dst: str | Path, *, family: Family = "bert", seed: int = 0, layers: int = 12
                                ) -> Path:
    """Write the tiny classifier (model + fast tokenizer) into ``dst`` and return ``dst``.

    ``family`` picks the shape of one of the two LLMLingua-2 models: ``bert`` (multilingual BERT: WordPiece,
    ``##`` continuations, positions from 0) or ``xlm-roberta`` (XLM-R: SentencePiece unigram with ``▁`` word
    starts, positions numbered from ``pad_token_id + 1``). ``layers`` can be lowered to check the clamping of
    the attention layers; ``seed`` fixes the weights.
    """
    import tokenizers
    import torch
    import transformers

    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    corpus = [*tiny_corpus(), *_EXTRA_SENTENCES]
    alphabet = list(string.ascii_letters + string.digits + string.punctuation)
    labels = {"id2label": {0: "LABEL_0", 1: "LABEL_1"}, "label2id": {"LABEL_0": 0, "LABEL_1": 1}}
    shape = {"hidden_size": 32, "num_hidden_layers": layers, "num_attention_heads": 2, "intermediate_size": 64,
             "type_vocab_size": 1, "initializer_range": 0.5, "num_labels": 2, **labels}
    if family == "bert":
        wordpiece = tokenizers.BertWordPieceTokenizer(lowercase=False, strip_accents=False)
        wordpiece.train_from_iterator(corpus, vocab_size=1000, min_frequency=1, initial_alphabet=alphabet,
                                      show_progress=False)
        wordpiece.save_model(str(dst))
        tokenizer = transformers.BertTokenizerFast(str(dst / "vocab.txt"), do_lower_case=False,
                                                   model_max_length=TINY_COMPRESSOR_MAX_LENGTH)
        config: Any = transformers.BertConfig(vocab_size=len(tokenizer),
                                              max_position_embeddings=TINY_COMPRESSOR_MAX_LENGTH, **shape)
        model_class: Any = transformers.BertForTokenClassification
    else:
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        unigram = tokenizers.SentencePieceUnigramTokenizer()
        unigram.train_from_iterator(corpus, vocab_size=1000, special_tokens=specials, unk_token="<unk>",
                                    initial_alphabet=alphabet, show_progress=False)
        unigram.save(str(dst / "tokenizer.json"))
        tokenizer = transformers.XLMRobertaTokenizerFast(
            tokenizer_file=str(dst / "tokenizer.json"), bos_token="<s>", cls_token="<s>", eos_token="</s>",
            sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
            model_max_length=TINY_COMPRESSOR_MAX_LENGTH)
        config = transformers.XLMRobertaConfig(vocab_size=len(tokenizer), pad_token_id=1, bos_token_id=0,
                                               eos_token_id=2, max_position_embeddings=TINY_COMPRESSOR_MAX_LENGTH + 2,
                                               **shape)
        model_class = transformers.XLMRobertaForTokenClassification
    tokenizer.save_pretrained(str(dst))
    torch.manual_seed(seed)
    model_class(config).eval().save_pretrained(str(dst))
    log.info("tiny %s token classifier (%d layers, vocab %d) written to %s", family, layers, len(tokenizer), dst)
    return dst
