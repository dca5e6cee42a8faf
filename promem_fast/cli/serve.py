"""``promem serve``, ``promem keys``, ``promem mcp`` and ``promem view``: the memory service and its tools."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.cli.store_io import db_arg, key_arg
from promem_fast.persistence.api import shown
from promem_fast.serve.engine_process import ENGINE_PRIORITY, EnginePriority, parse_priority
from promem_fast.serve.jobs import DEFAULT_RETENTION_S
from promem_fast.serve.mcp_tools import TOOLS

MCP_TOOLS = ", ".join(TOOLS)


def engine_priority(text: str) -> EnginePriority:
    try:
        return parse_priority(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lease_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job-lease", type=float, default=None, metavar="SECONDS",
                        help="on PostgreSQL: how long a claimed session stays this process's without a heartbeat; "
                             "a killed process's sessions go to another after it (default: 30)")


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the memory service (HTTP API, web page) over a store")
    db_arg(p, "the store (created if missing)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--rate", type=float, default=20.0, help="requests per second per API key (0: no limit)")
    p.add_argument("--burst", type=int, default=40, help="requests a key may send at once before --rate applies")
    p.add_argument("--max-body", type=int, default=8 * 1024 * 1024, help="largest request body in bytes")
    p.add_argument("--job-retention", type=float, default=DEFAULT_RETENTION_S, metavar="SECONDS",
                   help="keep a finished job's record (user, session ids, errors) this long (default: 7 days)")
    p.add_argument("--engine-priority", type=engine_priority, default=ENGINE_PRIORITY, metavar="N|idle",
                   help="how the engine process gives way to requests on busy cores: N lowers its CPU priority by "
                        "N (nice 0-19; 0: the server's own), 'idle' runs it only on cores nothing else wants "
                        "(Linux SCHED_IDLE: a request preempts it at once, but extraction all but stops while other "
                        f"programs keep the cores busy). Default {ENGINE_PRIORITY}: accepted work keeps its share "
                        "of a machine shared with other programs; a lower priority can starve it there")
    lease_arg(p)
    key_arg(p)
    judge_arg(p)
    config_args(p)
    p.set_defaults(func=cmd_serve)

    w = sub.add_parser("worker", help="an engine worker without the API: claims and stores the sessions that the "
                                      "API replicas of a shared PostgreSQL store accept")
    db_arg(w, "the store (a postgresql:// URL that the API replicas share)")
    lease_arg(w)
    key_arg(w)
    judge_arg(w)
    config_args(w)
    w.set_defaults(func=cmd_worker)

    k = sub.add_parser("keys", help="create, list or revoke API keys of the service")
    ks = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = ks.add_parser("create", help="a new key for a tenant (printed once)")
    create.add_argument("--tenant", required=True, help="the tenant every request with this key is scoped to")
    create.add_argument("--name", default="", help="a note: who or what uses the key")
    listing = ks.add_parser("list", help="keys with their tenant (never the secret)")
    revoke = ks.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id")
    for q in (create, listing, revoke):
        db_arg(q, "the store")
        key_arg(q)
    k.set_defaults(func=cmd_keys)

    m = sub.add_parser("mcp", help="Model Context Protocol server (stdio) with the tools " + MCP_TOOLS,
                       description="Model Context Protocol server over stdio for one local agent, with the tools "
                                   + MCP_TOOLS + " on the memory of --tenant in --db.")
    db_arg(m, "the store")
    m.add_argument("--tenant", default="default", help="the tenant the tools read and write")
    key_arg(m)
    judge_arg(m)
    config_args(m)
    m.set_defaults(func=cmd_mcp)

    v = sub.add_parser("view", help="write one session's memory graph as a self-contained HTML page")
    v.add_argument("graphs", type=Path, help="JSONL of graphs (output of promem extract)")
    v.add_argument("--session", required=True, help="the session id to draw")
    v.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    v.set_defaults(func=cmd_view)


def judge_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--update-judge", choices=["llm", "nli", "off"], default="llm",
                        help="how a new memory is found to update an older one (see the memory store)")


def cmd_serve(args: argparse.Namespace) -> int:
    from promem_fast.deps import require
    from promem_fast.serve.app import create_app
    from promem_fast.serve.service import Service

    from promem_fast.serve.guards import redact_logs

    uvicorn = require("uvicorn", "serve")
    config = build_config(args)
    config.progress = False
    port_in_use(args.host, args.port)  # before the models load: a taken port is known at once
    service = Service(args.db, config, update_judge=args.update_judge, key_file=args.key_file,
                      job_lease_s=args.job_lease,
                      job_retention_s=args.job_retention, engine_priority=args.engine_priority)
    started(service)
    app = create_app(service, rate=args.rate, burst=args.burst, max_body=args.max_body)
    url = f"http://{args.host}:{args.port}"
    print(f"promem serve: store {shown(args.db)}, listening on {url}/ (page), {url}/docs (API), {url}/metrics",
          flush=True)
    # info: uvicorn's start-up line and one access line per request (method, path, status; never a key)
    server = uvicorn.Config(app, host=args.host, port=args.port, log_level="debug" if args.verbose >= 2 else "info")
    redact_logs("uvicorn", "uvicorn.error", "uvicorn.access")  # after Config, which sets up uvicorn's logging
    uvicorn.Server(server).run()
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run the engine process alone until SIGTERM or SIGINT; it exits with the process."""
    import signal
    import threading

    from promem_fast.persistence.opening import open_persistence
    from promem_fast.serve.engine_process import EngineProcess

    config = build_config(args)
    config.progress = False
    open_persistence(args.db, key_file=args.key_file).close()  # a wrong URL or schema: one line, here
    worker = EngineProcess(args.db, config, args.update_judge, key_file=args.key_file, job_lease_s=args.job_lease)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker.start()
    announced = False
    try:
        while not stop.wait(0.2):
            if worker.alive and not announced:
                print(f"promem worker: store {shown(args.db)}, engine process {worker.pid} ready", flush=True)
                announced = True
            if worker.exited:
                print("promem: the engine process exited; see its log lines above", file=sys.stderr)
                return 1
    finally:
        worker.stop()
    return 0


def started(service: Any) -> None:
    """Start the service's engine; when its models cannot load, close it and raise the reason (one line,
    with the pip command that fixes it) before anything is served."""
    try:
        service.start()
    except BaseException:
        service.close()
        raise


def port_in_use(host: str, port: int) -> None:
    """UsageError when ``host:port`` cannot be bound (taken by another server, or not ours to take)."""
    import socket

    from promem_fast.errors import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror}); another server may have it: "
                             "stop it or choose another --port") from None


def cmd_keys(args: argparse.Namespace) -> int:
    from promem_fast.serve import db
    from promem_fast.serve.keys import KeyRing

    with closing(db.connect(args.db, key_file=args.key_file)) as conn:
        ring = KeyRing(conn)
        if args.keys_command == "create":
            print(ring.create(args.tenant, args.name))
            return 0
        if args.keys_command == "list":
            from promem_fast.shapes import iso_instant

            for row in ring.list():
                times = {"created": iso_instant(row["created"]), "revoked": iso_instant(row["revoked"])}
                print(json.dumps({**row, **times}))
            return 0
        revoked = ring.revoke(args.key_id)
    if not revoked:
        print(f"promem: no live key {args.key_id!r} in {shown(args.db)}", file=sys.stderr)
        return 2
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from promem_fast.serve.mcp_tools import build_server
    from promem_fast.serve.service import Service

    config = build_config(args)
    config.progress = False
    service = Service(args.db, config, update_judge=args.update_judge, key_file=args.key_file)
    started(service)
    try:
        build_server(service, args.tenant).run("stdio")
    finally:
        service.close()
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from promem_fast.io import read_graphs
    from promem_fast.serve.offline_page import write_page

    for graph in read_graphs(args.graphs):
        if graph.session_id == args.session:
            write_page(graph, args.output)
            print(f"graph of session {args.session}: {args.output}")
            return 0
    print(f"promem: {args.graphs} has no session {args.session!r}", file=sys.stderr)
    return 2
