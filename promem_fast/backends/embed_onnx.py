"""A sentence-transformers model on ONNX Runtime: the transformer exported once, pooling done in numpy.

ONNX Runtime avoids loading torch at run time and is usually quicker on the CPU. The folder's own
configuration decides everything the model would do in sentence-transformers: ``modules.json`` (which
modules there are), ``1_Pooling/config.json`` (pooling mode), ``sentence_bert_config.json`` (maximum
sequence length, lower-casing). Models with modules this does not reproduce (Dense layers, …) are refused
rather than embedded differently.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.deps import require
from promem_fast.backends.embed_st import DEFAULT_MODEL, length_order, unit_rows
from promem_fast.config import EmbedderConfig
from promem_fast.errors import ConfigError
from promem_fast.models import ExportMismatch, models_dir, offline_env, onnx_export, require_local

log = logging.getLogger(__name__)

CACHE_FOLDER = "onnx-cache"
"""Exports live in ``models/onnx-cache/<model>-<digest>/`` (models/ as moved by ``$PROMEM_MODELS_DIR``)."""
OPSET = 17
EXPORT_ATOL = 1e-4
"""Largest absolute difference of token states, ONNX Runtime against torch, accepted from an export."""
CHECK_TEXTS = ("Short one.", "A somewhat longer sentence that the export is checked on.", "Third text here.")
POOLING_MODES = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass(frozen=True)
class SentenceModelLayout:
    """What a sentence-transformers folder says about its pipeline."""

    transformer: Path
    pooling: str
    max_seq_length: int | None
    lower_case: bool

    @classmethod
    def read(cls, folder: Path) -> SentenceModelLayout:
        modules_file = folder / "modules.json"
        transformer, pooling_dir = folder, None
        if modules_file.is_file():
            for module in json.loads(modules_file.read_text(encoding="utf-8")):
                kind = str(module.get("type", "")).rsplit(".", 1)[-1]
                path = folder / module.get("path", "")
                if kind == "Transformer":
                    transformer = path
                elif kind == "Pooling":
                    pooling_dir = path
                elif kind != "Normalize":
                    raise ConfigError(
                        f"embedder.model: {folder} has a {kind} module, which the onnx embedder does not "
                        "reproduce; use embedder.backend = 'sentence-transformers' for this model"
                    )
        pooling = cls._pooling_mode(pooling_dir / "config.json") if pooling_dir is not None else "mean"
        settings: dict[str, Any] = {}
        for candidate in (folder / "sentence_bert_config.json", transformer / "sentence_bert_config.json"):
            if candidate.is_file():
                settings = json.loads(candidate.read_text(encoding="utf-8"))
                break
        length = settings.get("max_seq_length")
        return cls(transformer, pooling, int(length) if length else None, bool(settings.get("do_lower_case", False)))

    @staticmethod
    def _pooling_mode(path: Path) -> str:
        """The single pooling mode of a Pooling config (either the ``pooling_mode`` string or the flags)."""
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if isinstance(settings.get("pooling_mode"), str):
            modes = [settings["pooling_mode"]]
        else:
            flags = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                     "pooling_mode_max_tokens": "max", "pooling_mode_lasttoken": "lasttoken",
                     "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens": "weightedmean"}
            modes = [mode for key, mode in flags.items() if settings.get(key)]
        if len(modes) != 1 or modes[0] not in POOLING_MODES:
            raise ConfigError(f"{path}: pooling {modes or 'none'} is not one of {', '.join(POOLING_MODES)}")
        return modes[0]


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Sentence vectors from token states ``(b, s, d)`` and the attention mask ``(b, s)``."""
    weights = mask.astype(np.float32)[:, :, None]
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":
        last = np.maximum(mask.sum(axis=1) - 1, 0)
        # Right padding: the last real token sits at (number of real tokens - 1).
        return hidden[np.arange(hidden.shape[0]), last]
    if mode == "max":
        return np.where(weights > 0, hidden, np.float32(-1e9)).max(axis=1)
    total = (hidden * weights).sum(axis=1)
    count = np.maximum(weights.sum(axis=1), np.float32(1e-9))
    return total / (np.sqrt(count) if mode == "mean_sqrt_len_tokens" else count)


def cache_folder(transformer: Path) -> Path:
    """Where the export of ``transformer`` is kept; the name changes when the weights file changes."""
    weights = sorted(transformer.glob("*.safetensors")) or sorted(transformer.glob("*.bin"))
    fingerprint = [str(transformer.resolve())]
    fingerprint += [f"{w.name}:{w.stat().st_size}:{w.stat().st_mtime_ns}" for w in weights]
    digest = hashlib.sha256("|".join(fingerprint).encode()).hexdigest()[:12]
    name = transformer.resolve().name if transformer.resolve().name != "model" else transformer.resolve().parent.name
    return models_dir() / CACHE_FOLDER / f"{name}-{digest}"


def export_transformer(transformer: Path, target: Path) -> Path:
    """Export the bare transformer (token states out) to ``target/model.onnx`` unless it is already there.

    Written into a scratch folder and moved into place in one rename, so a reader never sees half a file
    and two processes exporting at once both end with one complete copy.
    """
    final = target / "model.onnx"
    if final.is_file():
        return final
    torch: Any = require("torch", "cpu", package="torch==2.13.0")
    transformers: Any = require("transformers", "cpu")
    ort: Any = require("onnxruntime", "cpu")
    with offline_env():
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(transformer), local_files_only=True)
        model = transformers.AutoModel.from_pretrained(str(transformer), local_files_only=True)
    model = model.float().eval()
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tokenizer.model_input_names]
    sample = tokenizer(["a sentence to trace the graph with", "another one"], padding=True, return_tensors="pt")
    order = tuple(names)

    class TokenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return self.model(**dict(zip(order, tensors, strict=True))).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with torch.inference_mode():
            exporter = onnx_export(TokenStates().eval(), tuple(sample[n] for n in names), names,
                                   "last_hidden_state", scratch / "model.onnx", OPSET)
            # Checked on a batch of another size and length than the traced one, so the dynamic axes are too.
            check = tokenizer(CHECK_TEXTS, padding=True, return_tensors="pt")
            reference = model(**{n: check[n] for n in names}).last_hidden_state.numpy()
        session = ort.InferenceSession(str(scratch / "model.onnx"), providers=[CPU])
        got = session.run(None, {n: check[n].numpy() for n in names})[0]
        # Only real tokens count: states at padded positions are never pooled and may differ freely.
        real = check["attention_mask"].numpy().astype(bool)
        diff = float(np.abs(got - reference)[real].max())
        if diff > EXPORT_ATOL:
            raise ExportMismatch(f"{transformer}: ONNX token states differ from torch by {diff:.3e}")
        try:
            os.replace(scratch, target)
        except OSError:
            if not final.is_file():  # a concurrent export that won the rename is fine; anything else is not
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("exported %s to %s (%s exporter, max |diff| %.1e)", transformer, final, exporter, diff)
    return final


class OnnxEmbedder:
    """Same contract and vectors as :class:`~promem_fast.backends.embed_st.SentenceTransformerEmbedder`
    (within float tolerance), computed by ONNX Runtime; CUDA provider when present and allowed.

    Texts are tokenised once, sorted by token count, batched by ``embedder.batch_size`` and padded per batch.
    """

    def __init__(self, config: EmbedderConfig) -> None:
        ort: Any = require("onnxruntime", "cpu")
        transformers: Any = require("transformers", "cpu")
        folder = require_local(config.model, DEFAULT_MODEL, "embedder.model")
        self.layout = SentenceModelLayout.read(folder)
        onnx_file = export_transformer(self.layout.transformer, cache_folder(self.layout.transformer))
        available = ort.get_available_providers()
        if config.device == "cuda" and CUDA not in available:
            raise ConfigError(
                "embedder.device = 'cuda' but ONNX Runtime has no CUDAExecutionProvider; install "
                "onnxruntime-gpu or set embedder.device to 'auto' or 'cpu'"
            )
        providers = [CUDA, CPU] if config.device != "cpu" and CUDA in available else [CPU]
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if config.n_threads > 0:
            options.intra_op_num_threads = config.n_threads
        self.session: Any = ort.InferenceSession(str(onnx_file), sess_options=options, providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        with offline_env():
            self.tokenizer: Any = transformers.AutoTokenizer.from_pretrained(
                str(self.layout.transformer), local_files_only=True)
        limit = int(self.tokenizer.model_max_length or 512)
        self.max_length = min(self.layout.max_seq_length or limit, limit)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0
        width = self.session.get_outputs()[0].shape[-1]
        if not isinstance(width, int):  # a symbolic axis: take the width from the model's own config
            width = json.loads((self.layout.transformer / "config.json").read_text(encoding="utf-8"))["hidden_size"]
        self.dim = int(width)
        self.batch_size = max(1, config.batch_size)
        self.query_prompt = config.query_prompt
        self._tokenizing = threading.Lock()
        """The tokenizer takes one call at a time (the Embedder protocol's threads); ONNX Runtime's ``run`` is
        thread-safe, so batches of two threads still run side by side."""
        log.info("ONNX embedder %s on %s (dim %d, %s pooling)", folder, self.session.get_providers()[0], self.dim,
                 self.layout.pooling)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [t.lower() for t in texts] if self.layout.lower_case else list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        with self._tokenizing:
            encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        order = length_order(encoded)
        for start in range(0, len(texts), self.batch_size):
            chosen = order[start : start + self.batch_size]
            width = max(len(encoded[i]) for i in chosen)
            ids = np.full((len(chosen), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            for row, i in enumerate(chosen):
                ids[row, : len(encoded[i])] = encoded[i]
                mask[row, : len(encoded[i])] = 1
            inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, {n: inputs[n] for n in self.input_names})[0]
            out[chosen] = pool(np.asarray(hidden, dtype=np.float32), mask, self.layout.pooling)
        return unit_rows(out)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of retrieval queries: ``query_prompt + text`` when a prompt is configured."""
        prompt = self.query_prompt or ""
        return self.embed([prompt + t for t in texts])
