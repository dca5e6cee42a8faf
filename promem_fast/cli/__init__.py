"""The ``promem`` command line.

One registry, :data:`COMMANDS`: each name is a module of this package whose ``register(subparsers)`` adds its
subcommands. Those modules import only ``argparse`` at the top; the heavy modules are imported inside each
command, so ``promem --help`` is instant and no library module imports the CLI.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

COMMANDS: tuple[str, ...] = ("demo", "extract", "export", "models", "config", "eval", "store_io", "search",
                            "memories", "serve", "migrate", "calibrate")
"""Modules of :mod:`promem_fast.cli`, in the order their subcommands appear in ``promem --help``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="promem", description="Verified graph memory from long dialogues (ProMem), "
                                     "batched across sessions, fully local.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, so a reader that went away is caught below
        return status
    except KeyboardInterrupt:
        print("promem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (promem config | head): stop quietly, as cat does
        _silence_stdout()
        return 141
    except Exception as exc:  # the CLI's last line of defence: one clear line, the traceback with -vv
        from promem_fast.errors import PromemError

        if not isinstance(exc, PromemError) or args.verbose >= 2:
            raise
        print(f"promem: {exc}", file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered for the closed
    pipe cannot print a second error on the way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
