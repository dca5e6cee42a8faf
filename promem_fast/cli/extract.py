"""``promem extract``: memory graphs for a JSONL file of sessions, resumable."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.cli.store_io import key_arg
from promem_fast.distributed.cli import add_arguments as add_ray_arguments
from promem_fast.persistence.api import location_arg

if TYPE_CHECKING:
    from promem_fast.config import EngineConfig
    from promem_fast.engine import Engine
    from promem_fast.errors import InputError
    from promem_fast.types import Session

log = logging.getLogger("promem_fast")


def register(sub: Any) -> None:
    p = sub.add_parser("extract", help="extract memory graphs from a JSONL file of sessions")
    p.add_argument("input", type=Path, help="JSONL, one session per line (see README: input format)")
    p.add_argument("-o", "--output", type=Path, required=True, help="JSONL of graphs, one per session")
    again = p.add_mutually_exclusive_group()  # both at once would silently resume
    again.add_argument("--resume", action="store_true", help="keep OUTPUT and skip sessions already in it")
    again.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.add_argument("--on-error", choices=["skip", "stop"], help="bad input: skip it (default) or stop")
    p.add_argument("--no-timings", action="store_true", help="leave wall seconds out (byte-identical output)")
    p.add_argument("--fsync", action="store_true", help="fsync after every record")
    p.add_argument("--compress", type=float, metavar="RATE",
                   help="LLMLingua-2 compression keeping RATE of the tokens of the other speaker's messages "
                        "(--set compression.speakers=all: of every message)")
    p.add_argument("--db", type=location_arg, help="also add each graph to this memory store as it is written")
    key_arg(p)
    config_args(p)
    add_ray_arguments(p)
    p.set_defaults(func=cmd_extract)


def cmd_extract(args: argparse.Namespace) -> int:
    from promem_fast.cli.outputs import RunFiles, check_input, count_records
    from promem_fast.errors import BackendUnavailable, SessionFailed, WriteFailed

    config = build_config(args)
    if args.ray is not None:
        from promem_fast.cli.store_io import ingest_into
        from promem_fast.distributed.cli import run

        status = run(args, config)  # with --db, the driver then adds every shard's graphs, as ingest DIR does
        return ingest_into(args, config, args.output) if status == 0 and args.db is not None else status
    source = Path(args.input)
    check_input(source)
    files = RunFiles(Path(args.output))
    files.check(source, resume=args.resume, overwrite=args.overwrite)
    writer, rejects, covered = files.open(source, config, resume=args.resume)
    out = files.out
    stopped: list[InputError] = []
    counts = {"input_rejects": 0, "skipped": 0}
    engine, store = _open_engine(args, config, files, writer, rejects)
    total = count_records(source)
    status = 0
    try:
        sessions = _sessions(source, config, rejects, covered, counts, stopped)
        for graph in engine.extract_stream(sessions, total=max(total - len(writer.kept), 0)):
            writer.write(graph)
            if store is not None:
                store.put(graph)
    except (SessionFailed, BackendUnavailable) as exc:
        what = "a backend is gone" if isinstance(exc, BackendUnavailable) else "a session failed"
        print(f"promem: stopping, {what}: {exc}; {len(writer.done)} sessions are safely written to {out}; "
              f"run again with --resume to continue", file=sys.stderr)
        status = 1
    except WriteFailed as exc:
        print(f"promem: {exc}; {len(writer.done)} sessions are safely written; free the space or choose another "
              f"output and run again (with --resume to continue)", file=sys.stderr)
        status = 2
    finally:
        writer.close()
        rejects.close()
        if store is not None:
            store.close()
        engine.close()
    if status == 2:
        files.discard_if_empty()
    if stopped:
        print(f"promem: stopped at bad input (--on-error stop): {stopped[0]}; the {len(writer.done)} sessions "
              f"before it are written to {out}", file=sys.stderr)
        status = 2
    failed = engine.summary.rejected + counts["input_rejects"]
    if status == 0 and failed and not engine.summary.sessions and not counts["skipped"]:  # none made it, none before
        print(f"promem: every session failed ({failed}); the reasons are in {rejects.path}", file=sys.stderr)
        status = 1
    engine.summary.rejected = failed
    print(engine.summary.table())
    if args.resume:
        print(f"resumed: {counts['skipped']} sessions before the resume point were skipped")
    if engine.summary.rejected:
        print(f"rejects: {rejects.path}")
    print(f"graphs: {out}")
    return status


def _sessions(source: Path, config: EngineConfig, rejects: Any, covered: int, counts: dict[str, int],
              stopped: list[InputError]) -> Iterator[Session]:
    """The input's sessions after the resume point (the first ``covered`` valid ones are counted as
    skipped); bad records become rejects (the first ends the input under ``stop``, kept in ``stopped``, so
    the sessions before it still finish and are written)."""
    from promem_fast.errors import InputError
    from promem_fast.io import read_sessions

    valid = 0
    for item in read_sessions(source, max_turn_chars=config.pipeline.max_turn_chars):
        if isinstance(item, InputError):
            counts["input_rejects"] += 1
            rejects.input_error(item)
            if config.on_error == "stop":
                stopped.append(item)
                return
            log.warning("skipped: %s", item)
            continue
        valid += 1
        if valid <= covered:
            counts["skipped"] += 1
            continue
        yield item


def _open_engine(args: argparse.Namespace, config: EngineConfig, files: Any, writer: Any, rejects: Any
                 ) -> tuple[Engine, Any]:
    """The engine (its session errors going to the rejects) and the store of ``--db`` (or None). When
    either cannot be had, the output files are closed, and removed while empty, so a rerun is not blocked."""
    from promem_fast.cli.store_io import extract_store
    from promem_fast.engine import Engine

    engine: Engine | None = None
    try:
        engine = Engine(config)
        engine.services.preload()  # a missing library or model stops here, with the pip command, not per session
        engine.on_session_error = rejects.session_error
        return engine, extract_store(args, config, files.out, engine)
    except BaseException:
        writer.close()
        rejects.close()
        if engine is not None:
            engine.close()
        files.discard_if_empty()
        raise
