"""Build the tiny random RoBERTa NLI classifier that tests and smoke runs use instead of a real model.

    python models/build_tiny_nli.py models/tiny-nli [--onnx models/tiny-nli-onnx]

A thin command line over :func:`promem_fast.testing.tiny_nli.build_tiny_nli` (and, with ``--onnx``,
:func:`promem_fast.models.export_nli_onnx`). Its predictions are meaningless; its shapes are real.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

try:
    from promem_fast.models import export_nli_onnx
    from promem_fast.testing.tiny_nli import build_tiny_nli
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from promem_fast.models import export_nli_onnx
    from promem_fast.testing.tiny_nli import build_tiny_nli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dst", type=Path, help="output folder of the Hugging Face model")
    parser.add_argument("--onnx", type=Path, default=None, help="also export it to ONNX into this folder")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    folder = build_tiny_nli(args.dst, seed=args.seed)
    if args.onnx is not None:
        export_nli_onnx(folder, args.onnx, fp16=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
