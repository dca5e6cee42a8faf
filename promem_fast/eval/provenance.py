"""What a result needs to be reproduced: the code, the data, the whole effective config and its decoding.

A figure in a report is only worth something if someone can rerun it and get the same number, so every
result (``promem eval``), every aggregate (``promem eval aggregate -o``) and every calibration records:

- the code: the git commit of the checkout the package runs from (and whether it had uncommitted changes),
  or, for an installed package, its version;
- the data: each input file's path, size and sha256;
- the effective config, every field (after the profile, the config file and ``--set`` were applied), an
  engine argument named as a secret (``hf_token``, ``api_key``) redacted;
- what decides a reply: per role the model, its dtype and the engine arguments passed to it verbatim
  (``llm.options``: an FP8 KV cache, say), temperature, retry temperature, seed and reply budget; the topic
  segmenter actually used; compression; the NLI model and threshold;
- the judge: its model (a default one named by its file, with the weights' path, size and sha256, as for the
  embedder) and the source of its prompts (the project's own, or a file of the user's HaluMem
  checkout with its sha256).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import subprocess
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from promem_fast.config import ROLES, EngineConfig
from promem_fast.config_compression import whose_messages
from promem_fast.config_merge import redact_options, without_secrets

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's bytes, read in chunks (benchmark files run to hundreds of MB)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def data_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Path, size and sha256 of each input file (a missing one is recorded as such, not raised: the
    result of a run whose data was moved must still load)."""
    out = []
    for path in paths:
        p = Path(path)
        if p.is_file():
            out.append({"path": str(p), "bytes": p.stat().st_size, "sha256": sha256_file(p)})
        else:
            out.append({"path": str(p), "bytes": None, "sha256": None})
    return out


def code_version() -> dict[str, Any]:
    """The package version and, when it runs from a git checkout, the commit and whether the tree was dirty."""
    try:
        version = importlib.metadata.version("promem-fast")
    except importlib.metadata.PackageNotFoundError:
        version = None
    info: dict[str, Any] = {"package_version": version, "commit": None, "dirty": None}
    root = _PACKAGE_DIR.parent
    if not (root / ".git").exists():
        return info
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return info
    info["commit"] = commit or None
    info["dirty"] = bool(status.strip())
    return info


def effective_segmenter(config: EngineConfig) -> str:
    """The topic segmenter a run actually uses (``auto`` resolved as the pipeline resolves it)."""
    name = config.pipeline.segmenter
    if name == "auto":
        return "lightmem" if config.compression.model else "similarity"
    return name


def decoding(config: EngineConfig) -> dict[str, Any]:
    """Per role, what decides its replies: backend, model, dtype, engine arguments, temperatures, seed and
    reply budget."""
    out = {}
    for role in ROLES:
        llm = config.llm_for(role)
        out[role] = {"backend": llm.backend, "model": llm.model, "base_url": llm.base_url, "dtype": llm.dtype,
                     "engine_options": redact_options(llm.options),
                     "temperature": llm.temperature, "retry_temperature": llm.retry_temperature,
                     "seed": llm.seed, "max_tokens": config.pipeline.max_tokens.get(role),
                     "max_attempts": config.pipeline.max_attempts}
    return out


def provenance(config: EngineConfig, data: Iterable[str | Path], *,
               judge_prompts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reproduction record of one run (see the module docstring)."""
    compression = config.compression
    judge = config.llm_for("judge")
    weights = model_weights("llm", judge.backend, judge.model)
    return {
        "code": code_version(),
        "python": platform.python_version(),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "data": data_files(data),
        "config": without_secrets(config.to_dict()),
        "decoding": decoding(config),
        "segmenter": effective_segmenter(config),
        "compression": {"enabled": compression.enabled, "rate": compression.rate, "model": compression.model,
                        "speakers": compression.speakers},
        "nli": {"backend": config.nli.backend, "model": config.nli.model, "threshold": config.nli.threshold},
        "embedder": {"backend": config.embedder.backend, "model": config.embedder.model,
                     "weights": model_weights("embedder", config.embedder.backend, config.embedder.model)},
        "seeds": sorted({config.llm_for(role).seed for role in ROLES}),
        "judge": {"model": _model(judge, weights), "prompts": judge_prompts or {"source": "promem_fast"},
                  "weights": weights},
    }


def _models(decoding: dict[str, Any]) -> list[str]:
    """One line per distinct model setting of the roles that extract and answer (the judge has its own line):
    its backend and model, and, where recorded, its dtype and engine arguments, which change replies as much
    as the model does (an FP8 KV cache rounds every attention)."""
    roles: dict[str, list[str]] = {}
    for role, d in decoding.items():
        if role != "judge":
            text = f"`{d['backend']} {d['model']}`" if d.get("model") else f"`{d['backend']}` (its default model)"
            settings = ([f"dtype {d['dtype']}"] if "dtype" in d else []) + [
                f"{k}={v}" for k, v in sorted((d.get("engine_options") or {}).items())]
            roles.setdefault(text + (f" ({', '.join(settings)})" if settings else ""), []).append(role)
    if len(roles) == 1:
        return [f"- model: {next(iter(roles))}"]
    return [f"- model of {', '.join(names)}: {text}" for text, names in roles.items()]


def _model(llm: Any, weights: dict[str, Any] | None) -> str:
    """``backend model``, the default model named by its file (a null model says nothing to a reader)."""
    if llm.model:
        return f"{llm.backend} {llm.model}"
    return f"{llm.backend} {Path(weights['path']).name}" if weights else llm.backend


HASH_LIMIT = 4 << 30
"""Model files past this size are recorded by path and size only (hashing 16 GB would take minutes)."""


def model_weights(kind: str, backend: str, model: str | None) -> dict[str, Any] | None:
    """The weights a local backend loads, the default ones included: path, bytes and sha256 (of the file, or
    of a folder's files in name order); None for remote and scripted backends, whose model is only a name."""
    path = _weights_path(kind, backend, model)
    if path is None or not path.exists():
        return None
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    size = sum(f.stat().st_size for f in files)
    if size > HASH_LIMIT:
        return {"path": str(path), "bytes": size, "sha256": None}
    if path.is_file():
        return {"path": str(path), "bytes": size, "sha256": sha256_file(path)}
    digest = hashlib.sha256()
    for f in files:  # each file's name and digest: a renamed or changed file changes the folder's
        digest.update(f"{f.relative_to(path).as_posix()}\0{sha256_file(f)}\n".encode())
    return {"path": str(path), "bytes": size, "sha256": digest.hexdigest()}


def _weights_path(kind: str, backend: str, model: str | None) -> Path | None:
    from promem_fast.models import resolve

    if kind == "llm" and backend == "llamacpp":
        if model is not None:
            return Path(model)
        from promem_fast.backends._llamacpp_load import default_model_path
        from promem_fast.errors import MissingDependency

        try:
            return default_model_path()
        except MissingDependency:
            return None
    if kind == "embedder" and backend in ("sentence-transformers", "onnx"):
        from promem_fast.backends.embed_st import DEFAULT_MODEL

        return Path(resolve(model, DEFAULT_MODEL))
    return None


def describe(record: dict[str, Any]) -> list[str]:
    """Markdown lines naming a provenance record's essentials (for reports)."""
    code = record.get("code", {})
    where = (f"commit `{code['commit'][:12]}`" + (" (uncommitted changes)" if code.get("dirty") else "")
             if code.get("commit") else f"package version {code.get('package_version') or 'unknown'}")
    prompts = record.get("judge", {}).get("prompts", {})
    compression = record.get("compression", {})
    source = ("the project's own prompts" if prompts.get("source") == "promem_fast" else
              f"`{prompts.get('path')}` (sha256 `{str(prompts.get('sha256'))[:16]}…`)")
    lines = [f"- code: {where}; Python {record.get('python')}",
             f"- judge: {record.get('judge', {}).get('model')} with {source}",
             f"- segmenter: {record.get('segmenter')}; compression: "
             + (f"on, rate {compression['rate']:g} of {whose_messages(compression.get('speakers'))} messages"
                if compression.get("enabled") else "off")
             + f"; seeds: {', '.join(map(str, record.get('seeds', [])))}"]
    lines += _models(record.get("decoding", {}))
    for item in record.get("data", []):
        digest = item["sha256"] or "missing"
        lines.append(f"- data: `{item['path']}` sha256 `{digest}`")
    return lines

