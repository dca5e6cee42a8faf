"""Where the benchmarks read and write: the repository, the result files, the optional HaluMem sample."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (benchmarks are run from it: ``python -m benchmarks.<folder>.<name>``)."""
RESULTS = ROOT / "benchmarks" / "results"
"""Every result file a README quotes (``benchmarks/results/NAME.json``)."""
HALUMEM = Path(os.environ.get("PROMEM_HALUMEM_SAMPLE")
               or ROOT.parent / "shared" / "data" / "halumem-dev" / "pilot_slice_user0.jsonl")
"""The real HaluMem user beside the repository (its licence forbids shipping it), or the file
``PROMEM_HALUMEM_SAMPLE`` names; a suite that needs it is skipped when it is absent."""
