"""The driver: cut the input into shards, skip the finished ones, run the rest on a Ray Data actor pool.

Ray Data schedules the shards (``from_items`` of shard descriptions, one block each) onto a fixed pool of
:class:`~promem_fast.distributed.actor.ShardWorker` actors with ``map_batches``; each actor reads its shard
with the same validating reader as a single-node run (so a bad line becomes a reject naming file and line,
where ``ray.data.read_json`` would fail the whole dataset) and sends back the shard's records. The driver
streams the results and writes each shard's files as it arrives (see :mod:`.shards`).

Fault tolerance is Ray's plus the manifests: Ray restarts a dead actor and retries its shard there
(up to :data:`SHARD_RETRIES` times per shard); a shard's files appear only whole, so a killed driver leaves
finished shards and nothing else, and the same command run again redoes only the unfinished ones.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from promem_fast.config import EngineConfig
from promem_fast.distributed.shards import (
    Shard, count_sessions, cross_shard_duplicates, files, input_files, is_complete, plan, write_shard,
)
from promem_fast.distributed.totals import DistributedSummary, summary_to_dict
from promem_fast.errors import InputError, PromemError
from promem_fast.private import private_dirs, write_private

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
SHARD_SESSIONS = 1000
"""The largest shard cut when ``shard_sessions`` is not given."""
SHARD_RETRIES = 3
"""Times a shard is retried on a restarted actor after its actor died; a shard that kills every actor it
meets (a crash in a native backend on one input) then stops the run instead of retrying forever."""


def extract(inputs: str | Path | Sequence[str | Path], out_dir: str | Path, *, config: EngineConfig | None = None,
            address: str | None = "auto", actors: int = 1, gpus_per_actor: float | None = None,
            cpus_per_actor: float = 1, shard_sessions: int | None = None, parquet: bool = False,
            overwrite: bool = False) -> DistributedSummary:
    """Extract memory graphs for JSONL / Parquet ``inputs`` (files, or directories of shards) on Ray.

    Writes per shard ``NAME.jsonl``, ``NAME.rejects.jsonl``, ``NAME.manifest.json`` (and ``NAME.parquet``
    with ``parquet``) into ``out_dir``, plus ``summary.json``. Shards finished by an earlier run into the
    same ``out_dir`` are skipped unless ``overwrite``. ``address``: ``"auto"`` joins the cluster this machine
    belongs to (``ray start``) or starts a local one; otherwise a Ray address. When Ray is already
    initialised in this process that session is used and left running. ``gpus_per_actor``: ``None`` reserves
    one GPU per actor when the chat model runs on vLLM (one vLLM per GPU) and none otherwise.
    ``shard_sessions``: ``None`` cuts shards of at most :data:`SHARD_SESSIONS`, small enough that every actor
    gets one (the same input and actor count give the same cut, so the same command resumes).
    """
    config = (config or EngineConfig()).validate()
    if actors < 1:
        raise PromemError("--actors must be >= 1")
    paths = [Path(inputs)] if isinstance(inputs, (str, Path)) else [Path(p) for p in inputs]
    out = Path(out_dir)
    shards = _cut(paths, shard_sessions, actors)
    if out.exists() and not out.is_dir():
        raise PromemError(f"{out} exists and is not a directory; --ray writes a directory of shard files")
    private_dirs(out)
    if overwrite:
        _clear(out, shards)
    config_hash = shard_fingerprint(config, parquet=parquet)
    summary = DistributedSummary()
    pending: list[Shard] = []
    for shard in shards:
        if is_complete(out, shard, config_hash):
            summary.add(_manifest(out, shard)["report"], new=False)
        else:
            pending.append(shard)
    if summary.skipped:
        log.warning("resuming: %d of %d shards are already complete in %s", summary.skipped, len(shards), out)
    if gpus_per_actor is None:
        gpus_per_actor = 1 if config.llm.backend == "vllm" else 0
    started = time.perf_counter()
    if pending:
        _run(shards, pending, out, config, config_hash, summary, address=address, actors=actors,
             gpus_per_actor=gpus_per_actor, cpus_per_actor=cpus_per_actor, parquet=parquet)
    summary.wall_seconds = time.perf_counter() - started
    write_private(out / SUMMARY_FILE, json.dumps({
        "shards": summary.shards, "input_rejects": summary.input_rejects, "totals": summary_to_dict(summary.engine),
        "actors": {name: vars(t) for name, t in summary.actors.items()}}, indent=1))
    return summary


def shard_fingerprint(config: EngineConfig, *, parquet: bool) -> str:
    """What a finished shard's manifest must hold to be kept: the config's fingerprint, the one a single-node
    ``--resume`` goes by (:mod:`promem_fast.manifest`), and whether Parquet files were asked for."""
    return config.fingerprint() + ("+parquet" if parquet else "")


def _run(shards: list[Shard], pending: list[Shard], out: Path, config: EngineConfig, config_hash: str,
         summary: DistributedSummary, *, address: str | None, actors: int, gpus_per_actor: float,
         cpus_per_actor: float, parquet: bool) -> None:
    from promem_fast.deps import require

    ray = require("ray", "ray", "ray[data]")
    require("ray.data", "ray", "ray[data]")
    from promem_fast.distributed.actor import ShardWorker, shard_session_ids

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=None if address in (None, "auto") else address, log_to_driver=False)
    try:
        _check_room(ray.cluster_resources(), actors=actors, cpus=cpus_per_actor, gpus=gpus_per_actor)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = context.print_on_execution_start = config.progress
        taken = _taken(ray, shards, shard_session_ids, config.pipeline.max_turn_chars)
        dataset = ray.data.from_items([{**s.to_row(), "taken": json.dumps(taken.get(s.name, []))} for s in pending],
                                      override_num_blocks=len(pending))
        with warnings.catch_warnings():  # Ray 2.60 has no named parameter for the retries yet (hence <2.64)
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
            results = dataset.map_batches(
                ShardWorker, fn_constructor_args=(config,), batch_size=1, batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=cpus_per_actor,
                num_gpus=gpus_per_actor or None, max_restarts=-1, max_task_retries=SHARD_RETRIES)
        by_name = {s.name: s for s in pending}
        for row in _rows(ray, results):
            if row["error"]:
                raise _error(json.loads(row["error"]))
            shard = by_name[row["name"]]
            report = json.loads(row["report"])
            write_shard(out, shard, row["graphs"], row["rejects"], {"config": config_hash, "report": report},
                        parquet=parquet, fsync=config.fsync)
            summary.add(report, new=True)
            log.info("shard %s: %d sessions", shard.name, report["summary"]["sessions"])
    finally:
        if started_here:
            ray.shutdown()


def _cut(paths: list[Path], shard_sessions: int | None, actors: int) -> list[Shard]:
    """The shards of the run; a warning says why, when some of the actors asked for can get no shard."""
    sessions = count_sessions(input_files(paths))
    size = shard_sessions if shard_sessions is not None else max(1, min(SHARD_SESSIONS, -(-sessions // actors)))
    shards = plan(paths, size)
    if len(shards) < actors:
        if sessions <= len(shards):
            why = f"the input holds {sessions} sessions"
        elif shard_sessions is not None:
            why = (f"--shard-sessions {shard_sessions} cuts {sessions} sessions into {len(shards)} shards; leave it "
                   f"out, or pass {-(-sessions // actors)}, to give each actor one")
        else:  # Parquet row groups are never split
            why = f"the {sessions} sessions are in {len(shards)} runs of whole Parquet row groups"
        log.warning("%d actors asked for, %d shards to run: %d actors get no work (%s)", actors, len(shards),
                    actors - len(shards), why)
    return shards


def _taken(ray: Any, shards: list[Shard], ids_of: Callable[..., Any], max_turn_chars: int) -> dict[str, list[str]]:
    """Per shard, the session ids an earlier shard already holds: one parallel pass reads every shard's ids
    (finished ones too, as a pending shard may repeat an id of a finished one), so a duplicated id is
    rejected at its later line exactly as a single-node run over the same input rejects it."""
    if len(shards) < 2:
        return {}
    rows = ray.data.from_items([s.to_row() for s in shards], override_num_blocks=len(shards)).map_batches(
        ids_of, batch_size=1, batch_format="numpy", fn_kwargs={"max_turn_chars": max_turn_chars})
    by_name = {row["name"]: json.loads(row["ids"]) for row in _rows(ray, rows)}
    repeated = cross_shard_duplicates([by_name[s.name] for s in shards])
    return {s.name: found for s, found in zip(shards, repeated) if found}


def _check_room(resources: dict[str, float], *, actors: int, cpus: float, gpus: float) -> None:
    """Refuse a pool the cluster cannot hold: Ray would wait for it forever instead of failing."""
    for name, each in (("CPU", cpus), ("GPU", gpus)):
        have = resources.get(name, 0.0)
        if actors * each > have:
            raise PromemError(f"{actors} actors x {each:g} {name}s each need {actors * each:g} {name}s; the Ray "
                              f"cluster has {have:g} (use fewer --actors, or set --gpus-per-actor)")


def _rows(ray: Any, dataset: Any) -> Iterator[dict[str, Any]]:
    """The dataset's rows as they finish; a failure of Ray itself becomes one clear error."""
    try:
        yield from dataset.iter_rows()
    except (ray.exceptions.RayError, ray.exceptions.RaySystemError) as exc:
        raise PromemError(f"the Ray run failed ({type(exc).__name__}: {str(exc).splitlines()[0]}); finished "
                          "shards are kept, run the same command again to continue") from exc


def _error(data: dict[str, Any]) -> PromemError:
    if "input" in data:
        found = data["input"]
        return InputError(found["error"], file=found["file"], line=found["line"], session_id=found["session_id"],
                          field=found["field"])
    return PromemError(data["message"])


def _manifest(out: Path, shard: Shard) -> dict[str, Any]:
    return json.loads(files(out, shard.name)["manifest"].read_text(encoding="utf-8"))


def _clear(out: Path, shards: list[Shard]) -> None:
    """Remove what earlier runs wrote for these shards and for other cuts of the same inputs (a run with
    another ``--shard-sessions`` made more shards: left behind, they would sit among this run's files and
    be read twice), and nothing else in ``out``: another cut's shard is known by its manifest's input path."""
    names = {shard.name for shard in shards}
    inputs = {shard.path for shard in shards}
    for manifest in out.glob("*.manifest.json"):
        try:
            made_from = json.loads(manifest.read_text(encoding="utf-8"))["shard"]["path"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if made_from in inputs:
            names.add(manifest.name.removesuffix(".manifest.json"))
    for name in names:
        for path in files(out, name).values():
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)
