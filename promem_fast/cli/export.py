"""``promem export``: each graph of an output file as node-link JSON or GraphML; with ``--db``, a memory
store as one JSONL (the format ``promem import`` reads)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from promem_fast.cli.store_io import key_arg


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="write each graph of an output file as node-link JSON or GraphML, "
                                      "or (--db) a memory store as one JSONL")
    p.add_argument("input", type=Path, help="graphs JSONL; with --db, the JSONL file to write")
    p.add_argument("out_dir", type=Path, nargs="?", help="folder for one file per graph (not with --db)")
    p.add_argument("--format", choices=["node-link", "graphml"], default="node-link")
    p.add_argument("--db", type=Path, help="export this memory store instead of a graphs file")
    p.add_argument("--tenant", help="with --db: only this tenant (default: all)")
    key_arg(p)
    p.add_argument("--plaintext", action="store_true",
                   help="with --db and --key-file: write the encrypted store's memory as plain text (refused "
                        "without it, so decrypting is never a side effect)")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Refuse a mix of the two forms: with ``--db``, INPUT is the file written, so ``export GRAPHS DIR --db DB``
    (``--db`` added to a graphs export by mistake) would overwrite the graphs file with the store."""
    from promem_fast.cli.outputs import check_input
    from promem_fast.errors import UsageError
    from promem_fast.io import export_graphs

    if args.db is not None:
        from promem_fast.cli.store_io import cmd_store_export

        if args.out_dir is not None:
            raise UsageError(f"export --db writes one JSONL ({args.input}) and takes no OUT_DIR ({args.out_dir})")
        return cmd_store_export(args)
    if args.tenant is not None:
        raise UsageError("--tenant selects what a memory store exports; it needs --db")
    if args.out_dir is None:
        raise UsageError("export needs OUT_DIR (or --db to export a memory store)")
    check_input(args.input)
    written = export_graphs(args.input, args.out_dir, args.format)
    print(f"wrote {len(written)} {args.format} files to {args.out_dir}")
    return 0
