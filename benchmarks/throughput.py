"""Throughput harness: sessions/hour, tokens/s, seconds per stage and engine overhead of one backend.

    python benchmarks/throughput.py --backend scripted --sessions 200            # the engine's own overhead
    python benchmarks/throughput.py --backend transformers --tiny --sessions 8   # a 2-layer random Llama, CPU
    python benchmarks/throughput.py --backend transformers --random-llama-8b /tmp/llama8b \\
        --sessions 64 --max-in-flight 64 --batch-size 64 --random-embedder /tmp/emb --random-nli /tmp/nli
    python benchmarks/throughput.py --nli-pairs-per-second --random-nli /tmp/nli  # NLI pairs/s only

Sessions are the real HaluMem-Medium sample's, cycled with fresh ids (``--synthetic`` generates sessions of
``--session-tokens`` instead). ``--random-llama-8b`` builds, once, a randomly initialised model of exactly
Llama-3.1-8B's shape; ``--tiny`` a 2-layer one. Random weights write unparseable text, so the model is
wrapped in :class:`TimedReplay`: every request really runs through the model (its timings and token counts
are the ones reported) and then the reply *text* is replaced by the scripted backend's reply to the same
request, so the pipeline takes realistic branches. With ``ignore_eos`` every reply runs to its role's
``max_tokens`` from :data:`COMPLETION_TOKENS`. ``--model PATH`` runs real weights with real replies instead.

The tokenizer of the random models is trained here on the run's own dialogue text and prompt templates
(byte-level BPE with the special tokens and chat template of ``tiny_models``). A tokenizer trained on
``tiny_models``' generated sentences splits real dialogue into about 2.0 characters a token, against 5.8
for SmolLM2's 49K-entry vocabulary on the same HaluMem text, which would double every prompt; trained on the
dialogue it gives about 5.4 (measured on held-out HaluMem sessions), close to a production tokenizer.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import json
import logging
import pstats
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from report import limit_threads, machine_info  # noqa: E402
from tiny_models import BOS, CHAT_TEMPLATE, EOS, ROLE_TOKENS, SPECIAL_TOKENS, build_random_llama  # noqa: E402

from promem_fast import Engine, EngineConfig  # noqa: E402
from promem_fast.backends.base import (  # noqa: E402
    Completion, Embedder, GenerationRequest, LLMBackend, Message, NLIBackend, NLIResult,
)
from promem_fast.backends.llm_scripted import ScriptedLLM, approx_tokens  # noqa: E402
from promem_fast.config import EmbedderConfig, LLMConfig, NLIConfig, SimilarityConfig  # noqa: E402
from promem_fast.prompts import PREAMBLE, TEMPLATES  # noqa: E402
from promem_fast.types import Session, Turn  # noqa: E402

log = logging.getLogger("throughput")

DEFAULT_HALUMEM = ROOT.parent / "shared" / "data" / "halumem-dev" / "pilot_slice_user0.jsonl"

# ----------------------------------------------------------------------------------------- reply lengths
PAPER_TOKENS_PER_SESSION = 13_470
"""Paper, Appendix B, Table 6: average tokens (prompts and completions of every call) per HaluMem session
for Llama-3.1-8B. It is the cost of processing a session, not the length of its dialogue."""
PAPER_STAGE_SHARES = {"draft": 0.2740, "cc": 0.1353, "hv": 0.1522, "da": 0.2472, "rel": 0.1908}
"""Table 6's split of those tokens over the stages (Initial Draft, CC, HV, DA, REL)."""
GENERATED_TOKENS_PER_SESSION = 2_000
"""Assumed generated tokens per session (about 15% of Table 6's total). An estimate: the paper does not
split prompt from completion tokens, and no Llama replies were measured here."""

COMPLETION_TOKENS: dict[str, int] = {
    "draft": 512, "event": 40, "decompose": 56, "adjudicate": 48, "nli": 8, "detail": 22,
    "relation": 96, "probe": 28, "answer_flat": 14, "verify_relation": 8,
}
"""Tokens each reply runs to under ``ignore_eos`` (random weights). Derivation, an estimate and not a
measurement of Llama replies: :data:`GENERATED_TOKENS_PER_SESSION` split over the stages by
:data:`PAPER_STAGE_SHARES` gives draft 548, CC 271, HV 304, DA 494 and REL 382 tokens per session; each
stage's share is divided over its roles by the calls per session this engine makes on the HaluMem sample
(draft 1.0, event 5.7, decompose 2.7, adjudicate 3.1, detail 23, relation 1.0, probe 5.2, answer_flat 5.2,
verify_relation 5.2) and by what each reply holds (a JSON list of about 24 facts for the draft, two
sentences per event reply, a short list of fragments per detail reply, one question per probe, a boolean
per verification). On the HaluMem sample this gave 1,787 generated tokens per session."""

ROLE_STAGE = {"draft": "draft", "event": "cc", "decompose": "hv", "adjudicate": "hv", "nli": "hv",
              "detail": "da", "relation": "rel", "probe": "rel", "answer_flat": "rel", "verify_relation": "rel"}
"""The stage each role's requests are issued in (``promem_fast.pipeline``), to attribute model seconds."""

# --------------------------------------------------------------------------------------------- shapes
LLAMA_31_8B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 14336,
               "vocab_size": 128256, "rope_theta": 500000.0, "max_position": 131072}
"""Llama-3.1-8B's configuration (meta-llama/Llama-3.1-8B-Instruct ``config.json``)."""
TINY_LLAMA = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 128,
              "vocab_size": 8192, "rope_theta": 10000.0, "max_position": 8192}
"""For CPU runs. The vocabulary is larger than the trained tokenizer's, as with the 8B shape, so ids the
tokenizer does not know are generated and must decode without error."""
ROBERTA_LARGE = {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096, "vocab_size": 50265}
"""roberta-large-mnli's shape: the GPU profile's NLI model."""
MINILM = {"layers": 6, "hidden": 384, "heads": 12, "intermediate": 1536, "vocab_size": 30522}
"""all-MiniLM-L6-v2's shape: the random stand-in for the GPU profile's embedder (which needs weights)."""
TINY_ENCODER = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "vocab_size": 4096}

REPLAY_MAX_TOKENS = 1 << 20
"""The scripted reply is asked with this budget so it is never cut; the model's own budget stays as sent."""


class Interrupted(BaseException):
    """SIGTERM (a ``timeout`` wrapper): stop the run and still write what was measured. Not an ``Exception``,
    so the engine's fault isolation (which retries failing batches) lets it through."""


# ---------------------------------------------------------------------------------------------- sessions
def load_halumem_sessions(path: Path) -> list[Session]:
    """Every session of a HaluMem file, converted by the evaluation loader."""
    from promem_fast.eval.datasets import load_halumem

    return list(load_halumem(path).iter_sessions())


def cycle(base: Sequence[Session], n: int) -> list[Session]:
    """``n`` sessions taken round-robin from ``base``, each with its own id (the engine keys on ids)."""
    return [dataclasses.replace(base[i % len(base)], session_id=f"{base[i % len(base)].session_id}#{i // len(base)}")
            for i in range(n)]


_PEOPLE = ("Ana", "Tomas", "Lena", "Ravi", "Ines", "Kenji", "Sofia", "Bruno", "Marta", "Omar")
_PLACES = ("Lisbon", "Porto", "Oslo", "Kyoto", "Lyon", "Quito", "Cork", "Graz", "Austin", "Columbus")
_ORGS = ("Nordvik Labs", "Huaxin Consulting", "Bluefern Health", "Corvid Analytics", "Tallow & Pine")
_MONTHS = ("January", "March", "May", "July", "September", "November")
_DAYS = ("Monday", "Wednesday", "Friday", "Saturday")
_USER_FACTS = (
    "I started a new job as a data analyst at {org} in {month}.",
    "My sister {person} is moving to {place} in {month} and I promised to help her.",
    "I have been running {n} km every morning since {month}.",
    "I booked a trip to {place} with my friend {person} for the first week of {month}.",
    "My doctor told me to cut down on coffee after my checkup in {month}.",
    "I adopted a beagle named Biscuit last {day}.",
    "I am saving {n}00 dollars a month for an apartment in {place}.",
    "My manager {person} asked me to lead the onboarding project at {org}.",
    "I signed up for a pottery class that meets every {day} evening.",
    "I finished a book about public health that {person} recommended to me.",
    "I got promoted to senior director at {org}, and my salary went up to {n}000 yuan a month.",
    "My father had knee surgery in {place} in {month}, so I visit him every {day}.",
)
_USER_TAILS = ("I'm excited but also a bit nervous about it.", "It has been on my mind all week.",
               "Do you think that is a good idea?", "I'm not sure how to balance it with everything else.")
_ASSISTANT = (
    "That sounds like a meaningful step, and it is natural to feel both excited and a little uncertain about it.",
    "It may help to break the change into smaller goals so that each week feels manageable and clear.",
    "Keeping a short journal of how you feel could show you which parts are going well and which are not.",
    "Talking it through with people you trust often makes the next decision easier to see.",
    "Remember to leave some time for rest, since steady habits usually last longer than bursts of effort.",
    "If you want, we can plan the first few steps together and look at how they went next time.",
    "Many people in a similar situation find that a clear routine reduces the stress considerably.",
    "It is worth writing down what matters most to you before committing to anything new.",
)
TURN_CHARS = 640
"""A HaluMem-Medium turn in the sample: about 120 characters from the user and 520 from the assistant."""
HALUMEM_SESSION_TOKENS = 3_700
"""Mean dialogue length of the HaluMem-Medium sample's sessions in approximate tokens (characters / 4):
the default size of synthetic sessions, so that both inputs cost about the same to process."""


def synthetic_sessions(n: int, tokens: int, seed: int = 0) -> list[Session]:
    """``n`` HaluMem-shaped sessions of about ``tokens`` approximate tokens (characters / 4) each: first-person
    user messages stating facts (names, places, dates, amounts), long generic assistant replies."""
    rng = random.Random(seed)
    turns_per_session = max(2, round(tokens * 4 / TURN_CHARS))
    sessions = []
    for s in range(n):
        turns: list[Turn] = []
        for t in range(turns_per_session):
            fact = rng.choice(_USER_FACTS).format(org=rng.choice(_ORGS), month=rng.choice(_MONTHS),
                                                  person=rng.choice(_PEOPLE), place=rng.choice(_PLACES),
                                                  n=rng.randint(2, 19), day=rng.choice(_DAYS))
            said = f"{fact} {rng.choice(_USER_TAILS)}"
            reply = rng.sample(_ASSISTANT, 5)
            turns.append(Turn(turn_id=t, role="user", text=said))
            turns.append(Turn(turn_id=t, role="assistant", text=" ".join(reply)))
        sessions.append(Session(session_id=f"synthetic-{s}", user="Martin Mark", turns=tuple(turns),
                                timestamp="2029-01-15T15:12:20"))
    return sessions


def dialogue_text(session: Session) -> str:
    return "\n".join(f"{turn.role}: {turn.text}" for turn in session.turns)


def corpus(sessions: Iterable[Session]) -> list[str]:
    """Tokenizer training text: every distinct message, plus the prompt templates (repeated so their words
    become single tokens, as in any production vocabulary)."""
    texts = list(dict.fromkeys(turn.text for session in sessions for turn in session.turns))
    templates = [PREAMBLE] + [part for t in TEMPLATES.values() for part in (t.system, t.user)]
    return texts + templates * 50


# ------------------------------------------------------------------------------------- random models
def train_corpus_tokenizer(dst: Path, texts: Sequence[str], vocab_size: int = 32000) -> Any:
    """A byte-level BPE trained on ``texts`` with ``tiny_models``' special tokens and chat template, saved in
    ``dst``; the vocabulary stops growing where the text runs out of merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                        additional_special_tokens=list(ROLE_TOKENS))
    tokenizer.chat_template = CHAT_TEMPLATE
    dst.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(dst)
    return tokenizer


def prepare_random_llama(dst: Path, shape: dict[str, Any], texts: Sequence[str], *, weights: bool, dtype: str,
                         device: str) -> Path:
    """Tokenizer, configuration and (with ``weights``) random weights of ``shape`` in ``dst``, built once.

    The model is created on ``device`` (``build_random_llama`` inside a ``torch.device`` scope): random
    initialisation of 8 billion parameters takes minutes on a CPU and well under a second on a GPU.
    """
    import torch

    if not (dst / "tokenizer.json").is_file():
        log.info("training the tokenizer for %s", dst)
        train_corpus_tokenizer(dst, texts)
    has_weights = any(dst.glob("*.safetensors"))
    if (dst / "config.json").is_file() and (has_weights or not weights):
        log.info("reusing the random Llama in %s", dst)
        return dst
    from transformers import AutoTokenizer

    size = len(AutoTokenizer.from_pretrained(dst))
    fields = dict(shape, vocab_size=max(shape["vocab_size"], size))
    log.info("building a random Llama (%d layers, hidden %d, vocab %d, %s) on %s into %s", fields["layers"],
             fields["hidden"], fields["vocab_size"], dtype, device, dst)
    with torch.device(device):
        build_random_llama(dst, dtype=dtype, weights=weights, **fields)
    if device == "cuda":  # the built copy is garbage now; give its 16 GB back before the backend loads its own
        gc.collect()
        torch.cuda.empty_cache()
    return dst


def _encoder_config(transformers: Any, kind: str, shape: dict[str, Any], vocab: int, **extra: Any) -> Any:
    cls = transformers.RobertaConfig if kind == "roberta" else transformers.BertConfig
    return cls(vocab_size=max(shape["vocab_size"], vocab), hidden_size=shape["hidden"],
               num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
               intermediate_size=shape["intermediate"], **extra)


def prepare_random_nli(dst: Path, shape: dict[str, Any], texts: Sequence[str], device: str) -> Path:
    """A random RoBERTa sequence classifier of ``shape`` with roberta-large-mnli's label order and a byte-level
    BPE trained on ``texts``, built once. Its labels mean nothing; only its cost is real."""
    if (dst / "config.json").is_file():
        return dst
    import torch
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    dst.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=32000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                            show_progress=False)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file, merges_file = bpe.save_model(scratch)
        tokenizer = transformers.RobertaTokenizerFast(vocab_file, merges_file, model_max_length=512)
        tokenizer.save_pretrained(str(dst))
    labels = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    config = _encoder_config(transformers, "roberta", shape, bpe.get_vocab_size(), max_position_embeddings=514,
                             type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, id2label=labels,
                             label2id={v: k for k, v in labels.items()})
    log.info("building a random NLI classifier (%d layers, hidden %d) on %s into %s", shape["layers"],
             shape["hidden"], device, dst)
    with torch.device(device):
        transformers.RobertaForSequenceClassification(config).save_pretrained(str(dst))
    return dst


def prepare_random_embedder(dst: Path, shape: dict[str, Any], texts: Sequence[str], device: str) -> Path:
    """A random BERT of ``shape`` with mean pooling, written as a sentence-transformers folder (the layout of
    the shipped MiniLM: model at the top, ``modules.json``, ``1_Pooling``), with a WordPiece vocabulary
    trained on ``texts``; built once."""
    if (dst / "modules.json").is_file():
        return dst
    import torch
    import transformers
    from tokenizers import BertWordPieceTokenizer

    dst.mkdir(parents=True, exist_ok=True)
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(texts, vocab_size=30522, show_progress=False)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file = wordpiece.save_model(scratch)[0]
        transformers.BertTokenizerFast(vocab_file, do_lower_case=True, model_max_length=512).save_pretrained(str(dst))
    config = _encoder_config(transformers, "bert", shape, wordpiece.get_vocab_size(), max_position_embeddings=512)
    log.info("building a random embedder (%d layers, hidden %d) on %s into %s", shape["layers"], shape["hidden"],
             device, dst)
    with torch.device(device):
        transformers.BertModel(config).save_pretrained(str(dst))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (dst / "1_Pooling").mkdir(exist_ok=True)
    (dst / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": shape["hidden"], "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}), encoding="utf-8")
    (dst / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}),
                                                   encoding="utf-8")
    (dst / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    return dst


# ---------------------------------------------------------------------------------------------- replay
def role_of(messages: Sequence[Message]) -> str:
    """Which of our prompt templates rendered ``messages`` (by its system text; ``?`` if none)."""
    system = messages[0]["content"] if messages else ""
    for role, template in TEMPLATES.items():
        if system.startswith(f"{PREAMBLE}\n\n{template.system.split('{', 1)[0]}"):
            return role
    return "?"


@dataclasses.dataclass
class RoleTally:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    """Wall seconds of the real model's batches, shared over their requests by prompt + completion tokens
    (the engine's own rule for stage seconds)."""


class _Replay:
    """What the replays share: the real backend's seconds and the stand-in's, kept apart."""

    def __init__(self) -> None:
        self.model_seconds = 0.0
        self.replay_seconds = 0.0

    def _both(self, real: Callable[[], Any], stand_in: Callable[[], Any]) -> tuple[Any, Any, float]:
        """Run ``real`` (timed as the model) then ``stand_in`` (timed as replay); both results and the first's
        seconds."""
        started = time.perf_counter()
        got = real()
        middle = time.perf_counter()
        answer = stand_in()
        self.model_seconds += middle - started
        self.replay_seconds += time.perf_counter() - middle
        return got, answer, middle - started

    def seconds(self) -> dict[str, float]:
        return {"model_seconds": round(self.model_seconds, 3), "replay_seconds": round(self.replay_seconds, 3)}


class TimedReplay(_Replay):
    """A real model's cost with the scripted backend's words.

    ``generate`` sends every request to ``model`` (schemas removed: a random model cannot follow a grammar,
    and constrained decoding is not what is measured) and keeps its token counts; then it asks ``replay``
    (a :class:`ScriptedLLM`, with an unbounded budget so its replies are never cut) for the same requests and
    returns the scripted texts, which parse, so each session takes the branches a working model would.
    Model and replay seconds are kept apart; the engine sees both inside its ``generate`` backend time.

    ``chunk``: send the model one batch of this many requests at a time, formed as the transformers backend
    forms its own (sorted by prompt length, ties by position), so the batches are the same but every one
    is logged and tallied as it finishes: a run stopped at a time limit keeps all but the last. ``None``
    sends each engine call whole (vLLM schedules a whole call better than any split of it).
    """

    def __init__(self, model: LLMBackend, replay: ScriptedLLM | None = None, chunk: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.replay = replay or ScriptedLLM()
        self.chunk = chunk
        self.context_length = model.context_length
        self.batches = 0
        self.roles: dict[str, RoleTally] = {}

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self.model.count_tokens(messages)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if not self.chunk or len(requests) <= self.chunk:
            return self._batch(requests)
        sizes = [self.model.count_tokens(r.messages) for r in requests]
        order = sorted(range(len(requests)), key=lambda i: (sizes[i], i))
        out: list[Completion | None] = [None] * len(requests)
        for start in range(0, len(order), self.chunk):
            chosen = order[start:start + self.chunk]
            for i, completion in zip(chosen, self._batch([requests[i] for i in chosen])):
                out[i] = completion
        return [c for c in out if c is not None]

    def _batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        real, words, seconds = self._both(
            lambda: self.model.generate([dataclasses.replace(r, schema=None) for r in requests]),
            lambda: self.replay.generate([dataclasses.replace(r, max_tokens=REPLAY_MAX_TOKENS) for r in requests]))
        self.batches += 1
        weights = [c.prompt_tokens + c.completion_tokens for c in real]
        total = sum(weights) or 1
        for request, completion, weight in zip(requests, real, weights):
            tally = self.roles.setdefault(role_of(request.messages), RoleTally())
            tally.calls += 1
            tally.prompt_tokens += completion.prompt_tokens
            tally.completion_tokens += completion.completion_tokens
            tally.model_seconds += seconds * weight / total
        log.info("generate batch %d: %d requests, %d prompt + %d completion tokens, %.2f s model (%.0f tok/s)",
                 self.batches, len(requests), sum(c.prompt_tokens for c in real),
                 sum(c.completion_tokens for c in real), seconds, sum(weights) / max(seconds, 1e-9))
        return [Completion(text=w.text, prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                           finish_reason=w.finish_reason) for c, w in zip(real, words)]


class ReplayNLI(_Replay):
    """A random NLI classifier's cost with the lexical checker's labels: random logits would send a share of
    entries to decomposition and adjudication that no trained model would, changing the LLM calls."""

    def __init__(self, model: NLIBackend, stand_in: NLIBackend) -> None:
        super().__init__()
        self.model, self.stand_in = model, stand_in

    def entail(self, pairs: Sequence[tuple[str, str]]) -> list[NLIResult]:
        return self._both(lambda: self.model.entail(pairs), lambda: self.stand_in.entail(pairs))[1]


class ReplayEmbedder(_Replay):
    """A random embedder's cost with the hashing embedder's vectors: random-weight vectors are nearly all
    alike (cosine 0.98 on average between unrelated HaluMem turns, MiniLM shape), which would change topic
    cuts, grounding and the completeness check, hence the calls."""

    def __init__(self, model: Embedder, stand_in: Embedder) -> None:
        super().__init__()
        self.model, self.stand_in = model, stand_in
        self.dim = stand_in.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._both(lambda: self.model.embed(texts), lambda: self.stand_in.embed(texts))[1]


# ------------------------------------------------------------------------------------------ configuring
@dataclasses.dataclass
class Setup:
    config: EngineConfig
    llm: LLMBackend | None
    """Injected backend (``TimedReplay`` or a real model); ``None`` = built by the engine from the config."""
    replay: TimedReplay | None
    device: str
    notes: list[str]
    nli: ReplayNLI | None = None
    embedder: ReplayEmbedder | None = None
    """Random-weight aux models, injected with their replays; ``None`` = built by the engine from the config."""


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def configure_aux(setup: Setup, args: argparse.Namespace, texts: Sequence[str], work: Path) -> None:
    """Embedder, NLI and similarity: the scripted profile's on the CPU (``--real-aux``: MiniLM and a torch NLI
    classifier), the GPU profile's on CUDA, with random stand-ins (replayed) where the GPU profile needs
    weights that are not here."""
    from promem_fast.backends import create
    from promem_fast.models import entry

    config, device, notes = setup.config, setup.device, setup.notes
    encoder = TINY_ENCODER if args.tiny else None
    gpu = device == "cuda"
    if args.random_embedder:
        folder = prepare_random_embedder(args.random_embedder, encoder or MINILM, texts, device)
        config.embedder = EmbedderConfig(backend="sentence-transformers", model=str(folder), device=device,
                                         batch_size=256 if gpu else 64)
        setup.embedder = ReplayEmbedder(create("embedder", "sentence-transformers", config.embedder),
                                        create("embedder", "hashing", EmbedderConfig(backend="hashing")))
        notes.append(f"embedder: random {'tiny' if encoder else 'MiniLM'}-shaped BERT on {device}, replayed with "
                     "the hashing embedder's vectors (stands in for the GPU profile's Qwen3-Embedding-0.6B, "
                     "about 25x the compute per token)")
    elif gpu and entry("qwen3-embedding-0.6b").locate() is not None:
        config.embedder = EngineConfig.profile("gpu").embedder
        notes.append("embedder: the GPU profile's Qwen3-Embedding-0.6B")
    elif gpu:
        notes.append("embedder: hashing (Qwen3-Embedding-0.6B is not on this machine; pass --random-embedder)")
    elif args.real_aux:
        config.embedder = EmbedderConfig(backend="sentence-transformers", device="cpu")
        notes.append("embedder: all-MiniLM-L6-v2 (sentence-transformers, CPU)")
    else:
        notes.append("embedder: hashing (scripted profile; --real-aux for MiniLM)")

    if args.random_nli or (args.real_aux and not gpu):
        folder = args.random_nli or work / "nli"
        shape = ROBERTA_LARGE if args.random_nli and not args.tiny else TINY_ENCODER
        prepare_random_nli(folder, shape, texts, device)
        config.nli = NLIConfig(backend="torch", model=str(folder), device=device, batch_size=256 if gpu else 32,
                               max_length=256)
        setup.nli = ReplayNLI(create("nli", "torch", config.nli), create("nli", "lexical", NLIConfig(backend="lexical")))
        notes.append(f"nli: random RoBERTa classifier ({shape['layers']} layers, hidden {shape['hidden']}) on "
                     f"torch/{device}, replayed with the lexical checker's labels")
    elif gpu and entry("roberta-large-mnli-onnx").locate() is not None:
        config.nli = EngineConfig.profile("gpu").nli
        notes.append("nli: the GPU profile's roberta-large-mnli on ONNX Runtime")
    elif gpu:
        notes.append("nli: lexical (roberta-large-mnli-onnx is not on this machine; pass --random-nli)")
    else:
        notes.append("nli: lexical (scripted profile)")
    config.similarity = SimilarityConfig(backend="auto", device=device) if gpu else SimilarityConfig(backend="numpy")
    notes.append(f"similarity: {config.similarity.backend} on {device}")


def configure(args: argparse.Namespace, texts: Sequence[str], work: Path) -> Setup:
    device = "cpu" if args.backend == "scripted" else resolve_device(args.device)
    config = EngineConfig.profile("scripted")
    config.max_in_flight = args.max_in_flight
    config.progress = False
    setup = Setup(config, None, None, device, [])
    if args.backend == "scripted":
        setup.notes.append("llm: scripted (deterministic rules; token counts are its characters/4 estimates): "
                           "measures the engine's own overhead")
        configure_aux(setup, args, texts, work)
        return setup

    random_weights = args.model is None
    if random_weights:
        shape, name = (TINY_LLAMA, "tiny") if args.tiny or not args.random_llama_8b else (LLAMA_31_8B, "8b")
        folder = args.random_llama_8b if name == "8b" else (args.random_llama_8b or work / "tiny-llama")
        dtype = "bfloat16" if device == "cuda" else "float32"
        model_path = str(prepare_random_llama(folder, shape, texts, weights=args.backend == "transformers",
                                              dtype=dtype, device=device))
        setup.notes.append(f"llm: random-weight Llama ({'Llama-3.1-8B shape' if name == '8b' else '2-layer tiny'}) "
                           f"at {model_path}, {args.backend} on {device} ({dtype})")
    else:
        model_path = str(args.model)
        setup.notes.append(f"llm: {model_path} on {args.backend}/{device} with its own replies and stops")
    llm_config = LLMConfig(backend=args.backend, model=model_path, device=device, dtype="auto",
                           batch_size=args.batch_size, ignore_eos=random_weights,
                           context_length=args.context_length if args.backend == "transformers"
                           else (args.context_length or 32768))
    if random_weights and args.backend == "vllm":
        llm_config.options = {"load_format": "dummy"}
    config.llm = llm_config
    if random_weights:
        config.pipeline.max_tokens.update(COMPLETION_TOKENS)
    configure_aux(setup, args, texts, work)

    from promem_fast.backends import create

    log.info("loading the %s backend", args.backend)
    started = time.perf_counter()
    model = create("llm", args.backend, llm_config)
    setup.notes.append(f"llm load: {time.perf_counter() - started:.1f} s")
    model.generate([GenerationRequest(messages=({"role": "user", "content": "warm up"},), schema=None,
                                      max_tokens=4)])
    if not random_weights:
        setup.llm = model
        return setup
    setup.llm = setup.replay = TimedReplay(model, chunk=args.batch_size if args.backend == "transformers" else None)
    setup.notes.append("TimedReplay: every request ran through the random-weight model above (its timings and "
                       "token counts are the ones reported; replies forced to max_tokens with ignore_eos), then "
                       "its reply text was replaced by the scripted backend's reply to the same request so the "
                       "pipeline could proceed. These figures are the model's cost, not its memory quality.")
    return setup


# ---------------------------------------------------------------------------------------------- running
def _on_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


def run(setup: Setup, sessions: list[Session], profile_to: Path | None) -> tuple[Engine, bool, pstats.Stats | None]:
    """Extract every session; returns the engine, whether it finished, and the profile if one was asked."""
    engine = Engine(setup.config, llm=setup.llm, nli=setup.nli, embedder=setup.embedder)
    step = max(1, len(sessions) // 10)
    profiler = cProfile.Profile() if profile_to else None
    finished = False
    started = time.perf_counter()
    try:
        if profiler:
            profiler.enable()
        for done, _ in enumerate(engine.extract_stream(sessions), 1):
            if done % step == 0 or done == len(sessions):
                log.info("%d/%d sessions done, %.1f s, %d rounds", done, len(sessions),
                         time.perf_counter() - started, engine.summary.rounds)
        finished = True
    except Interrupted as exc:
        log.warning("interrupted (%s) after %.1f s: writing partial figures", exc, time.perf_counter() - started)
    finally:
        if profiler:
            profiler.disable()
    stats = None
    if profiler and profile_to:
        profiler.dump_stats(str(profile_to))
        stats = pstats.Stats(profiler)
    return engine, finished, stats


def token_stats(sessions: Sequence[Session], llm: LLMBackend | None) -> dict[str, Any]:
    """Mean dialogue size: characters / 4 always, and in the model's own tokens when there is a model."""
    texts = [dialogue_text(s) for s in sessions]
    out: dict[str, Any] = {"mean_chars": round(sum(map(len, texts)) / len(texts)),
                           "mean_tokens_chars_over_4": round(sum(map(approx_tokens, texts)) / len(texts))}
    if llm is not None:
        empty = llm.count_tokens([{"role": "user", "content": ""}])
        counted = [llm.count_tokens([{"role": "user", "content": t}]) - empty for t in texts]
        out["mean_tokens_model_tokenizer"] = round(sum(counted) / len(counted))
        out["chars_per_model_token"] = round(sum(map(len, texts)) / max(sum(counted), 1), 2)
    return out


def summarize(engine: Engine, setup: Setup, args: argparse.Namespace, source: str, sizes: dict[str, Any],
              finished: bool) -> dict[str, Any]:
    summary = engine.summary
    replay = setup.replay
    n = summary.sessions
    wall = summary.wall_seconds
    stages = summary.stats.to_dict()["stages"]
    role_seconds: dict[str, float] = {}
    if replay is not None:
        for role, tally in replay.roles.items():
            stage = ROLE_STAGE.get(role, "?")
            role_seconds[stage] = role_seconds.get(stage, 0.0) + tally.model_seconds
            if stage in stages:
                stages[stage]["model_seconds"] = round(role_seconds[stage], 3)
    prompt = sum(s["prompt_tokens"] for s in stages.values())
    completion = sum(s["completion_tokens"] for s in stages.values())
    backend = sum(summary.backend_seconds.values())
    out: dict[str, Any] = {
        "finished": finished,
        "backend": args.backend,
        "device": setup.device,
        "taken": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "notes": setup.notes,
        "sessions": {"count": n, "asked": args.sessions, "source": source, **sizes},
        "config": {"max_in_flight": setup.config.max_in_flight, "llm_batch_size": setup.config.llm.batch_size,
                   "max_tokens": {k: setup.config.pipeline.max_tokens[k] for k in ROLE_STAGE},
                   "ignore_eos": setup.config.llm.ignore_eos},
        "wall_seconds": round(wall, 3),
        "sessions_per_hour": round(n / wall * 3600, 1) if wall > 0 else None,
        "prompt_tokens_per_second": round(prompt / wall, 1) if wall > 0 else None,
        "completion_tokens_per_second": round(completion / wall, 1) if wall > 0 else None,
        "prompt_tokens_per_session": round(prompt / n) if n else None,
        "completion_tokens_per_session": round(completion / n) if n else None,
        "paper_tokens_per_session": PAPER_TOKENS_PER_SESSION,
        "paper_stage_shares": PAPER_STAGE_SHARES,
        "assumed_generated_tokens_per_session": GENERATED_TOKENS_PER_SESSION if setup.config.llm.ignore_eos else None,
        "engine_overhead_ms_per_session": round((wall - backend) / n * 1e3, 2) if n else None,
        "rounds": summary.rounds,
        "backend_calls": summary.backend_calls,
        "backend_seconds": {k: round(v, 3) for k, v in summary.backend_seconds.items()},
        "stages": stages,
        "counts": summary.stats.counts,
        "machine": machine_info(),
    }
    replays = {kind: r for kind, r in (("llm", replay), ("nli", setup.nli), ("embedder", setup.embedder)) if r}
    if replays:
        out["replays"] = {kind: r.seconds() for kind, r in replays.items()}
        unreplayed = wall - sum(r.replay_seconds for r in replays.values())
        out["sessions_per_hour_without_replay"] = round(n / unreplayed * 3600, 1) if n and unreplayed > 0 else None
    if replay is not None:
        out["model_seconds"] = round(replay.model_seconds, 3)
        out["replay_seconds"] = round(replay.replay_seconds, 3)
        out["roles"] = {role: dataclasses.asdict(t) for role, t in sorted(replay.roles.items())}
        # A partial run finished no session, so the per-role tallies are its only token figures.
        out["model_prompt_tokens_per_second"] = round(
            sum(t.prompt_tokens for t in replay.roles.values()) / max(replay.model_seconds, 1e-9), 1)
        out["model_completion_tokens_per_second"] = round(
            sum(t.completion_tokens for t in replay.roles.values()) / max(replay.model_seconds, 1e-9), 1)
    return out


def render(result: dict[str, Any]) -> str:
    """The plain-text report (the JSON holds the same figures)."""
    s = result["sessions"]
    sizes = f"{s['mean_tokens_chars_over_4']} tokens by characters/4"
    if "mean_tokens_model_tokenizer" in s:
        sizes += f", {s['mean_tokens_model_tokenizer']} model tokens ({s['chars_per_model_token']} chars/token)"
    lines = [f"promem_fast throughput: {result['backend']} on {result['device']} "
             f"({'; '.join(result['machine']['gpus']) or result['machine']['cpu']})",
             f"sessions: {s['count']} of {s['asked']} ({s['source']}), mean dialogue {sizes}",
             *[f"  note: {note}" for note in result["notes"]]]
    if not result["finished"]:
        lines.append("  NOT FINISHED: interrupted; session figures cover the sessions done, role tallies all calls")
    per_hour = result["sessions_per_hour"]
    lines += [
        f"sessions/hour             {per_hour if per_hour is not None else '-'}"
        + (f"   ({result['sessions_per_hour_without_replay']} without the replay's own time)"
           if result.get("sessions_per_hour_without_replay") else ""),
        f"prompt tokens/s           {result['prompt_tokens_per_second']}",
        f"completion tokens/s       {result['completion_tokens_per_second']}",
        f"tokens/session            {result['prompt_tokens_per_session']} prompt + "
        f"{result['completion_tokens_per_session']} completion (paper Table 6: {PAPER_TOKENS_PER_SESSION} in all)",
        f"engine overhead           {result['engine_overhead_ms_per_session']} ms/session "
        "(wall minus time inside backends)",
        f"wall {result['wall_seconds']} s, {result['rounds']} rounds, backend seconds {result['backend_seconds']}",
    ]
    if "model_seconds" in result:
        lines.append(f"model seconds {result['model_seconds']} ({'GPU' if result['device'] == 'cuda' else 'CPU'}), "
                     f"replay seconds {result['replay_seconds']}; model alone: "
                     f"{result['model_prompt_tokens_per_second']} prompt tok/s, "
                     f"{result['model_completion_tokens_per_second']} completion tok/s")
    aux = [f"{kind} {r['model_seconds']} s (replay {r['replay_seconds']} s)"
           for kind, r in result.get("replays", {}).items() if kind != "llm"]
    if aux:
        lines.append("random aux models: " + ", ".join(aux))
    lines.append(f"{'stage':<7}{'calls':>7}{'prompt tok':>12}{'compl tok':>11}{'nli':>7}{'embeds':>8}"
                 f"{'seconds':>10}{'model s':>10}")
    for name, st in result["stages"].items():
        model_s = st.get("model_seconds")
        lines.append(f"{name:<7}{st['calls']:>7}{st['prompt_tokens']:>12}{st['completion_tokens']:>11}"
                     f"{st['nli_pairs']:>7}{st['embedded_texts']:>8}{st['seconds']:>10.2f}"
                     f"{model_s if model_s is not None else '-':>10}")
    lines.append("seconds: the engine's attribution of every backend batch (replay included); model s: the LLM's "
                 "own share (on one GPU, GPU-seconds)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- NLI only
def nli_pairs(sessions: Sequence[Session], count: int, premise: str = "turn") -> list[tuple[str, str]]:
    """(premise, one of the turn's user sentences): the shapes of hallucination checks. The premise is the
    whole turn (``pipeline.premise = "turn"``) or only the user's message in it (``"speaker"``)."""
    pairs: list[tuple[str, str]] = []
    for session in sessions:
        for _, group in session.turn_groups():
            said = next((t.text for t in group if t.role == session.owner_role), "")
            text = "\n".join(f"{t.role}: {t.text}" for t in group if premise == "turn" or t.role == session.owner_role)
            hypothesis = said.split(". ")[0].rstrip(".") + "."
            pairs.append((text, hypothesis))
    return [pairs[i % len(pairs)] for i in range(count)]


def measure_nli(args: argparse.Namespace, sessions: Sequence[Session], texts: Sequence[str], work: Path
                ) -> dict[str, Any]:
    """Pairs/s of the torch NLI backend on a random roberta-large-shaped classifier at several batch sizes."""
    from promem_fast.backends.nli_torch import TorchNLI

    device = resolve_device(args.device)
    shape = TINY_ENCODER if args.tiny else ROBERTA_LARGE
    folder = prepare_random_nli(args.random_nli or work / "nli", shape, texts, device)
    backend = TorchNLI(NLIConfig(backend="torch", model=str(folder), device=device, max_length=256))
    pairs = nli_pairs(sessions, args.nli_pairs)
    windows = backend.encoder.encode(pairs)
    mean_len = sum(len(w.input_ids) for w in windows) / len(windows)
    sizes = args.nli_batch_sizes or ([64, 256] if device == "cuda" else [1, 16, 64])
    result: dict[str, Any] = {"device": device, "shape": shape, "pairs": len(pairs), "windows": len(windows),
                              "mean_window_tokens": round(mean_len, 1), "max_length": 256,
                              "fp16": device == "cuda", "batches": {}, "machine": machine_info()}
    backend.batch_size = max(sizes)
    backend.entail(pairs[: max(sizes)])
    for size in sizes:
        backend.batch_size = size
        if device == "cuda":
            import torch

            torch.cuda.synchronize()
        started = time.perf_counter()
        backend.entail(pairs)
        seconds = time.perf_counter() - started
        result["batches"][str(size)] = {"seconds": round(seconds, 3), "pairs_per_second": round(len(pairs) / seconds, 1)}
        log.info("NLI batch %d: %.1f pairs/s (%d pairs, %d windows of %.0f tokens on average, %.2f s)", size,
                 len(pairs) / seconds, len(pairs), len(windows), mean_len, seconds)
    return result


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("scripted", "transformers", "vllm"), default="scripted")
    p.add_argument("--sessions", type=int, default=64, help="sessions to extract (input cycled with fresh ids)")
    p.add_argument("--model", type=Path, help="real model folder or hub id (real replies, no replay)")
    p.add_argument("--random-llama-8b", type=Path, metavar="DIR",
                   help="build once in DIR and run a random-weight model of Llama-3.1-8B's shape")
    p.add_argument("--tiny", action="store_true", help="2-layer random Llama (and tiny random aux models)")
    p.add_argument("--max-in-flight", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="transformers: prompts per forward pass")
    p.add_argument("--context-length", type=int, help="model window (vllm default 32768; transformers: the model's)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=int, help="CPU threads for torch and BLAS (default: 1 with --tiny, whose "
                   "matrices are too small to split, else the libraries' own; 0 = theirs)")
    p.add_argument("--halumem", type=Path, default=DEFAULT_HALUMEM, help="HaluMem JSONL whose sessions are cycled")
    p.add_argument("--synthetic", action="store_true", help="generated HaluMem-shaped sessions instead")
    p.add_argument("--session-tokens", type=int, default=HALUMEM_SESSION_TOKENS,
                   help="synthetic dialogue length in characters/4 (default: the HaluMem sample's mean)")
    p.add_argument("--real-aux", action="store_true", help="CPU: MiniLM embedder and a torch NLI classifier")
    p.add_argument("--random-embedder", type=Path, metavar="DIR", help="build once and use a random MiniLM-shaped "
                   "sentence-transformers model (GPU stand-in for Qwen3-Embedding)")
    p.add_argument("--random-nli", type=Path, metavar="DIR", help="build once and use a random roberta-large-shaped "
                   "NLI classifier on torch")
    p.add_argument("--nli-pairs-per-second", action="store_true", help="only measure NLI pairs/s (--random-nli)")
    p.add_argument("--nli-pairs", type=int, default=2048)
    p.add_argument("--nli-batch-sizes", type=int, nargs="+")
    p.add_argument("--work-dir", type=Path, help="where unnamed random models go (default: a temporary folder)")
    p.add_argument("--cprofile", type=Path, metavar="FILE", help="profile the engine run into FILE (pstats)")
    p.add_argument("--out", type=Path, metavar="FILE.json")
    args = p.parse_args(argv)
    if args.model and (args.random_llama_8b or args.tiny):
        p.error("--model runs real weights; it excludes --random-llama-8b and --tiny")
    if args.backend == "scripted" and (args.model or args.random_llama_8b):
        p.error("--backend scripted takes no model")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("promem_fast").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _on_sigterm)
    with ExitStack() as stack:
        stack.enter_context(limit_threads(args.threads if args.threads is not None else int(args.tiny)))
        work = args.work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="promem-throughput-")))
        if args.synthetic:
            base = synthetic_sessions(min(args.sessions, 64), args.session_tokens)
            source = f"synthetic, {args.session_tokens} tokens (characters/4) asked per session"
        else:
            if not args.halumem.is_file():
                log.error("%s not found: pass --halumem PATH or --synthetic", args.halumem)
                return 2
            base = load_halumem_sessions(args.halumem)
            source = f"HaluMem sample {args.halumem.name}, {len(base)} sessions cycled"
        texts = corpus(base)
        if args.nli_pairs_per_second:
            result = measure_nli(args, base, texts, work)
            print(json.dumps(result["batches"], indent=2))
        else:
            setup = configure(args, texts, work)
            sessions = cycle(base, args.sessions)
            sizes = token_stats(base, setup.llm)
            engine, finished, profile = run(setup, sessions, args.cprofile)
            result = summarize(engine, setup, args, source, sizes, finished)
            print(render(result))
            if profile is not None:
                profile.sort_stats("tottime").print_stats(15)
            engine.close()
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            log.info("wrote %s", args.out)
    return 0 if result.get("finished", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
