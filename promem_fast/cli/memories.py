"""``promem list``, ``promem history`` and ``promem delete``: the rest of the memory verbs on the command line,
with the arguments and (with ``--json``) the result shapes of the HTTP API, the client and MCP."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.cli.search import unknown_user, user_arg
from promem_fast.cli.store_io import store_args


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="every current memory of a user, oldest first")
    store_args(p)
    user_arg(p)
    p.add_argument("--history", action="store_true", help="also the memories newer ones replaced")
    p.add_argument("--json", action="store_true", help="one JSON object per memory (the HTTP API's shape)")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("history", help="what a memory replaced and what replaced it")
    p.add_argument("memory_id", type=int)
    store_args(p)
    p.set_defaults(func=cmd_history)
    p = sub.add_parser("delete", help="delete one memory, one session's memory, or all memory of a user")
    store_args(p)
    user_arg(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--memory-id", type=int, help="the memory to delete")
    which.add_argument("--session-id", help="the session whose memory to delete")
    config_args(p)  # a store that judges updates judges again what the deleted memory had replaced
    p.set_defaults(func=cmd_delete)


def _open(args: argparse.Namespace, *, write: bool = False) -> Any:
    from promem_fast.store import MemoryStore

    return MemoryStore(args.db, build_config(args) if write else None, read_only=not write, key_file=args.key_file)


def cmd_list(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if unknown_user(store, args):
            return 1
        hits = store.hits(args.user, tenant=args.tenant, history=args.history)
    for hit in hits:
        item = hit.memory()
        if args.json:
            print(json.dumps(item, ensure_ascii=False))
        else:
            old = f"  (replaced by #{item['superseded_by']})" if item["superseded_by"] is not None else ""
            print(f"#{item['id']}  [{item['valid_from'] or 'undated'}] {item['memory']}{old}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with _open(args) as store:
        graph = store.history_graph(args.memory_id, tenant=args.tenant)
    if not graph["nodes"]:
        print(f"promem: no memory #{args.memory_id} in {args.db} (tenant {args.tenant})", file=sys.stderr)
        return 1
    print(json.dumps(graph, ensure_ascii=False))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _open(args, write=True) as store:
        if unknown_user(store, args):
            return 1
        deleted = store.delete(tenant=args.tenant, user=args.user, session=args.session_id, node=args.memory_id)
    if not deleted and (args.memory_id is not None or args.session_id is not None):
        what = f"memory #{args.memory_id}" if args.memory_id is not None else f"session {args.session_id!r}"
        print(f"promem: {args.user!r} has no {what} in {args.db}", file=sys.stderr)
        return 1
    print(json.dumps({"deleted": deleted}))
    return 0
