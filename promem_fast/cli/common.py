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
    parser.add_argument("--max-in-flight", type=int,
                        help="sessions processed at once (default 0, auto: as many as vLLM's KV cache holds; "
                             "in-process llama.cpp one; otherwise 64)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_config(args: argparse.Namespace) -> Any:
    """The run's :class:`~promem_fast.config.EngineConfig`, resolved (and validated) in one place from the
    command's options: ``--profile``, ``--config``, ``--set``, then the flags of the command at hand."""
    from promem_fast.backends import check_names
    from promem_fast.config import EngineConfig

    run: dict[str, Any] = {}
    if getattr(args, "max_in_flight", None) is not None:
        run["max_in_flight"] = args.max_in_flight
    if getattr(args, "no_progress", False):
        run["progress"] = False
    if getattr(args, "on_error", None):
        run["on_error"] = args.on_error
    if getattr(args, "no_timings", False):
        run["record_timings"] = False
    if getattr(args, "fsync", False):
        run["fsync"] = True
    if getattr(args, "compress", None) is not None:
        run["compression"] = {"enabled": True, "rate": args.compress}
    config = EngineConfig.resolve(profile=args.profile, file=args.config, overrides=args.overrides, run=run)
    check_names(config)  # a misspelt or missing plugin backend, named now rather than when a command loads it
    return config
