"""``promem extract``: memory graphs for a JSONL file of sessions, resumable."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.distributed.cli import add_arguments as add_ray_arguments


log = logging.getLogger("promem_fast")


def register(sub: Any) -> None:
    p = sub.add_parser("extract", help="extract memory graphs from a JSONL file of sessions")
    p.add_argument("input", type=Path, help="JSONL, one session per line (see README: input format)")
    p.add_argument("-o", "--output", type=Path, required=True, help="JSONL of graphs, one per session")
    p.add_argument("--resume", action="store_true", help="keep OUTPUT and skip sessions already in it")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.add_argument("--on-error", choices=["skip", "stop"], help="bad input: skip it (default) or stop")
    p.add_argument("--no-timings", action="store_true", help="leave wall seconds out (byte-identical output)")
    p.add_argument("--fsync", action="store_true", help="fsync after every record")
    p.add_argument("--compress", type=float, metavar="RATE", help="LLMLingua-2 compression keeping RATE of tokens")
    config_args(p)
    add_ray_arguments(p)
    p.set_defaults(func=cmd_extract)


def cmd_extract(args: argparse.Namespace) -> int:
    from promem_fast.engine import Engine
    from promem_fast.errors import BackendUnavailable, InputError
    from promem_fast.io import GraphWriter, RejectWriter, read_sessions

    config = build_config(args)
    if args.ray is not None:
        from promem_fast.distributed.cli import run

        return run(args, config)
    out = Path(args.output)
    if out.exists() and not (args.resume or args.overwrite):
        print(f"promem: {out} exists; pass --resume to continue it or --overwrite to replace it", file=sys.stderr)
        return 2
    writer = GraphWriter(out, resume=args.resume, fsync=config.fsync, timings=config.record_timings)
    rejects = RejectWriter(out.with_name(out.name.removesuffix(".jsonl") + ".rejects.jsonl"), resume=args.resume)
    already = len(writer.done)
    skipped = 0

    def sessions():  # type: ignore[no-untyped-def]
        nonlocal skipped
        for item in read_sessions(args.input, max_turn_chars=config.pipeline.max_turn_chars):
            if isinstance(item, InputError):
                if config.on_error == "stop":
                    raise item
                log.warning("skipped: %s", item)
                rejects.input_error(item)
                continue
            if item.session_id in writer.done:
                skipped += 1
                continue
            yield item

    total = sum(1 for line in open(args.input, "rb") if line.strip())
    engine = Engine(config)
    engine.on_session_error = rejects.session_error
    status = 0
    try:
        for graph in engine.extract_stream(sessions(), total=max(total - already, 0)):
            writer.write(graph)
    except InputError as exc:
        print(f"promem: bad input: {exc}", file=sys.stderr)
        status = 2
    except BackendUnavailable as exc:
        print(f"promem: stopping, a backend is gone: {exc}\n{len(writer.done)} sessions are safely written to "
              f"{out}; run again with --resume to continue", file=sys.stderr)
        status = 1
    finally:
        writer.close()
        rejects.close()
        engine.close()
    print(engine.summary.table())
    if args.resume:
        print(f"resumed: {skipped} sessions already in {out} were skipped")
    if rejects.count:
        print(f"rejected inputs: {rejects.count} (see {rejects.path})")
    print(f"graphs: {out}")
    return status
