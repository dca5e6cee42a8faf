"""``promem export``: each graph of an output file as node-link JSON or GraphML."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="write each graph of an output file as node-link JSON or GraphML")
    p.add_argument("input", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--format", choices=["node-link", "graphml"], default="node-link")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from promem_fast.cli.outputs import check_input
    from promem_fast.io import export_graphs

    check_input(args.input)
    written = export_graphs(args.input, args.out_dir, args.format)
    print(f"wrote {len(written)} {args.format} files to {args.out_dir}")
    return 0
