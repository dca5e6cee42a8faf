"""Random-weight stand-ins at production shapes for the throughput harness, each built once into a folder.

A Llama of any shape (Llama-3.1-8B's, or a 2-layer one for CPU runs) with a tokenizer trained on the run's
own text, a RoBERTa NLI classifier (roberta-large-mnli's shape) and a sentence-transformers BERT embedder
(all-MiniLM-L6-v2's shape). Their outputs mean nothing; only their cost is real, so the harness replays
their answers (``replay``). The Llama builder and the chat template come from ``tiny_models``.
"""

from __future__ import annotations

import gc
import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promem_fast.testing.tiny_llama import BOS, CHAT_TEMPLATE, EOS, ROLE_TOKENS, SPECIAL_TOKENS, build_random_llama

log = logging.getLogger("throughput")

LLAMA_31_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 14336,
               "vocab_size": 128256, "rope_theta": 500000.0, "max_position": 131072}
"""Llama-3.1-8B's configuration (meta-llama/Llama-3.1-8B-Instruct ``config.json``)."""
TINY_LLAMA = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 128,
              "vocab_size": 8192, "rope_theta": 10000.0, "max_position": 8192}
"""For CPU runs. The vocabulary is larger than the trained tokenizer's, as with the 8B shape, so ids the
tokenizer does not know are generated and must decode without error."""
ROBERTA_LARGE = {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096, "vocab_size": 50265}
"""roberta-large-mnli's shape: the GPU profile's NLI model."""
MINILM = {"layers": 6, "hidden": 384, "heads": 12, "intermediate": 1536, "vocab_size": 30522}
"""all-MiniLM-L6-v2's shape: the random stand-in for the GPU profile's embedder (which needs weights)."""
TINY_ENCODER = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "vocab_size": 4096}


def train_corpus_tokenizer(dst: Path, texts: Sequence[str], vocab_size: int = 32000) -> Any:
    """A byte-level BPE trained on ``texts`` with ``tiny_models``' special tokens and chat template, saved in
    ``dst``; the vocabulary stops growing where the text runs out of merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                        additional_special_tokens=list(ROLE_TOKENS))
    tokenizer.chat_template = CHAT_TEMPLATE
    dst.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(dst)
    return tokenizer


def prepare_random_llama(dst: Path, shape: dict[str, Any], texts: Sequence[str], *, weights: bool, dtype: str,
                         device: str) -> Path:
    """Tokenizer, configuration and (with ``weights``) random weights of ``shape`` in ``dst``, built once.

    The model is created on ``device`` (``build_random_llama`` inside a ``torch.device`` scope): random
    initialisation of 8 billion parameters takes minutes on a CPU and well under a second on a GPU.
    """
    import torch

    if not (dst / "tokenizer.json").is_file():
        log.info("training the tokenizer for %s", dst)
        train_corpus_tokenizer(dst, texts)
    has_weights = any(dst.glob("*.safetensors"))
    if (dst / "config.json").is_file() and (has_weights or not weights):
        log.info("reusing the random Llama in %s", dst)
        return dst
    from transformers import AutoTokenizer

    size = len(AutoTokenizer.from_pretrained(dst))
    fields = dict(shape, vocab_size=max(shape["vocab_size"], size))
    log.info("building a random Llama (%d layers, hidden %d, vocab %d, %s) on %s into %s", fields["layers"],
             fields["hidden"], fields["vocab_size"], dtype, device, dst)
    with torch.device(device):
        build_random_llama(dst, dtype=dtype, weights=weights, **fields)
    if device == "cuda":  # the built copy is garbage now; give its 16 GB back before the backend loads its own
        gc.collect()
        torch.cuda.empty_cache()
    return dst


def _encoder_config(transformers: Any, kind: str, shape: dict[str, Any], vocab: int, **extra: Any) -> Any:
    cls = transformers.RobertaConfig if kind == "roberta" else transformers.BertConfig
    return cls(vocab_size=max(shape["vocab_size"], vocab), hidden_size=shape["hidden"],
               num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
               intermediate_size=shape["intermediate"], **extra)


def prepare_random_nli(dst: Path, shape: dict[str, Any], texts: Sequence[str], device: str) -> Path:
    """A random RoBERTa sequence classifier of ``shape`` with roberta-large-mnli's label order and a byte-level
    BPE trained on ``texts``, built once. Its labels mean nothing; only its cost is real."""
    if (dst / "config.json").is_file():
        return dst
    import torch
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    dst.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=32000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                            show_progress=False)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file, merges_file = bpe.save_model(scratch)
        tokenizer = transformers.RobertaTokenizerFast(vocab_file, merges_file, model_max_length=512)
        tokenizer.save_pretrained(str(dst))
    labels = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    config = _encoder_config(transformers, "roberta", shape, bpe.get_vocab_size(), max_position_embeddings=514,
                             type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, id2label=labels,
                             label2id={v: k for k, v in labels.items()})
    log.info("building a random NLI classifier (%d layers, hidden %d) on %s into %s", shape["layers"],
             shape["hidden"], device, dst)
    with torch.device(device):
        transformers.RobertaForSequenceClassification(config).save_pretrained(str(dst))
    return dst


def prepare_random_embedder(dst: Path, shape: dict[str, Any], texts: Sequence[str], device: str) -> Path:
    """A random BERT of ``shape`` with mean pooling, written as a sentence-transformers folder (the layout of
    the shipped MiniLM: model at the top, ``modules.json``, ``1_Pooling``), with a WordPiece vocabulary
    trained on ``texts``; built once."""
    if (dst / "modules.json").is_file():
        return dst
    import torch
    import transformers
    from tokenizers import BertWordPieceTokenizer

    dst.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(texts, vocab_size=30522, show_progress=False)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file = wordpiece.save_model(scratch)[0]
        transformers.BertTokenizerFast(vocab_file, do_lower_case=True, model_max_length=512).save_pretrained(str(dst))
    config = _encoder_config(transformers, "bert", shape, wordpiece.get_vocab_size(), max_position_embeddings=512)
    log.info("building a random embedder (%d layers, hidden %d) on %s into %s", shape["layers"], shape["hidden"],
             device, dst)
    with torch.device(device):
        transformers.BertModel(config).save_pretrained(str(dst))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (dst / "1_Pooling").mkdir(exist_ok=True)
    (dst / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": shape["hidden"], "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}), encoding="utf-8")
    (dst / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}),
                                                   encoding="utf-8")
    (dst / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    return dst
