"""Options and config building shared by the commands that run an engine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML / TOML / JSON config file")
    parser.add_argument("--profile", choices=["cpu", "gpu", "paper", "scripted"],
                        help="preset applied before --config and --set (default: cpu)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override one config field, e.g. --set pipeline.tau_comp=0.5 (repeatable)")
    parser.add_argument("--max-in-flight", type=int, help="sessions processed at once")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_config(args: argparse.Namespace) -> Any:
    from promem_fast.config import EngineConfig

    config = EngineConfig.profile(args.profile or "cpu")
    if args.config:
        import dataclasses

        loaded = EngineConfig.load(args.config)
        config = loaded if not args.profile else EngineConfig.from_dict(
            {"profile": args.profile, **_nondefault(dataclasses.asdict(loaded))})
    config = config.with_overrides(args.overrides)
    if getattr(args, "max_in_flight", None) is not None:
        config.max_in_flight = args.max_in_flight
    if getattr(args, "no_progress", False):
        config.progress = False
    if getattr(args, "on_error", None):
        config.on_error = args.on_error
    if getattr(args, "no_timings", False):
        config.record_timings = False
    if getattr(args, "fsync", False):
        config.fsync = True
    if getattr(args, "compress", None) is not None:
        config.compression.enabled = True
        config.compression.rate = args.compress
    return config.validate()


def _nondefault(values: dict[str, Any]) -> dict[str, Any]:
    """The fields of a loaded config that differ from the defaults (so a --profile stays in force)."""
    import dataclasses

    from promem_fast.config import EngineConfig

    defaults = dataclasses.asdict(EngineConfig())
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict) and key != "roles":
            sub = {k: v for k, v in value.items() if defaults[key].get(k) != v}
            if sub:
                out[key] = sub
        elif defaults.get(key) != value:
            out[key] = value
    return out
