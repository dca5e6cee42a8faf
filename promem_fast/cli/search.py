"""``promem search`` and ``promem ask``: a user's memory in a store, searched or asked a question."""

from __future__ import annotations

import argparse
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.cli.store_io import store_args
from promem_fast.persistence.api import shown
from promem_fast.shapes import DEFAULT_K


def register(sub: Any) -> None:
    p = sub.add_parser("search", help="the memory entries of a user closest to a query")
    p.add_argument("query")
    store_args(p)
    user_arg(p)
    p.add_argument("-k", "--top-k", "--limit", dest="k", type=int, default=DEFAULT_K,
                   help=f"entries to return (default {DEFAULT_K})")
    p.add_argument("--history", action="store_true", help="include entries that newer ones superseded")
    p.add_argument("--threshold", type=float, metavar="COSINE",
                   help="only entries whose score (cosine with the query) is at least this")
    time_args(p)
    filter_arg(p)
    expired_arg(p)
    p.add_argument("--json", action="store_true", help="one JSON object per entry (the HTTP API's shape)")
    p.add_argument("--explain", action="store_true", help="say how each entry was ranked: its place in the dense, "
                   "lexical and time rankings, the days the query names, the fused score (score_details)")
    config_args(p)
    p.set_defaults(func=cmd_search)
    p = sub.add_parser("ask", help="answer a question about a user from their memory")
    p.add_argument("question")
    store_args(p)
    user_arg(p)
    time_args(p)
    filter_arg(p, "answer from the memories whose session's metadata has KEY equal to VALUE only; repeat for "
                  "several")
    p.add_argument("--json", action="store_true", help="the answer with the memories it was shown, as JSON")
    config_args(p)
    p.set_defaults(func=cmd_ask)


def expired_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--show-expired", action="store_true",
                        help="also memories past their session's expiration_date (its metadata's last day)")


def user_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user-id", "--user", dest="user", required=True, help="the user whose memory is meant")


def filter_arg(parser: Any, help: str = "only memories whose session's metadata has KEY equal to VALUE (a JSON "
                                        "value, else text), or meeting VALUE's operators ('{\"gte\": 3}', "
                                        "'{\"in\": [..]}', contains, ...: mem0's language); repeat for "
                                        "several") -> None:
    parser.add_argument("--filter", dest="filters", action="append", type=metadata_condition, metavar="KEY=VALUE",
                        help=help)


def metadata_condition(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as a filter condition: VALUE read as JSON (``2024``, ``true``) when it is, else as text."""
    import json

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"give KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def time_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--as-of", help="what held at this time: replaced memories count until replaced "
                        "(ISO 8601; a bare day means its end; default now)")
    parser.add_argument("--since", help="only memories said on or after this time (ISO 8601; a bare day from "
                        "its start)")
    parser.add_argument("--until", help="only memories said on or before this time (ISO 8601; a bare day "
                        "through its end)")


def given_time(args: argparse.Namespace) -> dict[str, str]:
    """The time options given, as keywords for the store (those left out are not passed)."""
    return {name: getattr(args, name) for name in ("as_of", "since", "until") if getattr(args, name) is not None}


def unknown_user(store: Any, args: argparse.Namespace) -> bool:
    """Says so on stderr when the store has no such user: searching a misspelt name is an error, not an
    empty result. For a user with sessions still waiting for update judging, says that (their memories are not
    shown until judged) and goes on."""
    import sys

    from promem_fast.persistence.pending import unseen

    if args.user in store.users(tenant=args.tenant):
        waiting = unseen(store.db, store.user_id(args.tenant, args.user))
        if waiting:
            print(f"promem: {waiting} session(s) of {args.user!r} wait for update judging and are not shown yet (a "
                  "run that stopped before judging them, or one judging now: the next add to the store, or promem "
                  "extract run again, judges them)", file=sys.stderr)
        return False
    elsewhere = [t for t in store.tenants() if t != args.tenant and args.user in store.users(tenant=t)]
    hint = f"; {args.user!r} has memory under --tenant {', '.join(elsewhere)}" if elsewhere else ""
    print(f"promem: no memory for user {args.user!r} in {shown(args.db)} (tenant {args.tenant}){hint}", file=sys.stderr)
    return True


def cmd_search(args: argparse.Namespace) -> int:
    import json

    from promem_fast.store import MemoryStore

    with MemoryStore(args.db, build_config(args), read_only=True, key_file=args.key_file) as store:
        if unknown_user(store, args):
            return 1
        hits = store.search(args.user, args.query, k=args.k, tenant=args.tenant, history=args.history,
                            filters=dict(args.filters or []), threshold=args.threshold,
                            show_expired=args.show_expired, explain=args.explain, **given_time(args))
    for hit in hits:
        if args.json:
            print(json.dumps(hit.memory(), ensure_ascii=False))
        else:
            old = f"  (superseded by {hit.superseded_by})" if hit.superseded_by is not None else ""
            print(f"{hit.score:.3f}  [{hit.date or 'undated'}] {hit.body()}  #{hit.node_id} {hit.session_id}{old}")
            if hit.score_details is not None:
                print("       " + ", ".join(f"{k} {v}" for k, v in hit.score_details.items() if v is not None))
    if not hits:
        print(f"no memory of {args.user!r} matches (tenant {args.tenant})")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    import json
    import sys

    from promem_fast.engine import Engine
    from promem_fast.store import MemoryStore

    from promem_fast import shapes

    config = build_config(args)
    with MemoryStore(args.db, config, read_only=True, key_file=args.key_file) as store:
        if unknown_user(store, args):
            return 1
        with Engine(config, embedder=store.embedder) as engine:
            (row,) = store.answer(args.user, [args.question], engine=engine, tenant=args.tenant,
                                  filters=dict(args.filters or []), **given_time(args))
    reply = shapes.answer(row)
    if args.json:
        print(json.dumps(reply, ensure_ascii=False))
    elif reply["abstained"] is not None:  # a reply, not a failure: memory holds nothing on the question
        print(f"(no answer) {reply['abstained']}")
    elif reply["answer"] is None:
        print(f"promem: no answer: {reply['error']}", file=sys.stderr)
        return 1
    else:
        print(reply["answer"])
    return 0
