"""``promem migrate``: bring a store's schema (an SQLite file or a PostgreSQL database) up to this version's.

Opening a store for writing migrates it too; this command does it on its own, for a deployment that
upgrades the schema once before starting its replicas and workers. Every step runs in one transaction, so a
failed migration leaves the store as it was, and a store written by a newer promem_fast is refused. On
PostgreSQL, ``--hnsw-m`` and ``--hnsw-ef-construction`` build the vector index again with other pgvector build
parameters, beside the old index, which serves until the new one replaces it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from promem_fast.cli.store_io import db_arg, key_arg


def register(sub: Any) -> None:
    p = sub.add_parser("migrate", help="bring a store's schema (SQLite file or PostgreSQL) up to this version")
    db_arg(p)
    key_arg(p)
    p.add_argument("--hnsw-m", type=int, metavar="M",
                   help="PostgreSQL: build the vector index again with this pgvector m (links per vector; 16 "
                        "unless set before); needs --hnsw-ef-construction too")
    p.add_argument("--hnsw-ef-construction", type=int, metavar="N",
                   help="PostgreSQL: ... and this ef_construction (128 unless set before); a larger one finds "
                        "more of the exact top k in a large user, for a slower build and slower inserts")
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from promem_fast.errors import ConfigError
    from promem_fast.persistence.api import shown
    from promem_fast.persistence.opening import check_index_build, migrate, rebuild_index

    if (args.hnsw_m is None) != (args.hnsw_ef_construction is None):
        raise ConfigError("--hnsw-m and --hnsw-ef-construction go together (the index is built once with both)")
    if args.hnsw_m is not None:  # before anything is changed
        check_index_build(args.db, args.hnsw_m, args.hnsw_ef_construction)
    before, after = migrate(args.db, key_file=args.key_file)
    if before == after:
        print(f"{shown(args.db)}: schema version {after}, up to date")
    else:
        print(f"{shown(args.db)}: schema version {before} -> {after}")
    if args.hnsw_m is not None:
        started = time.perf_counter()
        built = rebuild_index(args.db, args.hnsw_m, args.hnsw_ef_construction)
        what = (f"vector index built again in {time.perf_counter() - started:.1f} s" if built else
                "no vectors indexed yet: the index will be built")
        print(f"{shown(args.db)}: {what} with m = {args.hnsw_m}, ef_construction = {args.hnsw_ef_construction}")
    return 0
