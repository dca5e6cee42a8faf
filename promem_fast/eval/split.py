"""Keeping calibration users apart from evaluation users, and a calibrated tau tied to its embedder.

``promem calibrate tau --users 0:5 -o tau.json`` picks tau_comp on the first five users of a benchmark file
and records it with the embedder it was measured for, the users it saw and the data file's sha256.
``promem eval halumem --users 5: --tau tau.json`` then evaluates on the other users with that tau, and
refuses when the record was made with another embedder (cosines of different models sit on different
scales) or on any of the users being evaluated (a threshold picked on the test users flatters them).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from promem_fast.config import EngineConfig
from promem_fast.errors import ConfigError

from .provenance import code_version, data_files, sha256_file
from .benchmark import Benchmark


def parse_users(spec: str) -> slice:
    """``START:END`` (either side may be empty, positions in the file, END excluded) as a slice."""
    start, sep, end = spec.partition(":")
    try:
        if not sep:
            raise ValueError
        lo = int(start) if start.strip() else None
        hi = int(end) if end.strip() else None
    except ValueError:
        raise ConfigError(f"--users takes START:END positions in the file (e.g. 0:5 or 5:), got {spec!r}") from None
    if (lo is not None and lo < 0) or (hi is not None and hi < 0):
        raise ConfigError(f"--users positions must be >= 0, got {spec!r}")
    return slice(lo, hi)


def select_users(bench: Benchmark, spec: str | None) -> Benchmark:
    """``bench`` with only the users of the ``START:END`` positions (all when ``spec`` is None)."""
    if spec is None:
        return bench
    users = bench.users[parse_users(spec)]
    if not users:
        raise ConfigError(f"--users {spec} selects none of the {len(bench.users)} users of {bench.source}")
    return dataclasses.replace(bench, users=users)


def embedder_name(config: EngineConfig) -> dict[str, Any]:
    """What a tau is tied to: the embedder's backend and model."""
    return {"backend": config.embedder.backend, "model": config.embedder.model}


def tau_record(config: EngineConfig, bench: Benchmark, data: str | Path, tau: float,
               curve: list[dict[str, Any]]) -> dict[str, Any]:
    """The record ``promem calibrate tau -o`` writes."""
    return {"tau_comp": tau, "embedder": embedder_name(config), "users": [u.user_id for u in bench.users],
            "data": data_files([data]), "curve": curve, "code": code_version()}


def apply_tau(config: EngineConfig, path: str | Path, bench: Benchmark) -> tuple[EngineConfig, dict[str, Any]]:
    """``config`` with the tau of the record at ``path``, after checking it was calibrated for this embedder
    and on none of ``bench``'s users; also what the result records about it."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        tau, embedder, seen = float(record["tau_comp"]), record["embedder"], set(record["users"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a tau record written by `promem calibrate tau -o` ({exc})") from None
    if embedder != embedder_name(config):
        raise ConfigError(f"{path}: tau was calibrated for the embedder {embedder.get('backend')} "
                          f"{embedder.get('model')}, this run embeds with {config.embedder.backend} "
                          f"{config.embedder.model}; calibrate tau for it first")
    shared = [u.user_id for u in bench.users if u.user_id in seen]
    if shared:
        raise ConfigError(f"{path}: tau was calibrated on {len(shared)} of the users evaluated here (e.g. "
                          f"{', '.join(shared[:3])}); evaluate on other users (--users) or calibrate on others")
    used = {"path": str(path), "sha256": sha256_file(path), "tau_comp": tau, "embedder": embedder,
            "calibration_users": len(seen)}
    return dataclasses.replace(config, pipeline=dataclasses.replace(config.pipeline, tau_comp=tau)), used
