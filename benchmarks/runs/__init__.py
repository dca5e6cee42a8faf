"""Standalone measurement runs, each writing one result file in ``benchmarks/results/``."""
