"""Records: what goes in (sessions of turns) and what comes out (the verified memory graph G = (V, E, A)).

Plain dataclasses with ``to_dict`` / ``from_dict`` so the JSONL formats stay explicit and versionable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Literal

SCHEMA_VERSION = 1

Message = Mapping[str, str]
"""A chat message: ``{"role": "system" | "user" | "assistant", "content": str}`` (what a prompt renders to
and every chat backend takes)."""

Origin = Literal["draft", "recovered", "revised"]
"""How an entry came to be: in the initial draft, recovered from a missed event (CC), or rewritten by the
adjudicator (HV)."""

Verification = Literal["entailed", "atomic", "revised", "unverified"]
"""What HV concluded: the whole entry entailed; an entailed atomic fact of a split entry; a fact revised
by the adjudicator; or not checked (HV switched off, one-off mode)."""

STAGES: tuple[str, ...] = ("compress", "draft", "cc", "hv", "da", "rel", "qa", "judge")
"""Accounting stages: the paper's Table 6 columns (Draft, CC, HV, DA, REL), LLMLingua-2 compression before
them, and evaluation's QA and judge."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One message. Messages that share ``turn_id`` form one dialogue turn (a user message and its reply)."""

    turn_id: int | str
    role: str
    """``user`` / ``assistant`` for assistant dialogues; the speaker's name for peer dialogues."""
    text: str
    timestamp: str | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """One dialogue session whose memory is extracted for ``user`` (the memory owner)."""

    session_id: str
    user: str
    turns: tuple[Turn, ...]
    timestamp: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    owner_role: str = "user"
    """Which ``Turn.role`` is the memory owner's (``user``, or a speaker's name in peer dialogues)."""
    infer: bool = True
    """False: each message is kept as written, no model called (:mod:`promem_fast.verbatim`)."""

    def turn_groups(self) -> list[tuple[int | str, tuple[Turn, ...]]]:
        """Messages grouped by turn id, in order of first appearance."""
        groups: dict[int | str, list[Turn]] = {}
        for turn in self.turns:
            groups.setdefault(turn.turn_id, []).append(turn)
        return [(tid, tuple(msgs)) for tid, msgs in groups.items()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "user": self.user,
            "timestamp": self.timestamp,
            "owner_role": self.owner_role,
            "turns": [asdict(t) for t in self.turns],
            "metadata": self.metadata,
            **({} if self.infer else {"infer": False}),  # records of extracted sessions stay as they were
        }


@dataclass(slots=True)
class Detail:
    """A fine-grained fragment (entity, time, place, object) of one turn."""

    text: str
    turn_id: int | str


@dataclass(slots=True)
class Event:
    """A macro event abstracted from one topic segment."""

    text: str
    segment: int
    turn_ids: list[int | str]


@dataclass(slots=True)
class MemoryEntry:
    """A node of the graph: one purified memory statement."""

    id: int
    text: str
    origin: Origin
    verification: Verification
    turn_ids: list[int | str]
    """The turn(s) it is grounded in; the first is the grounding turn used for NLI and anchoring."""
    grounding_score: float | None = None
    parent: int | None = None
    """Index of the pre-verification entry it was split from (atomic facts and revisions)."""
    details: list[int] = field(default_factory=list)
    """Indices into ``MemoryGraph.details`` anchored to this entry (DA)."""
    date: str | None = None
    """The day the entry was said on (ISO ``YYYY-MM-DD`` when the timestamp could be read): its grounding
    turn's date, else the session's. QA and the store use it to place the entry in time."""
    source: str | None = None
    """What the owner said in the entry's turn(s), as given: the words a reader checks the memory against.
    Stored and exported with the entry and deleted with it; ``None`` for an entry grounded in no turn."""
    exchange: str | None = None
    """What the other speaker said around it: in its turn(s), and in a turn just before or after that holds
    only the other speaker's words (a dataset of one message per turn puts the question the owner answered
    there). A question often asks in those words ("How was the pottery class?" for "Caroline made a bowl"), so
    the lexical ranking reads them (``ranking.exchange``); stored, exported and deleted with the entry."""


@dataclass(slots=True)
class Edge:
    """A verified relation between two entries."""

    source: int
    target: int
    relation: str
    probe: str | None = None
    """The probe question that showed the relation is not implicit in the flat entries (None when the probe
    failed and the link was checked against the dialogue without one)."""


@dataclass(slots=True)
class StageStats:
    calls: int = 0
    """LLM generate requests (retries included)."""
    prompt_tokens: int = 0
    uncached_prefill_tokens: int = 0
    """Prompt tokens a prefix cache of ``llm.prefix_cache_tokens`` would not serve (vLLM-style block
    hashing over the session's own prompts, :mod:`promem_fast.prefix_cache`); every prompt token on a
    backend that does not hand the engine its token ids (openai, scripted)."""
    prefill_counted: int = 0
    """Replies whose uncached prefill was counted from their prompt's token ids (0 with ``calls`` above 0:
    the backend gave no ids, so ``uncached_prefill_tokens`` is only the prompt tokens, not a count)."""
    completion_tokens: int = 0
    cut_replies: int = 0
    """Replies that ran out of their token budget (finish reason "length"), continued or asked again."""
    nli_pairs: int = 0
    embedded_texts: int = 0
    seconds: float = 0.0

    def add(self, other: StageStats) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.uncached_prefill_tokens += other.uncached_prefill_tokens
        self.prefill_counted += other.prefill_counted
        self.completion_tokens += other.completion_tokens
        self.cut_replies += other.cut_replies
        self.nli_pairs += other.nli_pairs
        self.embedded_texts += other.embedded_texts
        self.seconds += other.seconds

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class StepFailure:
    """A step that could not be completed (reply never parsed, backend fault, prompt too long)."""

    stage: str
    role: str
    error: str
    raw: list[str] = field(default_factory=list)
    """The raw replies, kept for inspection."""
    item: str | None = None
    """What the step was about (turn id, segment, entry text), for the user reading the record."""


@dataclass(slots=True)
class RunStats:
    """Per-session accounting and the counters of what each verification module did."""

    stages: dict[str, StageStats] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """e.g. draft_entries, events, recovered, hv_checked, hv_entailed, hv_split, atomic_kept, revised,
    discarded, edges_candidate, edges_implicit, edges_untested, edges_unsupported, edges_kept, details,
    details_anchored,
    draft_chunks, windowed_turns, repaired_replies, retried_requests, cut_continued, list_continuations,
    continued_items (items that only a continuation or a retry with a larger budget brought in)."""
    failures: list[StepFailure] = field(default_factory=list)

    def stage(self, name: str) -> StageStats:
        found = self.stages.get(name)
        if found is None:
            found = self.stages[name] = StageStats()
        return found

    def bump(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def merge(self, other: RunStats) -> None:
        for name, st in other.stages.items():
            self.stage(name).add(st)
        for key, n in other.counts.items():
            self.bump(key, n)
        self.failures.extend(other.failures)

    def total(self) -> StageStats:
        out = StageStats()
        for st in self.stages.values():
            out.add(st)
        return out

    def to_dict(self, timings: bool = True) -> dict[str, Any]:
        stages = {}
        for name in sorted(self.stages, key=_stage_order):
            d = asdict(self.stages[name])
            if timings:
                d["seconds"] = round(d["seconds"], 6)
            else:
                d.pop("seconds")
            stages[name] = d
        return {
            "stages": stages,
            "counts": dict(sorted(self.counts.items())),
            "failures": [asdict(f) for f in self.failures],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunStats:
        return cls(
            stages={k: StageStats(**v) for k, v in data.get("stages", {}).items()},
            counts=dict(data.get("counts", {})),
            failures=[StepFailure(**f) for f in data.get("failures", [])],
        )


def _stage_order(name: str) -> tuple[int, str]:
    return (STAGES.index(name) if name in STAGES else len(STAGES), name)


@dataclass(slots=True)
class MemoryGraph:
    """The verified memory of one session: V = ``nodes``, E = ``edges``, A = ``details`` anchored to nodes."""

    session_id: str
    user: str
    nodes: list[MemoryEntry]
    edges: list[Edge]
    details: list[Detail]
    events: list[Event]
    stats: RunStats
    timestamp: str | None = None
    mode: str = "promem"
    metadata: dict[str, Any] = field(default_factory=dict)
    """The session's metadata as given (``add(..., metadata=...)``): stored with it, filterable, exported."""

    # ------------------------------------------------------------------------------------ JSON
    def to_dict(self, timings: bool = True) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session_id,
            "user": self.user,
            "timestamp": self.timestamp,
            "mode": self.mode,
            "nodes": [asdict(n) for n in self.nodes],
            "edges": [asdict(e) for e in self.edges],
            "details": [asdict(d) for d in self.details],
            "events": [asdict(e) for e in self.events],
            "stats": self.stats.to_dict(timings),
            **({"metadata": dict(self.metadata)} if self.metadata else {}),  # outputs without it stay as they were
        }

    def to_json(self, timings: bool = True) -> str:
        """One line of the output JSONL (keys in a fixed order, so equal graphs give equal bytes)."""
        import json

        return json.dumps(self.to_dict(timings), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryGraph:
        return cls(
            session_id=data["session_id"],
            user=data["user"],
            timestamp=data.get("timestamp"),
            mode=data.get("mode", "promem"),
            nodes=[MemoryEntry(**n) for n in data["nodes"]],
            edges=[Edge(**e) for e in data["edges"]],
            details=[Detail(**d) for d in data["details"]],
            events=[Event(**e) for e in data.get("events", [])],
            stats=RunStats.from_dict(data.get("stats", {})),
            metadata=dict(data.get("metadata") or {}),
        )

    @classmethod
    def from_json(cls, line: str) -> MemoryGraph:
        import json

        return cls.from_dict(json.loads(line))

    # ------------------------------------------------------------------------------------ graphs
    def node_link_data(self) -> dict[str, Any]:
        """networkx node-link JSON: ``networkx.node_link_graph(data, edges="edges")`` reads it back."""
        nodes = []
        for n in self.nodes:
            nodes.append({
                "id": n.id, "text": n.text, "origin": n.origin, "verification": n.verification,
                "turn_ids": list(n.turn_ids), "details": [self.details[i].text for i in n.details],
                "date": n.date,
            })
        edges = [{"source": e.source, "target": e.target, "relation": e.relation, "probe": e.probe}
                 for e in self.edges]
        return {
            "directed": True, "multigraph": False,
            "graph": {"session_id": self.session_id, "user": self.user, "timestamp": self.timestamp},
            "nodes": nodes, "edges": edges,
        }

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph``: node attributes text/origin/verification/turn_ids/details, edge attribute relation."""
        import networkx as nx

        return nx.node_link_graph(self.node_link_data(), edges="edges")

    def write_graphml(self, path: str | IO[bytes]) -> None:
        """GraphML export to a path or a binary file (lists are joined with `` | `` since GraphML attributes
        are scalars)."""
        import networkx as nx

        g = self.to_networkx()
        for _, attrs in g.nodes(data=True):
            for key, value in list(attrs.items()):
                if isinstance(value, list):
                    attrs[key] = " | ".join(map(str, value))
                elif value is None:  # GraphML has no null: an unknown date is left out
                    del attrs[key]
        for _, _, attrs in g.edges(data=True):
            if attrs.get("probe") is None:
                attrs.pop("probe", None)
        for key, value in list(g.graph.items()):
            if value is None:
                del g.graph[key]
        nx.write_graphml(g, path)

    def iter_anchored(self) -> Iterator[tuple[MemoryEntry, list[Detail]]]:
        """Each node with its anchored details (what QA retrieval puts in context)."""
        for n in self.nodes:
            yield n, [self.details[i] for i in n.details]
