"""What the benchmarks share: workloads, measurement helpers and paths."""
