"""NLI on ONNX Runtime: the GPU profile's entailment checker (CUDA provider, fp16) and a fast CPU one.

The model folder is what :func:`promem_fast.models.export_nli_onnx` writes: ``model.onnx`` (and
``model_fp16.onnx``), the tokenizer files and ``config.json`` for the label order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.deps import require
from promem_fast.backends._nli_common import WindowedNLI
from promem_fast.config import NLIConfig
from promem_fast.errors import ConfigError
from promem_fast.models import offline_env, require_local

log = logging.getLogger(__name__)

DEFAULT_MODEL = "roberta-large-mnli-onnx"
"""Registry entry used when ``nli.model`` is not set."""
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


class OnnxNLI(WindowedNLI):
    """An exported sequence classifier on an ONNX Runtime ``InferenceSession``.

    On the CUDA provider the inputs are bound once per batch with IO binding and the logits are allocated
    on the device, so ONNX Runtime does not stage them through extra host buffers; fp16 is used there by
    default (``nli.fp16 = None``) when ``model_fp16.onnx`` exists.
    """

    def __init__(self, config: NLIConfig) -> None:
        ort: Any = require("onnxruntime", "cpu")
        transformers: Any = require("transformers", "cpu")
        folder = require_local(config.model, DEFAULT_MODEL, "nli.model")
        available = ort.get_available_providers()
        if config.device == "cuda" and CUDA not in available:
            raise ConfigError(
                "nli.device = 'cuda' but ONNX Runtime has no CUDAExecutionProvider here; install "
                "onnxruntime-gpu (pip install 'promem-fast[gpu]') or set nli.device to 'auto' or 'cpu'"
            )
        self.on_cuda = config.device != "cpu" and CUDA in available
        model_file = self._model_file(folder, config.fp16, self.on_cuda)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers = [CUDA, CPU] if self.on_cuda else [CPU]
        self.session: Any = ort.InferenceSession(str(model_file), sess_options=options, providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_name = self.session.get_outputs()[0].name
        config_file = folder / "config.json"
        if not config_file.is_file():
            raise ConfigError(f"nli.model: {folder} has no config.json (needed for the label order)")
        id2label = json.loads(config_file.read_text(encoding="utf-8")).get("id2label", {})
        with offline_env():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        super().__init__(tokenizer, id2label, config, str(config_file))
        log.info("ONNX NLI %s on %s", model_file, self.session.get_providers()[0])

    @staticmethod
    def _model_file(folder: Path, fp16: bool | None, on_cuda: bool) -> Path:
        """``model_fp16.onnx`` when half precision is asked for (or left to the device and on CUDA)."""
        fp32_file, fp16_file = folder / "model.onnx", folder / "model_fp16.onnx"
        want_half = on_cuda if fp16 is None else fp16
        if want_half and fp16_file.is_file():
            if not on_cuda:
                log.warning("nli.fp16 on the CPU provider: many fp16 kernels are missing there; expect it slow")
            return fp16_file
        if want_half and fp16 is True:
            raise ConfigError(f"nli.fp16 = true but {fp16_file} does not exist; export it with fp16=True")
        if want_half:
            log.info("%s not found; running the fp32 model", fp16_file)
        if not fp32_file.is_file():
            raise ConfigError(f"nli.model: {folder} has no model.onnx; export it with promem_fast.models")
        return fp32_file

    def logits(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        feeds = {name: batch[name] for name in self.input_names}
        if not self.on_cuda:
            return np.asarray(self.session.run([self.output_name], feeds)[0], dtype=np.float32)
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        binding.bind_output(self.output_name, "cuda")
        self.session.run_with_iobinding(binding)
        return np.asarray(binding.copy_outputs_to_cpu()[0], dtype=np.float32)
