"""LLMLingua-2 compression of turns (the paper's Appendix C) and the encoder attention of LightMem's coarse cut.

LLMLingua-2 is a token classifier (XLM-RoBERTa large or multilingual BERT fine-tuned on MeetingBank) whose label
1 means "keep this token". Compression keeps the words it is most sure of; LightMem reads the same encoder's
attention to find where a dialogue changes topic. One model, loaded once, serves both.

Why the model is called directly through transformers rather than through the ``llmlingua`` package:

* ``llmlingua.PromptCompressor`` builds a tiktoken encoder (``encoding_for_model("gpt-3.5-turbo")``) in its
  constructor, and tiktoken fetches that BPE file from OpenAI's storage on first use, so it cannot start on an
  offline machine even with the model in a local folder; it also imports nltk and adds 100 extra special tokens,
  resizing the embedding matrix of the model it loads.
* ``compress_prompt`` compresses one prompt per call (the contexts of a call are joined into one prompt), so
  the engine's one-call-for-all-sessions batch would become thousands of small forward passes.
* It does not expose attention; LightMem loads the encoder a second time to read it.

Here every text of a call is tokenised once (fast tokenizer, character offsets), cut into chunks of at most
the model's length, and the chunks of all texts are run sorted by length in padded batches under a token
budget. Only the local folder is read (hub access is switched off while loading).

Compression of one text
    The text is split into units: numbers with inner separators (``3.5``, ``2025-03-14``, ``10:30``), words
    with inner apostrophes or hyphens (``don't``, ``well-known``) and single punctuation marks. A unit's keep
    probability is the mean of the keep probability of the sub-word tokens that overlap it (LLMLingua-2's
    token-to-word rule), rounded to 1e-3 so that the float noise of different batch paddings cannot reorder
    words. ``rate × units`` rounded half up are kept (at least one): first the protected units, then the others by
    probability, ties by position; the kept units keep their original order. Newlines between kept units are
    kept, other gaps become one space, so the line structure of a message survives.

Protected units (always kept, even past the rate)
    * a unit equal, ignoring case, to a unit of a force token (``compression.force_tokens``);
    * a unit with a digit (numbers, times, dates, amounts);
    * a capitalised month or weekday name or abbreviation (``May``, ``Fri``), wherever it stands;
    * a capitalised unit that does not start a sentence (names, places, brands), except the pronoun ``I`` and
      its contractions. A sentence starts at the beginning of the text, after a newline, or after ``.``, ``!``,
      ``?`` or ``…`` (closing quotes and brackets in between are skipped). Languages that capitalise every noun
      (German) therefore compress less.

Sentence attention (LightMem)
    The sentences are encoded together as one sequence ``[CLS] s_1 ... s_n [SEP]``; when that is longer than
    the model allows, it is cut into windows of whole sentences, each window starting with the last sentence of
    the one before, so every pair of neighbours is read together. A sentence longer than half a window is cut
    to its first half-window of tokens. The attention of layers 8-11 (those of them the model has; its last
    four layers when it has fewer than nine) is averaged over layers and heads, the special tokens are masked,
    and the token-to-token weights are summed over the blocks of each pair of sentences, then each row is
    normalised to sum 1. A sentence with no tokens attends only to itself. The windows of one call run in
    padded batches sized by the memory their attention weights take (:data:`ATTENTION_BYTES`).
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from promem_fast.deps import require
from promem_fast.config import CompressionConfig
from promem_fast.errors import ConfigError
from promem_fast.models import entry, offline_env, registry

log = logging.getLogger(__name__)

DEFAULT_MODEL = "llmlingua-2-xlm-roberta-large-meetingbank"
"""Registry entry used when ``compression.model`` is not set."""
SMALL_MODEL = "llmlingua-2-bert-base-multilingual-cased-meetingbank"
"""The smaller, faster variant, named in the error when no model is found."""

KEEP_LABEL = 1
"""Index of the "keep" label of the LLMLingua-2 classifiers."""
ATTENTION_LAYERS = (8, 9, 10, 11)
"""Encoder layers whose attention LightMem reads (0-based)."""
BATCH_TOKENS = 16384
"""Padded tokens per forward pass of compression (e.g. 32 chunks of 512)."""
ATTENTION_BYTES = 1 << 30
"""Attention weights (all layers and heads, fp32) one batch of windows may return, e.g. two 512-token windows
of XLM-R large or seven of mBERT base."""
PROB_DECIMALS = 3
"""Keep probabilities are rounded to this many decimals before ranking (batch-independent ranking)."""

_UNIT = re.compile(r"\d+(?:[.,:/-]\d+)+|\w+(?:['’-]\w+)*|[^\w\s]")
_SENTENCE_END = frozenset(".!?…")
_CLOSERS = frozenset("\"'’”»)]}")
_CALENDAR = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec "
    "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun".split()
)
_POSSESSIVE = re.compile(r"['’]")


# --------------------------------------------------------------------------------------------- word rules
def split_units(text: str) -> list[tuple[int, int]]:
    """Character spans of the units (words, numbers, punctuation marks) compression keeps or drops."""
    return [m.span() for m in _UNIT.finditer(text)]


def sentence_starts(text: str, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Whether each unit begins a sentence: the first unit, after a newline, or after end punctuation."""
    starts = np.zeros(len(spans), dtype=bool)
    for u, (start, _) in enumerate(spans):
        if u == 0 or "\n" in text[spans[u - 1][1]:start]:
            starts[u] = True
            continue
        v = u - 1
        while v > 0 and text[spans[v][0]:spans[v][1]] in _CLOSERS:
            v -= 1
        starts[u] = text[spans[v][0]:spans[v][1]] in _SENTENCE_END
    return starts


def protected_units(text: str, spans: Sequence[tuple[int, int]], force: frozenset[str]) -> np.ndarray:
    """The units kept whatever the model says (force tokens, numbers, dates, names; rule in the module doc)."""
    first = sentence_starts(text, spans)
    out = np.zeros(len(spans), dtype=bool)
    for u, (start, end) in enumerate(spans):
        unit = text[start:end]
        base = _POSSESSIVE.split(unit, maxsplit=1)[0]
        capital = unit[0].isupper()
        out[u] = (unit.lower() in force
                  or any(c.isdigit() for c in unit)
                  or (capital and base.lower() in _CALENDAR)
                  or (capital and not first[u] and base != "I"))
    return out


def force_units(force_tokens: Sequence[str]) -> frozenset[str]:
    """Force tokens as lower-cased units (a multi-word force token forces each of its words)."""
    return frozenset(text[a:b].lower() for text in force_tokens for a, b in split_units(text))


def select_units(probs: np.ndarray, protected: np.ndarray, rate: float) -> np.ndarray:
    """Mask of kept units: the protected ones, then the most probable others up to ``rate * n`` (rounded half
    up, at least one)."""
    n = len(probs)
    keep = protected.copy()
    if n == 0:
        return keep
    room = max(1, int(rate * n + 0.5)) - int(protected.sum())
    if room > 0:
        free = np.flatnonzero(~protected)
        order = np.lexsort((free, -probs[free]))
        keep[free[order[:room]]] = True
    return keep


def join_units(text: str, spans: Sequence[tuple[int, int]], keep: np.ndarray) -> str:
    """The kept units in their original order: neighbours keep their original gap; across dropped units the
    gap becomes a newline if it held one, else a space (none between a word and punctuation that touched)."""
    pieces: list[str] = []
    prev = -1
    for u in np.flatnonzero(keep).tolist():
        start, end = spans[u]
        if prev >= 0:
            gap = text[spans[prev][1]:start]
            if u == prev + 1:
                pieces.append(gap)
            elif "\n" in gap:
                pieces.append("\n")
            elif any(c.isspace() for c in gap) or (text[start].isalnum() and text[spans[prev][1] - 1].isalnum()):
                pieces.append(" ")
        pieces.append(text[start:end])
        prev = u
    return "".join(pieces)


def chunk_bounds(new_unit: np.ndarray, sentence_break: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Token ranges of at most ``limit`` tokens, cut where a unit starts, preferably a sentence in the second
    half of the window; a unit longer than ``limit`` tokens is cut inside."""
    n = len(new_unit)
    bounds: list[tuple[int, int]] = []
    a = 0
    while n - a > limit:
        candidates = np.flatnonzero(new_unit[a + 1:a + limit + 1]) + a + 1
        late = candidates[sentence_break[candidates] & (candidates >= a + limit // 2)]
        b = int(late[-1]) if len(late) else int(candidates[-1]) if len(candidates) else a + limit
        bounds.append((a, b))
        a = b
    bounds.append((a, n))
    return bounds


def attention_windows(lengths: Sequence[int], limit: int) -> list[list[int]]:
    """Consecutive sentence indices packed into windows of at most ``limit`` tokens, each window after the
    first starting with the last sentence of the previous one (lengths must be at most ``limit // 2``)."""
    windows: list[list[int]] = []
    start = 0
    n = len(lengths)
    while True:
        window = [start]
        used = lengths[start]
        while window[-1] + 1 < n and used + lengths[window[-1] + 1] <= limit:
            window.append(window[-1] + 1)
            used += lengths[window[-1]]
        windows.append(window)
        if window[-1] == n - 1:
            return windows
        start = window[-1]


def _model_folder(model: str | None) -> Path:
    """The local model folder (a registry name or a path); the error says how to fetch one when there is none."""
    name = DEFAULT_MODEL if model is None else model
    if name in registry():
        found = entry(name).locate()
        if found is not None and (found / "config.json").is_file():
            return found
        raise ConfigError(f"compression.model: {name} is not on this machine (looked in {entry(name).local_path()}); "
                          f"get it with `promem models fetch {name}`")
    folder = Path(name)
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"compression.model: {name!r} is not a local LLMLingua-2 model folder (no config.json there); get one "
            f"with `promem models fetch {DEFAULT_MODEL}` (or {SMALL_MODEL}, smaller and faster) and set "
            "compression.model to it")
    return folder


# ------------------------------------------------------------------------------------------------ backend
class LLMLingua2Compressor:
    """LLMLingua-2 token classification in plain torch: ``compress`` and LightMem's ``sentence_attention``.

    fp16 on CUDA, fp32 on the CPU. Compression runs with the model's fast attention kernel; the attention read
    switches to the eager kernel for its pass, the only one that returns attention weights.
    """

    def __init__(self, config: CompressionConfig) -> None:
        self.torch: Any = require("torch", "cpu", package="torch==2.13.0")
        transformers: Any = require("transformers", "cpu")
        folder = _model_folder(config.model)
        self.device = "cuda" if self.torch.cuda.is_available() else "cpu"
        with offline_env():
            self.tokenizer: Any = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            model = transformers.AutoModelForTokenClassification.from_pretrained(str(folder), local_files_only=True)
        if model.config.num_labels != 2:
            raise ConfigError(f"compression.model: {folder} has {model.config.num_labels} labels; an LLMLingua-2 "
                              "classifier has two (drop, keep)")
        if not self.tokenizer.is_fast:
            raise ConfigError(f"compression.model: {folder} has no fast tokenizer (tokenizer.json), which the "
                              "character offsets need")
        model = model.half() if self.device == "cuda" else model.float()
        self.model: Any = model.to(self.device).eval()
        positions = int(model.config.max_position_embeddings)
        if model.config.model_type in ("roberta", "xlm-roberta"):
            positions -= int(model.config.pad_token_id) + 1  # these models number positions from pad_id + 1
        self.max_length = min(int(self.tokenizer.model_max_length), positions)
        """Tokens per sequence, the two special ones included."""
        layers = int(model.config.num_hidden_layers)
        self.layers = [i for i in ATTENTION_LAYERS if i < layers] or list(range(max(0, layers - 4), layers))
        """Layers whose attention ``sentence_attention`` averages."""
        self._bos = int(self.tokenizer.cls_token_id)
        self._eos = int(self.tokenizer.sep_token_id)
        self._pad = int(self.tokenizer.pad_token_id)
        log.info("LLMLingua-2 compressor %s on %s (max %d tokens, attention layers %s)", folder, self.device,
                 self.max_length, self.layers)

    # ----------------------------------------------------------------------------------- compression
    def compress(self, texts: Sequence[str], rate: float, force_tokens: Sequence[str] = ()) -> list[str]:
        """Each text with about ``rate`` of its units kept (protected units always; see the module doc)."""
        if not 0.0 < rate <= 1.0:
            raise ConfigError(f"compression rate must lie in (0, 1], got {rate}")
        if rate == 1.0 or not texts:
            return list(texts)
        force = force_units(force_tokens)
        spans = [split_units(t) for t in texts]
        probs = self.unit_probabilities(texts, spans)
        return [join_units(text, sp, select_units(p, protected_units(text, sp, force), rate))
                for text, sp, p in zip(texts, spans, probs)]

    def unit_probabilities(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
                           ) -> list[np.ndarray]:
        """Keep probability of every unit of every text: mean over its tokens, rounded (see the module doc)."""
        encoded = self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True,
                                 verbose=False)
        limit = self.max_length - 2
        chunks: list[tuple[int, int, int]] = []
        owners: list[tuple[np.ndarray, np.ndarray]] = []
        for index, (text, sp) in enumerate(zip(texts, spans)):
            token_pos, unit_pos, opens = _token_units(encoded["offset_mapping"][index], sp)
            new_unit = opens >= 0
            sentence_break = new_unit & sentence_starts(text, sp)[np.maximum(opens, 0)] if sp else new_unit
            owners.append((token_pos, unit_pos))
            chunks.extend((index, a, b) for a, b in chunk_bounds(new_unit, sentence_break, limit) if b > a)
        token_probs = [np.zeros(len(ids), np.float32) for ids in encoded["input_ids"]]
        for batch in self._batches(chunks):
            probs = self._keep_probs([encoded["input_ids"][i][a:b] for i, a, b in batch])
            for row, (i, a, b) in enumerate(batch):
                token_probs[i][a:b] = probs[row, 1:1 + b - a]
        out = []
        for (token_pos, unit_pos), tp, sp in zip(owners, token_probs, spans):
            total = np.zeros(len(sp), np.float64)
            count = np.zeros(len(sp), np.float64)
            np.add.at(total, unit_pos, tp[token_pos])
            np.add.at(count, unit_pos, 1.0)
            out.append(np.round(np.divide(total, count, out=np.zeros_like(total), where=count > 0), PROB_DECIMALS))
        return out

    def _batches(self, chunks: list[tuple[int, int, int]]) -> Iterator[list[tuple[int, int, int]]]:
        """Chunks longest first, grouped so rows × padded length stays within :data:`BATCH_TOKENS`."""
        ordered = sorted(chunks, key=lambda c: c[1] - c[2])
        batch: list[tuple[int, int, int]] = []
        for chunk in ordered:
            width = (batch[0][2] - batch[0][1] + 2) if batch else 0
            if batch and (len(batch) + 1) * width > BATCH_TOKENS:
                yield batch
                batch = []
            batch.append(chunk)
        if batch:
            yield batch

    def _keep_probs(self, rows: list[list[int]]) -> np.ndarray:
        """(rows, width) keep probabilities of ``[CLS] row [SEP]`` sequences padded on the right."""
        torch = self.torch
        ids, mask = self._padded(rows)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits
            return torch.softmax(logits.float(), dim=-1)[..., KEEP_LABEL].cpu().numpy()

    def _padded(self, rows: list[list[int]]) -> tuple[Any, Any]:
        """``[CLS] row [SEP]`` sequences padded on the right, and their attention mask, as device tensors."""
        width = max(len(r) for r in rows) + 2
        ids = np.full((len(rows), width), self._pad, np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for k, row in enumerate(rows):
            ids[k, :len(row) + 2] = [self._bos, *row, self._eos]
            mask[k, :len(row) + 2] = 1
        return self.torch.from_numpy(ids).to(self.device), self.torch.from_numpy(mask).to(self.device)

    # ------------------------------------------------------------------------------------- attention
    def sentence_attention(self, sentences: Sequence[str]) -> np.ndarray:
        """(n, n) row-normalised sentence-to-sentence attention of layers 8-11 (see the module doc)."""
        n = len(sentences)
        if n == 0:
            return np.zeros((0, 0), np.float32)
        limit = self.max_length - 2
        ids = [row[:limit // 2] for row in
               self.tokenizer(list(sentences), add_special_tokens=False, verbose=False)["input_ids"]]
        windows = [w for w in attention_windows([len(r) for r in ids], limit) if any(ids[s] for s in w)]
        per_window = self._per_window_bytes(limit + 2)
        matrix = np.zeros((n, n), np.float64)
        with self._eager():
            step = max(1, ATTENTION_BYTES // per_window)
            for first in range(0, len(windows), step):
                group = windows[first:first + step]
                rows = [[t for s in window for t in ids[s]] for window in group]
                for window, att in zip(group, self._token_attention(rows)):
                    members = np.repeat(np.arange(len(window)), [len(ids[s]) for s in window])
                    onehot = np.zeros((len(members), len(window)), np.float64)
                    onehot[np.arange(len(members)), members] = 1.0
                    matrix[np.ix_(window, window)] += onehot.T @ att @ onehot
        totals = matrix.sum(axis=1)
        empty = totals <= 0
        matrix[empty, :] = 0.0
        matrix[empty, np.flatnonzero(empty)] = 1.0
        totals[empty] = 1.0
        return (matrix / totals[:, None]).astype(np.float32)

    def _per_window_bytes(self, width: int) -> int:
        """Memory of the attention weights one window of ``width`` tokens returns (every layer, every head)."""
        config = self.model.config
        return int(config.num_hidden_layers) * int(config.num_attention_heads) * width * width * 4

    def _token_attention(self, rows: list[list[int]]) -> list[np.ndarray]:
        """For each row, the (len, len) attention among its tokens in ``[CLS] row [SEP]`` (special tokens
        masked), averaged over the chosen layers and all heads; the rows run as one padded batch."""
        torch = self.torch
        ids, mask = self._padded(rows)
        with torch.inference_mode():
            attentions = self.model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
            mean = torch.stack([attentions[i].float() for i in self.layers]).mean(dim=(0, 2)).cpu().numpy()
        return [mean[k, 1:len(row) + 1, 1:len(row) + 1].astype(np.float64) for k, row in enumerate(rows)]

    @contextmanager
    def _eager(self) -> Iterator[None]:
        """Run the block with the eager attention kernel (the fast ones return no weights), then switch back.

        transformers before ``set_attn_implementation`` existed fell back to eager by itself when asked for
        attention weights, so there is nothing to switch there."""
        kernel = self.model.config._attn_implementation
        if kernel == "eager" or not hasattr(self.model, "set_attn_implementation"):
            yield
            return
        self.model.set_attn_implementation("eager")
        try:
            yield
        finally:
            self.model.set_attn_implementation(kernel)


def _token_units(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which units each token overlaps, as parallel (token, unit) index arrays, and for each token the unit it
    opens (the first unit it touches when no earlier token touched it; -1 otherwise): the places a chunk may
    be cut without splitting a unit."""
    starts = [s for s, _ in spans]
    ends = [e for _, e in spans]
    token_pos: list[int] = []
    unit_pos: list[int] = []
    opens = np.full(len(offsets), -1, np.int64)
    seen = -1
    for t, (s, e) in enumerate(offsets):
        lo, hi = bisect.bisect_right(ends, s), bisect.bisect_left(starts, e)
        if e <= s or lo >= hi:
            continue
        if lo > seen:
            opens[t] = lo
        seen = max(seen, hi - 1)
        token_pos.extend([t] * (hi - lo))
        unit_pos.extend(range(lo, hi))
    return np.asarray(token_pos, np.int64), np.asarray(unit_pos, np.int64), opens
