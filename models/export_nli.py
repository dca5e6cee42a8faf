"""Export a Hugging Face NLI classifier to ONNX for the ``onnx`` NLI backend.

    python models/export_nli.py FacebookAI/roberta-large-mnli models/roberta-large-mnli-onnx --fp16

A thin command line over :func:`promem_fast.models.export_nli_onnx`; it checks the export against torch and
exits non-zero when the logits disagree.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

try:
    from promem_fast.models import export_nli_onnx
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from promem_fast.models import export_nli_onnx

log = logging.getLogger("export_nli")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="local model folder or hub id of a sequence-classification NLI model")
    parser.add_argument("dst", type=Path, help="output folder (model.onnx, tokenizer, config.json)")
    parser.add_argument("--fp16", action="store_true", help="also write model_fp16.onnx")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (>= 17)")
    parser.add_argument("--atol", type=float, default=1e-4, help="largest logit difference accepted")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    report = export_nli_onnx(args.src, args.dst, fp16=args.fp16, opset=args.opset, atol=args.atol)
    fp16 = "not run here" if report.fp16_max_abs_diff is None else f"{report.fp16_max_abs_diff:.2e}"
    log.info("wrote %s; max |logit diff| fp32 %.2e%s", report.folder, report.max_abs_diff,
             f", fp16 {fp16}" if report.fp16_model else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
