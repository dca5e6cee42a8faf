"""The Ray actor: one :class:`~promem_fast.engine.Engine` for the actor's life, whole shards through it.

ProMem's session programs take many rounds (draft, completeness probes, verification, relations), each
round a batch across the sessions in flight, so a shard's sessions must stay in one engine from their first
request to their last. The actor therefore holds the whole engine (and its models: one vLLM per GPU on the
gpu profile) and runs a shard per call; it returns the shard's records as text and the driver writes them,
so a worker killed mid-shard leaves nothing behind and Ray's retry on the restarted actor redoes the shard.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from promem_fast.config import EngineConfig
from promem_fast.distributed.shards import Shard, read_shard, session_ids
from promem_fast.distributed.totals import summary_to_dict
from promem_fast.errors import InputError, PromemError
from promem_fast.io import input_reject, session_reject
from promem_fast.types import Session

COLUMNS: tuple[str, ...] = ("name", "graphs", "rejects", "report", "error")
"""What the actor returns per shard: its records, its rejects, its accounting, and a fatal error or ''."""


class ShardWorker:
    """Callable class for ``Dataset.map_batches``: each row of a batch is one shard (see :class:`Shard`)."""

    def __init__(self, config: EngineConfig) -> None:
        import ray

        from promem_fast.engine import Engine

        config.progress = False
        self.config = config
        self.engine = Engine(config)
        context = ray.get_runtime_context()
        self.identity = {"actor": context.get_actor_id(), "node": context.get_node_id(), "pid": os.getpid()}
        self._load_reported = 0.0

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, list[str]] = {key: [] for key in COLUMNS}
        for i in range(len(batch["name"])):
            shard = Shard.from_row({key: batch[key][i] for key in batch})
            for key, value in zip(COLUMNS, self.run(shard, frozenset(json.loads(batch["taken"][i])))):
                out[key].append(value)
        return {key: np.array(values, dtype=object) for key, values in out.items()}

    def run(self, shard: Shard, taken: frozenset[str]) -> tuple[str, str, str, str, str]:
        """One shard through the engine: (name, graphs JSONL, rejects JSONL, report JSON, error JSON or '');
        ``taken`` are the ids an earlier shard holds (rejected here as duplicates)."""
        from promem_fast.run_summary import RunSummary

        engine = self.engine
        engine.summary = RunSummary()
        rejects: list[dict[str, Any]] = []
        stop = self.config.on_error == "stop"

        def sessions() -> Iterator[Session]:
            for item in read_shard(shard, max_turn_chars=self.config.pipeline.max_turn_chars, taken=taken):
                if isinstance(item, InputError):
                    if stop:
                        raise item
                    rejects.append(input_reject(item))
                    continue
                yield item

        def crashed(session: Session, error: BaseException) -> None:
            rejects.append(session_reject(session, error))

        engine.on_session_error = crashed
        started = time.perf_counter()
        lines: list[str] = []
        try:
            for graph in engine.extract_stream(sessions()):
                lines.append(graph.to_json(timings=self.config.record_timings))
        except InputError as exc:
            return shard.name, "", "", "", json.dumps({"input": exc.to_dict()})
        except PromemError as exc:
            return shard.name, "", "", "", json.dumps({"message": f"{type(exc).__name__}: {exc}"})
        summary = engine.summary
        summary.load_seconds -= self._load_reported  # models load once per actor: count them on its first shard
        self._load_reported += summary.load_seconds
        report = {"worker": self.identity, "seconds": time.perf_counter() - started,
                  "input_rejects": sum(1 for r in rejects if r["kind"] == "input"),
                  "summary": summary_to_dict(summary)}
        return (shard.name, "".join(line + "\n" for line in lines),
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rejects), json.dumps(report), "")


def shard_session_ids(batch: dict[str, np.ndarray], max_turn_chars: int) -> dict[str, np.ndarray]:
    """``map_batches`` task of the pass that finds ids repeated across shards: each shard's valid ids."""
    names, ids = [], []
    for i in range(len(batch["name"])):
        shard = Shard.from_row({key: batch[key][i] for key in batch})
        names.append(shard.name)
        ids.append(json.dumps(session_ids(shard, max_turn_chars=max_turn_chars)))
    return {"name": np.array(names, dtype=object), "ids": np.array(ids, dtype=object)}
