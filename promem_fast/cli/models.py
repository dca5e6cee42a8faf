"""``promem models``: list, fetch or export the models the backends use."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("models", help="list, fetch or export the models the backends use")
    p.add_argument("action", choices=["list", "fetch", "export-nli"])
    p.add_argument("name", nargs="?", help="registry name (fetch) or model folder / hub id (export-nli)")
    p.add_argument("dst", nargs="?", type=Path, help="export-nli: output folder")
    p.add_argument("--fp16", action="store_true", help="export-nli: also write model_fp16.onnx")
    p.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from promem_fast import models

    if args.action == "list":
        rows = models.list_models()
        width = max((len(r["name"]) for r in rows), default=10)
        for r in rows:
            state = "available" if r.get("available") else "missing"
            print(f"{r['name']:<{width}}  {r['kind']:<10} {state:<10} {r.get('path') or r.get('hub_id') or ''}")
        return 0
    if args.action == "fetch":
        print(models.fetch(args.name))
        return 0
    if args.action == "export-nli":
        print(models.export_nli_onnx(args.name, args.dst, fp16=args.fp16))
        return 0
    return 2
