"""Benchmarks of promem_fast, run from the repository root as modules (``python -m benchmarks.<folder>.<name>``)
or through ``make bench``; the folders are described in ``benchmarks/README.md``."""
