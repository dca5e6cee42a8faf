"""``promem ingest`` and ``promem import``: graphs and store exports into a memory store (``--db``).

Also what ``promem extract --db`` and ``promem export --db`` use: opening a store from the command's config,
and adding graphs file lines one by one, a bad line named (file, line, session, field) and skipped.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promem_fast.cli.common import build_config, config_args

if TYPE_CHECKING:
    from promem_fast.errors import InputError
    from promem_fast.types import MemoryGraph

log = logging.getLogger("promem_fast")


def store_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--db", type=Path, required=required, help="the memory store (one SQLite file)")
    parser.add_argument("--tenant", default="default", help="tenant the users belong to (default: default)")
    key_arg(parser)


def key_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key-file", type=Path, default=os.environ.get("PROMEM_KEY_FILE") or None,
                        help="the store is encrypted (SQLCipher, the 'encrypt' extra) with the key in this file, "
                             "64 hex digits or a passphrase, mode 0600 (default: $PROMEM_KEY_FILE)")


def register(sub: Any) -> None:
    p = sub.add_parser("ingest", help="add graphs (promem extract's output file or --ray folder) to a memory store")
    p.add_argument("graphs", type=Path, help="JSONL of graphs, one session per line, or a --ray output folder")
    store_args(p)
    p.add_argument("--update-judge", choices=["llm", "nli", "off"], default="llm",
                   help="how a new entry is found to update an older one (default: llm)")
    config_args(p)
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser("import", help="read a memory store export (promem export --db) into a store")
    p.add_argument("input", type=Path, help="JSONL written by promem export --db")
    p.add_argument("--db", type=Path, required=True, help="the memory store to add to (created if missing)")
    key_arg(p)
    config_args(p)
    p.set_defaults(func=cmd_import)


def open_store(args: argparse.Namespace, config: Any, *, embedder: Any = None) -> Any:
    from promem_fast.store import MemoryStore

    return MemoryStore(args.db, config, embedder=embedder, update_judge=getattr(args, "update_judge", None) or "llm",
                       profile=getattr(args, "profile", None), key_file=args.key_file)


def read_graph_lines(path: Path) -> Iterator[tuple[int, MemoryGraph | InputError]]:
    """``(line number, graph or InputError)`` for each non-empty line of a graphs JSONL."""
    from promem_fast.errors import InputError
    from promem_fast.jsonl import decode_line, printable
    from promem_fast.names import name_problem
    from promem_fast.types import MemoryGraph

    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record = decode_line(line, str(path), number)
            if isinstance(record, InputError):
                yield number, record
                continue
            sid = record.get("session_id") if isinstance(record, dict) else None
            sid = printable(sid) if isinstance(sid, str) else None
            try:
                graph = MemoryGraph.from_dict(record)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                field = exc.args[0] if isinstance(exc, KeyError) else None
                yield number, InputError(f"not a memory graph ({type(exc).__name__}: {printable(str(exc))})",
                                         file=str(path), line=number, session_id=sid, field=field)
                continue
            for field, value in (("session_id", graph.session_id), ("user", graph.user)):
                problem = name_problem(value)
                if problem is not None:
                    yield number, InputError(problem, file=str(path), line=number, session_id=sid, field=field)
                    break
            else:
                yield number, graph


def graph_files(path: Path) -> list[Path]:
    """The graphs files a path stands for: itself, or for a directory (``promem extract --ray`` output) every
    shard's ``NAME.jsonl`` in it, by name, leaving out the ``NAME.rejects.jsonl`` files."""
    from promem_fast.errors import InputError

    if not path.is_dir():
        return [path]
    found = sorted(p for p in path.glob("*.jsonl") if p.is_file() and not p.name.endswith(".rejects.jsonl"))
    if not found:
        raise InputError("directory holds no graphs files (NAME.jsonl)", file=str(path))
    return found


def cmd_ingest(args: argparse.Namespace) -> int:
    return ingest_into(args, build_config(args), args.graphs)


def ingest_into(args: argparse.Namespace, config: Any, source: Path) -> int:
    """Add a graphs file, or every shard of a directory, to ``args.db``; a bad line is named and skipped."""
    from promem_fast.cli.outputs import check_input
    from promem_fast.errors import InputError

    paths = graph_files(Path(source))
    for path in paths:
        check_input(path)
    tenant = getattr(args, "tenant", "default")  # extract --ray --db has no --tenant
    added = bad = 0
    with open_store(args, config) as store:
        for path in paths:
            for number, item in read_graph_lines(path):
                if isinstance(item, InputError):
                    log.warning("skipped: %s", item)
                    bad += 1
                    continue
                try:
                    added += store.add([item], tenant=tenant)
                except InputError as exc:
                    exc.file, exc.line = str(path), number
                    log.warning("skipped: %s", exc)
                    bad += 1
        users = len(store.users(tenant=tenant))
    files = f" from {len(paths)} files" if len(paths) > 1 else ""
    print(f"added {added} sessions{files} to {args.db} (tenant {tenant}, {users} users)"
          + (f"; skipped {bad} bad lines (see the log)" if bad else ""))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from promem_fast.cli.outputs import check_input

    check_input(args.input)
    with open_store(args, build_config(args)) as store:
        added = store.import_(args.input)
    print(f"imported {added} sessions into {args.db}")
    return 0


def cmd_store_export(args: argparse.Namespace) -> int:
    """``promem export --db DB OUT.jsonl``: the whole store (or ``--tenant``) as one JSONL. The export of an
    encrypted store is plain text: written only when asked for by ``--plaintext``, and said so."""
    from promem_fast.errors import UsageError
    from promem_fast.store import MemoryStore

    if args.key_file is not None and not args.plaintext:
        raise UsageError(f"{args.db} is encrypted and its export would be plain text; add --plaintext to write "
                         f"it to {args.input} anyway")
    with MemoryStore(args.db, read_only=True, key_file=args.key_file) as store:
        written = store.export(args.input, tenant=args.tenant)
    plain = " (plain text, not encrypted)" if args.key_file is not None else ""
    print(f"exported {written} sessions to {args.input}{plain}")
    return 0


class StoreSink:
    """What ``promem extract --db`` feeds: graphs are added a window at a time, so the update judge's requests
    of many sessions share batches. A graph not yet added when the run stops is safe in the output file,
    from which ``--resume`` adds it."""

    def __init__(self, store: Any, engine: Any, size: int) -> None:
        self.store, self.engine, self.size = store, engine, max(size, 1)
        self.pending: list[MemoryGraph] = []

    def put(self, graph: MemoryGraph) -> None:
        self.pending.append(graph)
        if len(self.pending) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.store.add(self.pending, engine=self.engine)
            self.pending = []

    def close(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # the run is ending anyway (maybe because a backend is gone)
            log.warning("%d graphs were not added to the store (%s); they are in the output file and "
                        "promem extract --resume --db adds them", len(self.pending), exc)
        finally:
            self.store.close()


def extract_store(args: argparse.Namespace, config: Any, out: Path, engine: Any) -> StoreSink | None:
    """The store ``promem extract --db`` feeds (None without ``--db``). Resuming, graphs already in the output
    file that the store lacks (a run stopped before they were added) are added first."""
    from promem_fast.errors import InputError

    if getattr(args, "db", None) is None:
        return None
    store = open_store(args, config, embedder=engine.services.embedder)
    if args.resume and out.exists():
        try:
            store.add((g for _, g in read_graph_lines(out) if not isinstance(g, InputError)), engine=engine)
        except BaseException:  # no sink is returned to close it
            store.close()
            raise
    return StoreSink(store, engine, engine.window())
