"""Accounting of a distributed run: per-shard summaries summed over shards and actors, rates per actor.

Each shard's manifest keeps the :class:`~promem_fast.run_summary.RunSummary` of that shard and the actor that
made it, so the totals of a run that was killed and rerun still count every shard exactly once: the run
summary is rebuilt from the manifests of all shards, not from what this driver process happened to see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from promem_fast.run_summary import RunSummary
from promem_fast.types import RunStats


def summary_to_dict(summary: RunSummary) -> dict[str, Any]:
    return {"sessions": summary.sessions, "rejected": summary.rejected, "nodes": summary.nodes,
            "edges": summary.edges, "details": summary.details, "stats": summary.stats.to_dict(),
            "wall_seconds": summary.wall_seconds, "rounds": summary.rounds,
            "backend_calls": dict(summary.backend_calls), "backend_seconds": dict(summary.backend_seconds),
            "load_seconds": summary.load_seconds, "engine_seconds": summary.engine_seconds}


def _add(into: RunSummary, data: dict[str, Any]) -> None:
    for key in ("sessions", "rejected", "nodes", "edges", "details", "rounds"):
        setattr(into, key, getattr(into, key) + int(data[key]))
    into.wall_seconds += float(data["wall_seconds"])
    into.load_seconds += float(data["load_seconds"])
    into.engine_seconds += float(data.get("engine_seconds", 0.0))  # absent from shards of older versions
    into.stats.merge(RunStats.from_dict(data["stats"]))
    for kind, n in data["backend_calls"].items():
        into.backend_calls[kind] = into.backend_calls.get(kind, 0) + int(n)
    for kind, s in data["backend_seconds"].items():
        into.backend_seconds[kind] = into.backend_seconds.get(kind, 0.0) + float(s)


@dataclass
class ActorTally:
    """What one actor did: shards, sessions, and the seconds it spent on them."""

    shards: int = 0
    sessions: int = 0
    seconds: float = 0.0

    @property
    def per_hour(self) -> float:
        return 3600.0 * self.sessions / self.seconds if self.seconds > 0 else 0.0


@dataclass
class DistributedSummary:
    """The run's totals: ``engine`` sums every shard (its wall is actor-seconds), ``actors`` per actor."""

    engine: RunSummary = field(default_factory=RunSummary)
    actors: dict[str, ActorTally] = field(default_factory=dict)
    shards: int = 0
    skipped: int = 0
    """Shards found complete from an earlier run and not redone."""
    input_rejects: int = 0
    wall_seconds: float = 0.0
    """Wall seconds of this driver's run (shards skipped on resume cost none)."""
    new_sessions: int = 0
    """Sessions extracted by this run (the rest came from shards an earlier run finished)."""
    run_actors: set[str] = field(default_factory=set)
    """The actors of this run (``actors`` also lists those of earlier runs whose shards were kept)."""

    def add(self, report: dict[str, Any], *, new: bool) -> None:
        """Count one shard's report (from its manifest); ``new`` when this run extracted it."""
        self.shards += 1
        self.skipped += not new
        self.input_rejects += int(report["input_rejects"])
        _add(self.engine, report["summary"])
        sessions = int(report["summary"]["sessions"])
        self.new_sessions += sessions if new else 0
        worker = report["worker"]
        name = f"{worker['actor'][:8]} pid {worker['pid']}"
        if new:
            self.run_actors.add(name)
        tally = self.actors.setdefault(name, ActorTally())
        tally.shards += 1
        tally.sessions += sessions
        tally.seconds += float(report["seconds"])

    def table(self) -> str:
        """The single-node table over all shards, then the rates per actor and overall."""
        rate = self.new_sessions / self.wall_seconds if self.wall_seconds > 0 else 0.0
        lines = [f"shards {self.shards} ({self.skipped} done by an earlier run)  input rejects {self.input_rejects}",
                 "per-stage totals over all actors (wall below = actor-seconds):", self.engine.table(),
                 f"{'actor':<24}{'shards':>8}{'sessions':>10}{'seconds':>10}{'sessions/hour':>15}"]
        for name, tally in sorted(self.actors.items()):
            lines.append(f"{name:<24}{tally.shards:>8}{tally.sessions:>10}{tally.seconds:>10.2f}"
                         f"{tally.per_hour:>15,.0f}")
        lines.append(f"overall: {self.new_sessions} sessions in {self.wall_seconds:.2f} s on this run "
                     f"({rate * 3600:,.0f} sessions/hour over {len(self.run_actors)} actors)")
        return "\n".join(lines)
