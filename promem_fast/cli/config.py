"""``promem config``: print the effective configuration."""

from __future__ import annotations

import argparse
from typing import Any

from promem_fast.cli.common import build_config, config_args


def register(sub: Any) -> None:
    p = sub.add_parser("config", help="print the effective configuration")
    config_args(p)
    p.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    import json

    print(json.dumps(build_config(args).to_dict(), indent=2))
    return 0
