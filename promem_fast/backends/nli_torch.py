"""NLI in plain torch through transformers: any sequence-classification model folder or hub id.

Useful where ONNX Runtime is not wanted, and as the reference the ONNX export is checked against.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.deps import require
from promem_fast.backends._nli_common import WindowedNLI
from promem_fast.config import NLIConfig
from promem_fast.errors import ConfigError
from promem_fast.models import offline_env, resolve

log = logging.getLogger(__name__)

DEFAULT_MODEL = "roberta-large-mnli"
"""Registry entry used when ``nli.model`` is not set (its local copy, else its hub id)."""


class TorchNLI(WindowedNLI):
    """``AutoModelForSequenceClassification`` in eval mode; fp16 on CUDA unless ``nli.fp16`` says otherwise."""

    def __init__(self, config: NLIConfig) -> None:
        self.torch: Any = require("torch", "cpu", package="torch==2.13.0")
        transformers: Any = require("transformers", "cpu")
        source = resolve(config.model, DEFAULT_MODEL)
        cuda = bool(self.torch.cuda.is_available())
        if config.device == "cuda" and not cuda:
            raise ConfigError("nli.device = 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
        self.device = "cuda" if config.device != "cpu" and cuda else "cpu"
        local = Path(source).is_dir()
        with offline_env(local):
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=local)
            model = transformers.AutoModelForSequenceClassification.from_pretrained(source, local_files_only=local)
        half = (self.device == "cuda") if config.fp16 is None else config.fp16
        model = model.half() if half else model.float()
        self.model: Any = model.to(self.device).eval()
        accepted = set(tokenizer.model_input_names)
        self.input_names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted]
        super().__init__(tokenizer, model.config.id2label, config, f"{source} (config.json)")
        log.info("torch NLI %s on %s (%s)", source, self.device, "fp16" if half else "fp32")

    def logits(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            inputs = {name: torch.from_numpy(batch[name]).to(self.device) for name in self.input_names}
            return self.model(**inputs).logits.float().cpu().numpy()
