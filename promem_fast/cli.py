"""The ``promem`` command line. Heavy modules are imported inside each command, so ``--help`` is instant."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger("promem_fast")


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML / TOML / JSON config file")
    parser.add_argument("--profile", choices=["cpu", "gpu", "scripted"],
                        help="preset applied before --config and --set (default: cpu)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override one config field, e.g. --set pipeline.tau_comp=0.5 (repeatable)")
    parser.add_argument("--max-in-flight", type=int, help="sessions processed at once")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from promem_fast.config import EngineConfig

    config = EngineConfig.profile(args.profile or "cpu")
    if args.config:
        import dataclasses

        loaded = EngineConfig.load(args.config)
        config = loaded if not args.profile else EngineConfig.from_dict(
            {"profile": args.profile, **_nondefault(dataclasses.asdict(loaded))})
    config = config.with_overrides(args.overrides)
    if getattr(args, "max_in_flight", None):
        config.max_in_flight = args.max_in_flight
    if getattr(args, "no_progress", False):
        config.progress = False
    if getattr(args, "on_error", None):
        config.on_error = args.on_error
    if getattr(args, "no_timings", False):
        config.record_timings = False
    if getattr(args, "fsync", False):
        config.fsync = True
    if getattr(args, "compress", None) is not None:
        config.compression.enabled = True
        config.compression.rate = args.compress
    return config.validate()


def _nondefault(values: dict) -> dict:  # type: ignore[type-arg]
    """The fields of a loaded config that differ from the defaults (so a --profile stays in force)."""
    import dataclasses

    from promem_fast.config import EngineConfig

    defaults = dataclasses.asdict(EngineConfig())
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict) and key != "roles":
            sub = {k: v for k, v in value.items() if defaults[key].get(k) != v}
            if sub:
                out[key] = sub
        elif defaults.get(key) != value:
            out[key] = value
    return out


# ------------------------------------------------------------------------------------------ extract
def cmd_extract(args: argparse.Namespace) -> int:
    from promem_fast.engine import Engine
    from promem_fast.errors import BackendUnavailable, InputError
    from promem_fast.io import GraphWriter, RejectWriter, read_sessions

    config = build_config(args)
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


# ------------------------------------------------------------------------------------------ export
def cmd_export(args: argparse.Namespace) -> int:
    from promem_fast.io import export_graphs

    written = export_graphs(args.input, args.out_dir, args.format)
    print(f"wrote {len(written)} {args.format} files to {args.out_dir}")
    return 0


# ------------------------------------------------------------------------------------------ models
def cmd_models(args: argparse.Namespace) -> int:
    from promem_fast import models

    if args.action == "list":
        rows = models.list_models()
        width = max((len(r["name"]) for r in rows), default=10)
        for r in rows:
            state = "available" if r.get("available") else "missing"
            print(f"{r['name']:<{width}}  {r['kind']:<10} {state:<10} {r.get('path') or r.get('hub_id') or ''}")
        return 0
    if args.action == "fetch":
        print(models.fetch(args.name))
        return 0
    if args.action == "export-nli":
        print(models.export_nli_onnx(args.name, args.dst, fp16=args.fp16))
        return 0
    return 2


def cmd_config(args: argparse.Namespace) -> int:
    import json

    print(json.dumps(build_config(args).to_dict(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="promem", description="Verified graph memory from long dialogues (ProMem), "
                                     "batched across sessions, fully local.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("extract", help="extract memory graphs from a JSONL file of sessions")
    p.add_argument("input", type=Path, help="JSONL, one session per line (see README: input format)")
    p.add_argument("-o", "--output", type=Path, required=True, help="JSONL of graphs, one per session")
    p.add_argument("--resume", action="store_true", help="keep OUTPUT and skip sessions already in it")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.add_argument("--on-error", choices=["skip", "stop"], help="bad input: skip it (default) or stop")
    p.add_argument("--no-timings", action="store_true", help="leave wall seconds out (byte-identical output)")
    p.add_argument("--fsync", action="store_true", help="fsync after every record")
    p.add_argument("--compress", type=float, metavar="RATE", help="LLMLingua-2 compression keeping RATE of tokens")
    _config_args(p)
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("export", help="write each graph of an output file as node-link JSON or GraphML")
    p.add_argument("input", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--format", choices=["node-link", "graphml"], default="node-link")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("models", help="list, fetch or export the models the backends use")
    p.add_argument("action", choices=["list", "fetch", "export-nli"])
    p.add_argument("name", nargs="?", help="registry name (fetch) or model folder / hub id (export-nli)")
    p.add_argument("dst", nargs="?", type=Path, help="export-nli: output folder")
    p.add_argument("--fp16", action="store_true", help="export-nli: also write model_fp16.onnx")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("config", help="print the effective configuration")
    _config_args(p)
    p.set_defaults(func=cmd_config)

    from promem_fast.eval.cli import add_eval_parser

    add_eval_parser(sub)

    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("promem: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the CLI's last line of defence: one clear line, the traceback with -vv
        from promem_fast.errors import PromemError

        if not isinstance(exc, PromemError) or args.verbose >= 2:
            raise
        print(f"promem: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
