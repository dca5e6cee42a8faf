"""``promem list``, ``get``, ``update``, ``history``, ``delete`` and ``reset``: the rest of the memory verbs on the
command line, with the arguments and (with ``--json``) the result shapes of the HTTP API, the client and MCP."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.cli.search import expired_arg, filter_arg, metadata_condition, unknown_user, user_arg
from promem_fast.cli.store_io import store_args
from promem_fast.persistence.api import shown


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="every current memory of a user, oldest first")
    store_args(p)
    user_arg(p)
    p.add_argument("--history", action="store_true", help="also the memories newer ones replaced")
    p.add_argument("--json", action="store_true", help="one JSON object per memory (the HTTP API's shape)")
    filter_arg(p)
    expired_arg(p)
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("get", help="one memory by id, as JSON")
    p.add_argument("memory_id", type=int)
    store_args(p)
    p.set_defaults(func=cmd_get)
    p = sub.add_parser("update", help="edit a memory: new text (same id and history, re-embedded), metadata of its "
                       "own, an expiration date")
    p.add_argument("memory_id", type=int)
    p.add_argument("text", nargs="?", help="the new text (left out: the text stays)")
    p.add_argument("--metadata", action="append", type=metadata_condition, metavar="KEY=VALUE",
                   help="set KEY in this memory's metadata alone (VALUE: JSON, else text); repeat for several")
    expiry = p.add_mutually_exclusive_group()
    expiry.add_argument("--expiration-date", metavar="DAY", help="the last day this memory holds (YYYY-MM-DD)")
    expiry.add_argument("--no-expiration-date", action="store_true", help="remove its expiration date")
    store_args(p)
    config_args(p)
    p.set_defaults(func=cmd_update)
    p = sub.add_parser("history", help="what a memory replaced and what replaced it")
    p.add_argument("memory_id", type=int)
    store_args(p)
    p.set_defaults(func=cmd_history)
    p = sub.add_parser("delete", help="delete one memory, one session's memory, the memory of the sessions "
                       "whose metadata meets --filter, or all memory of a user")
    store_args(p)
    user_arg(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--memory-id", type=int, help="the memory to delete")
    which.add_argument("--session-id", help="the session whose memory to delete")
    filter_arg(which, "delete the memory of the user's sessions whose metadata has KEY=VALUE (repeat: all must "
                      "hold), e.g. --filter agent_id=support-bot")
    config_args(p)  # a store that judges updates judges again what the deleted memory had replaced
    p.set_defaults(func=cmd_delete)
    p = sub.add_parser("reset", help="delete all memory of every user of the tenant")
    store_args(p)
    p.add_argument("--yes", action="store_true", required=True, help="confirm: this cannot be undone")
    p.set_defaults(func=cmd_reset)


def _open(args: argparse.Namespace, *, write: bool = False) -> Any:
    from promem_fast.store import MemoryStore

    return MemoryStore(args.db, build_config(args) if write and hasattr(args, "overrides") else None,
                       read_only=not write, key_file=args.key_file)


def cmd_list(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if unknown_user(store, args):
            return 1
        hits = store.hits(args.user, tenant=args.tenant, history=args.history, filters=dict(args.filters or []),
                          show_expired=args.show_expired)
    for hit in hits:
        item = hit.memory()
        if args.json:
            print(json.dumps(item, ensure_ascii=False))
        else:
            old = f"  (replaced by #{item['superseded_by']})" if item["superseded_by"] is not None else ""
            print(f"#{item['id']}  [{item['valid_from'] or 'undated'}] {item['memory']}{old}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from promem_fast.store.editing import one

    with _open(args) as store:
        return _print_memory(args, one(store, args.memory_id, args.tenant))


def cmd_update(args: argparse.Namespace) -> int:
    from promem_fast.shapes import KEEP, metadata_changes
    from promem_fast.store.editing import edit

    expiry = args.expiration_date if args.expiration_date is not None or args.no_expiration_date else KEEP
    changes = metadata_changes(dict(args.metadata or []), expiry)
    with _open(args, write=True) as store:
        return _print_memory(args, edit(store, args.memory_id, args.tenant, text=args.text, metadata=changes))


def _print_memory(args: argparse.Namespace, hit: Any) -> int:
    if hit is None:
        return _no_memory(args)
    print(json.dumps(hit.memory(), ensure_ascii=False))
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    from promem_fast.store.editing import reset

    with _open(args, write=True) as store:
        print(json.dumps({"deleted": reset(store, args.tenant)}))
    return 0


def _no_memory(args: argparse.Namespace) -> int:
    print(f"promem: no memory #{args.memory_id} in {shown(args.db)} (tenant {args.tenant})", file=sys.stderr)
    return 1


def cmd_history(args: argparse.Namespace) -> int:
    with _open(args) as store:
        graph = store.history_graph(args.memory_id, tenant=args.tenant)
    if not graph["nodes"]:
        return _no_memory(args)
    print(json.dumps(graph, ensure_ascii=False))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _open(args, write=True) as store:
        if unknown_user(store, args):
            return 1
        had_session = args.session_id in store.sessions(args.user, tenant=args.tenant)  # maybe without memories
        deleted = store.delete(tenant=args.tenant, user=args.user, session=args.session_id, node=args.memory_id,
                               filters=dict(args.filters or []))
    if not deleted and (args.memory_id is not None or args.session_id is not None and not had_session):
        what = f"memory #{args.memory_id}" if args.memory_id is not None else f"session {args.session_id!r}"
        print(f"promem: {args.user!r} has no {what} in {shown(args.db)}", file=sys.stderr)
        return 1
    print(json.dumps({"deleted": deleted}))
    return 0
