"""The GPU throughput harness and its cost model (``benchmarks/gpu_run.sh``)."""
