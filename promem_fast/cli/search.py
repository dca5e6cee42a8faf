"""``promem search`` and ``promem ask``: a user's memory in a store, searched or asked a question."""

from __future__ import annotations

import argparse
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.cli.store_io import store_args


def register(sub: Any) -> None:
    p = sub.add_parser("search", help="the memory entries of a user closest to a query")
    p.add_argument("query")
    store_args(p)
    p.add_argument("--user", required=True)
    p.add_argument("-k", type=int, default=20, help="entries to return (default 20)")
    p.add_argument("--history", action="store_true", help="include entries that newer ones superseded")
    p.add_argument("--json", action="store_true", help="one JSON object per entry")
    config_args(p)
    p.set_defaults(func=cmd_search)
    p = sub.add_parser("ask", help="answer a question about a user from their memory")
    p.add_argument("question")
    store_args(p)
    p.add_argument("--user", required=True)
    p.add_argument("--json", action="store_true", help="the answer with the memories it was shown, as JSON")
    config_args(p)
    p.set_defaults(func=cmd_ask)


def cmd_search(args: argparse.Namespace) -> int:
    import json

    from promem_fast.store import MemoryStore

    with MemoryStore(args.db, build_config(args), read_only=True, key_file=args.key_file) as store:
        hits = store.search(args.user, args.query, k=args.k, tenant=args.tenant, history=args.history)
    for hit in hits:
        if args.json:
            print(json.dumps(hit.to_dict(), ensure_ascii=False))
        else:
            old = f"  (superseded by {hit.superseded_by})" if hit.superseded_by is not None else ""
            print(f"{hit.score:.3f}  [{hit.date or 'undated'}] {hit.body()}  #{hit.node_id} {hit.session_id}{old}")
    if not hits:
        print(f"no memory for user {args.user!r} (tenant {args.tenant})")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    import json
    import sys

    from promem_fast.engine import Engine
    from promem_fast.store import MemoryStore

    config = build_config(args)
    with (MemoryStore(args.db, config, read_only=True, key_file=args.key_file) as store,
          Engine(config, embedder=store.embedder) as engine):
        (reply,) = store.answer(args.user, [args.question], engine=engine, tenant=args.tenant)
    if args.json:
        print(json.dumps(reply, ensure_ascii=False))
    elif reply["prediction"] is None:
        print(f"promem: no answer: {reply['error']}", file=sys.stderr)
        return 1
    else:
        print(reply["prediction"])
    return 0
