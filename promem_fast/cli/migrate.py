"""``promem migrate``: bring a store's schema (an SQLite file or a PostgreSQL database) up to this version's.

Opening a store for writing migrates it too; this command does it on its own, for a deployment that
upgrades the schema once before starting its replicas and workers. Every step runs in one transaction, so a
failed migration leaves the store as it was, and a store written by a newer promem_fast is refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from promem_fast.cli.store_io import db_arg, key_arg


def register(sub: Any) -> None:
    p = sub.add_parser("migrate", help="bring a store's schema (SQLite file or PostgreSQL) up to this version")
    db_arg(p)
    key_arg(p)
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from promem_fast.persistence.api import shown
    from promem_fast.persistence.opening import migrate

    before, after = migrate(args.db, key_file=args.key_file)
    if before == after:
        print(f"{shown(args.db)}: schema version {after}, up to date")
    else:
        print(f"{shown(args.db)}: schema version {before} -> {after}")
    return 0
