"""The totals of a run: what ``promem extract`` prints at the end, and what distributed runs add up."""

from __future__ import annotations

from dataclasses import dataclass, field

from promem_fast.types import MemoryGraph, RunStats, StageStats

NOT_COUNTED = "not counted"
"""The uncached column of a stage whose backend gave the engine no token ids to count prefix reuse on."""


def _uncached(st: StageStats) -> str:
    return NOT_COUNTED if st.calls and not st.prefill_counted else str(st.uncached_prefill_tokens)


@dataclass
class RunSummary:
    """Totals of a run (what ``promem extract`` prints at the end)."""

    sessions: int = 0
    rejected: int = 0
    nodes: int = 0
    edges: int = 0
    details: int = 0
    stats: RunStats = field(default_factory=RunStats)
    wall_seconds: float = 0.0
    rounds: int = 0
    backend_calls: dict[str, int] = field(default_factory=dict)
    """Backend invocations per request kind (generate, entail, embed, match, anchor, clean_edges)."""
    backend_seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds inside model backends per request kind."""
    load_seconds: float = 0.0
    """Wall seconds spent loading models (before the run too, as a store opening the embedder)."""
    engine_seconds: float = 0.0
    """Seconds of the runs' wall spent neither in a backend call nor loading a model: the engine's own."""

    def add(self, graph: MemoryGraph) -> None:
        self.sessions += 1
        self.nodes += len(graph.nodes)
        self.edges += len(graph.edges)
        self.details += len(graph.details)
        self.stats.merge(graph.stats)

    def table(self) -> str:
        """A plain-text summary: per-stage calls, tokens and seconds, and sessions per second."""
        lines = [
            f"sessions {self.sessions}  rejected {self.rejected}  nodes {self.nodes}  edges {self.edges}  "
            f"details {self.details}",
            f"{'stage':<8}{'calls':>8}{'prompt tok':>12}{'uncached':>13}{'compl tok':>11}{'nli':>7}{'embeds':>8}"
            f"{'seconds':>10}",
        ]
        rows = [*((name, self.stats.stages[name]) for name in self.stats.to_dict()["stages"]),
                ("total", self.stats.total())]
        lines += [f"{name:<8}{st.calls:>8}{st.prompt_tokens:>12}{_uncached(st):>13}"
                  f"{st.completion_tokens:>11}{st.nli_pairs:>7}{st.embedded_texts:>8}{st.seconds:>10.2f}"
                  for name, st in rows]
        rate = self.sessions / self.wall_seconds if self.wall_seconds > 0 else 0.0
        engine = self.engine_seconds
        lines.append(f"wall {self.wall_seconds:.2f} s (models loaded in {self.load_seconds:.1f} s)  ({rate:.3g} sessions/s, {rate * 3600:,.0f} sessions/hour, "
                     f"{self.rounds} rounds, backend calls {sum(self.backend_calls.values())}, "
                     f"engine {1e3 * engine / max(self.sessions, 1):.2f} ms/session)")
        copied = self.stats.counts.get("details_from_prompt", 0)
        if copied:
            lines.append(f"details dropped as words of the prompt {copied} (pronouns, speaker names, turn labels, "
                         "instructions)")
        failures = self.stats.counts.get("failed_steps", 0)
        if failures:
            lines.append(f"failed steps {failures} (see each record's stats.failures)")
        return "\n".join(lines)
