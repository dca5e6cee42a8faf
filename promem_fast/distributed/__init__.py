"""Bulk extraction on a Ray cluster: same records, resumability and accounting as a single-node run.

``promem_fast.distributed.extract(inputs, out_dir, actors=N)`` (or ``promem extract IN -o OUT_DIR --ray``)
cuts JSONL / Parquet input into shards, runs them on a Ray Data actor pool with one engine per actor and
writes per-shard graphs, rejects and a manifest. Ray is imported only when a run starts (extra ``ray``).
"""

from __future__ import annotations

from promem_fast.distributed.driver import extract
from promem_fast.distributed.totals import DistributedSummary

__all__ = ["DistributedSummary", "extract"]
