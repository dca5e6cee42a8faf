"""The ``--ray`` options of ``promem extract`` and the command body that hands the run to :func:`extract`."""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray scale-out (pip install 'promem-fast[ray]'; OUTPUT is then a directory)")
    group.add_argument("--ray", nargs="?", const="auto", metavar="auto|ADDRESS",
                       help="run on Ray: 'auto' joins this machine's cluster or starts a local one")
    group.add_argument("--actors", type=int, default=1, help="actors, each holding one engine (default 1)")
    group.add_argument("--gpus-per-actor", type=float,
                       help="GPUs reserved per actor (default: 1 when the LLM runs on vLLM, else 0)")
    group.add_argument("--shard-sessions", type=int,
                       help="sessions per shard of a JSONL file (default: up to 1000, so every actor gets a shard)")
    group.add_argument("--parquet", action="store_true", help="also write each shard's graphs as Parquet")


def run(args: argparse.Namespace, config: Any) -> int:
    """``promem extract --ray``: rerunning the same command continues a killed run."""
    from promem_fast.distributed import extract

    summary = extract(args.input, args.output, config=config, address=args.ray, actors=args.actors,
                      gpus_per_actor=args.gpus_per_actor, shard_sessions=args.shard_sessions,
                      parquet=args.parquet, overwrite=args.overwrite)
    print(summary.table())
    print(f"graphs: {args.output}/*-?????.jsonl (one file per shard; summary.json holds the totals)")
    if getattr(args, "db", None) is None:
        print(f"add them to a memory store with: promem ingest {args.output} --db memory.db")
    return 0
