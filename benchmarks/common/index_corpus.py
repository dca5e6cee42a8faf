"""Real dialogue sentences embedded with the shipped all-MiniLM-L6-v2: the corpus of ``bench_index.py``.

Sentences come from the Chit-Chat Challenge dataset (BYU PCC lab, MIT licence; the ``chitchat-dataset``
PyPI package ships it): 7,168 open-domain conversations between people, 258K messages, cut into sentences
and de-duplicated. The last 5% of conversations are held out; the queries are sentences of those (of four
words or more), so no query is in the index. Embedding runs until a time budget is spent (about 380
sentences per second on two shared cores here, so not all 265K fit in ten minutes) and writes what it has
as it goes; a rerun continues where the file ends.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from pathlib import Path

import numpy as np

from benchmarks.common.paths import ROOT

log = logging.getLogger(__name__)

CACHE = ROOT / "benchmarks" / ".cache" / "index_corpus"
HELD_OUT = 0.05
CHUNK = 4096
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _conversations() -> list[list[str]]:
    try:
        import chitchat_dataset
    except ImportError as exc:
        raise SystemExit("bench_index needs the chitchat-dataset package: pip install 'promem-fast[dev]'") from exc
    path = Path(chitchat_dataset.__file__).with_name("dataset.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    return [[u["text"] for turn in conversation["messages"] for u in turn] for conversation in data.values()]


def sentences(queries: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(index sentences in a fixed shuffled order, query sentences from the held-out conversations)."""
    conversations = _conversations()
    cut = int(len(conversations) * (1 - HELD_OUT))

    def split(messages: list[list[str]]) -> list[str]:
        found = (s.strip() for text in (m for c in messages for m in c) for s in SENTENCE_END.split(text))
        return list(dict.fromkeys(s for s in found if s))

    corpus, held = split(conversations[:cut]), split(conversations[cut:])
    seen = set(corpus)
    asked = [s for s in held if s not in seen and len(s.split()) >= 4]
    rng = random.Random(seed)
    rng.shuffle(corpus)
    rng.shuffle(asked)
    return corpus, asked[:queries]


def embedded(budget_s: float, queries: int = 1000) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """(corpus vectors, query vectors, facts): embeds more of the corpus for up to ``budget_s`` seconds."""
    from promem_fast.backends import create
    from promem_fast.config import EmbedderConfig

    CACHE.mkdir(parents=True, exist_ok=True)
    corpus, asked = sentences(queries)
    query_path = CACHE / "queries.npy"
    chunks = sorted(CACHE.glob("corpus-*.npy"))
    total = CHUNK * len(chunks)
    embedder = None
    started = time.perf_counter()
    spent = 0.0
    if not query_path.exists():
        embedder = create("embedder", "sentence-transformers", EmbedderConfig(batch_size=256))
        np.save(query_path, embedder.embed_queries(asked))
    while total < len(corpus) and time.perf_counter() - started < budget_s:
        if embedder is None:
            embedder = create("embedder", "sentence-transformers", EmbedderConfig(batch_size=256))
        t0 = time.perf_counter()
        block = embedder.embed(corpus[total:total + CHUNK])
        spent += time.perf_counter() - t0
        partial = CACHE / f"corpus-{total // CHUNK:05d}.npy.part"
        with partial.open("wb") as out:  # renamed when whole: a reader never sees half a chunk
            np.save(out, block)
        partial.rename(partial.with_suffix(""))
        total += len(block)
        log.info("embedded %d of %d sentences (%.0f s)", total, len(corpus), time.perf_counter() - started)
    vectors = np.concatenate([np.load(p) for p in sorted(CACHE.glob("corpus-*.npy"))])
    facts = {"sentences_available": len(corpus), "sentences_embedded": int(len(vectors)),
             "queries": int(len(asked)), "embed_seconds_this_run": round(spent, 1)}
    return vectors, np.load(query_path), facts


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds of embedding (default 600)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    _, _, facts = embedded(args.budget)
    print(facts)
