"""LLMLingua-2 compression and LightMem's attention coarse cut, on a tiny random model built here.

The tiny model's keep probabilities are random, so the tests check the contract (rate, protected words, order,
batch independence, matrix shape and normalisation) and the engine's use of both switches, not the quality of
what is kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from conftest import Recording, halumem_sessions, make_session, scripted_config
from promem_fast.testing.tiny_compressor import TINY_COMPRESSOR_MAX_LENGTH, build_tiny_token_classifier

from promem_fast.backends.base import Compressor, GenerationRequest
from promem_fast.backends.compress_llmlingua import (
    LLMLingua2Compressor, attention_windows, chunk_bounds, join_units, protected_units, select_units, split_units,
)
from promem_fast.testing.embed_hashing import HashingEmbedder
from promem_fast.testing.llm_scripted import ScriptedLLM, shown_text
from promem_fast.testing.nli_lexical import LexicalNLI
from promem_fast.config import CompressionConfig, EngineConfig
from promem_fast.engine import Engine
from promem_fast.errors import ConfigError
from promem_fast.pipeline.segment import coarse_boundaries, combine_boundaries
from promem_fast.testing.llm_scripted import parse_rendered
from promem_fast.types import MemoryGraph, Session


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The tiny model's ops take microseconds; with several threads each op waits until all of them are
    scheduled, which on a busy machine costs milliseconds per op. One thread for this module, then restored."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_token_classifier(tmp_path_factory.mktemp("tiny-llmlingua2"))


@pytest.fixture(scope="module")
def compressor(tiny_model: Path) -> LLMLingua2Compressor:
    return LLMLingua2Compressor(CompressionConfig(model=str(tiny_model)))


def units(text: str) -> list[str]:
    return [text[a:b] for a, b in split_units(text)]


def is_subsequence(part: Sequence[str], whole: Sequence[str]) -> bool:
    it = iter(whole)
    return all(any(u == w for w in it) for u in part)


def long_messages(min_units: int = 50) -> list[str]:
    """The messages of the first HaluMem session with at least ``min_units`` units (15 of its 30)."""
    return [t.text for t in halumem_sessions(1)[0].turns if len(split_units(t.text)) >= min_units]


# ------------------------------------------------------------------------------------------ word rules
def test_protected_units_are_force_tokens_numbers_dates_and_names() -> None:
    text = ("The dog may sleep. I met Ana in Lisbon on Friday, May 3 at 10:30.\nMarch was cold and "
            "I'm sure Biscuit's vet costs $40 (\"Nordvik\" too).")
    protected = {u for u, p in zip(units(text), protected_units(text, split_units(text), frozenset({"dog"}))) if p}
    assert {"dog", "Ana", "Lisbon", "Friday", "May", "3", "10:30", "March", "Biscuit's", "40", "Nordvik"} <= protected
    # sentence-initial capitals, the pronoun I, lower-case "may" and plain words are not protected
    assert not protected & {"The", "I", "I'm", "may", "sleep", "met", "was", "cold", "vet"}


def test_join_keeps_order_newlines_and_original_gaps() -> None:
    text = "Hello, dear world.\nNew line: 3.5 km, well-known."
    spans = split_units(text)
    assert units(text) == ["Hello", ",", "dear", "world", ".", "New", "line", ":", "3.5", "km", ",", "well-known", "."]
    keep = np.zeros(len(spans), bool)
    keep[[0, 3, 4, 6, 8, 11]] = True
    assert join_units(text, spans, keep) == "Hello world.\nline 3.5 well-known"
    assert join_units(text, spans, np.ones(len(spans), bool)) == text


def test_selection_keeps_protected_then_most_probable_in_order() -> None:
    probs = np.array([0.1, 0.9, 0.2, 0.8, 0.5, 0.5, 0.0, 0.3])
    protected = np.array([False, False, False, False, False, False, True, False])
    keep = select_units(probs, protected, 0.5)  # 4 of 8: the protected one, then 0.9, 0.8, the first 0.5
    assert np.flatnonzero(keep).tolist() == [1, 3, 4, 6]
    everything = np.ones(8, bool)
    assert select_units(probs, everything, 0.25).all()  # protected units go past the rate


def test_chunks_cover_the_tokens_within_the_limit_at_unit_starts() -> None:
    rng = np.random.default_rng(0)
    new_unit = rng.random(500) < 0.6
    new_unit[0] = True
    sentence = new_unit & (rng.random(500) < 0.1)
    bounds = chunk_bounds(new_unit, sentence, 64)
    assert bounds[0][0] == 0 and bounds[-1][1] == 500
    assert all(b - a <= 64 for a, b in bounds)
    assert all(prev[1] == nxt[0] and new_unit[nxt[0]] for prev, nxt in zip(bounds, bounds[1:]))
    # one unit longer than the limit is cut inside it
    assert chunk_bounds(np.array([True] + [False] * 99), np.zeros(100, bool), 40) == [(0, 40), (40, 80), (80, 100)]


def test_attention_windows_overlap_by_one_sentence() -> None:
    lengths = [30, 40, 20, 50, 10, 60, 5]
    windows = attention_windows(lengths, 100)
    assert windows[0][0] == 0 and windows[-1][-1] == len(lengths) - 1
    assert all(sum(lengths[i] for i in w) <= 100 for w in windows)
    assert all(a[-1] == b[0] for a, b in zip(windows, windows[1:]))
    assert all(w == list(range(w[0], w[-1] + 1)) for w in windows)


# ----------------------------------------------------------------------------------------- compression
def test_compression_keeps_protected_words_at_a_low_rate(compressor: LLMLingua2Compressor) -> None:
    text = ("Yesterday I told my friend that I adopted a lovely beagle named Biscuit on Saturday, March 14, 2025, "
            "and that my sister Ana will move to Lisbon in May to work at Nordvik Labs for 3 years, which is "
            "honestly a very long time to be away from the family and the dog.")
    (out,) = compressor.compress([text], 0.2, force_tokens=["family"])
    kept = units(out)
    for word in ("Biscuit", "Saturday", "March", "14", "2025", "Ana", "Lisbon", "May", "Nordvik", "Labs", "3",
                 "family"):
        assert word in kept, (word, out)
    assert len(kept) < len(units(text)) and is_subsequence(kept, units(text))


def test_compression_meets_the_rate_and_keeps_word_order(compressor: LLMLingua2Compressor) -> None:
    texts = long_messages()
    assert len(texts) >= 5
    for rate in (0.4, 0.6, 0.8):
        for text, out in zip(texts, compressor.compress(texts, rate)):
            total, kept = units(text), units(out)
            n_protected = int(protected_units(text, split_units(text), frozenset()).sum())
            assert is_subsequence(kept, total)
            assert len(kept) == max(math.floor(rate * len(total) + 0.5), n_protected), (rate, text)
            if n_protected <= rate * len(total):
                assert abs(len(kept) / len(total) - rate) <= 0.1


def test_texts_longer_than_the_model_are_chunked(compressor: LLMLingua2Compressor) -> None:
    text = " ".join(long_messages())
    assert len(compressor.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]) > \
        3 * TINY_COMPRESSOR_MAX_LENGTH
    probs = compressor.unit_probabilities([text], [split_units(text)])[0]
    assert probs.shape == (len(split_units(text)),) and np.all((probs >= 0) & (probs <= 1))
    (out,) = compressor.compress([text], 0.5)
    assert is_subsequence(units(out), units(text))


def test_batch_equals_one_by_one(compressor: LLMLingua2Compressor) -> None:
    texts = [" ".join(long_messages()[:4]), *[t.text for t in halumem_sessions(2)[1].turns[:6]], "", "ok",
             "I moved to Lisbon in May."]
    batched = compressor.compress(texts, 0.5, force_tokens=["Lisbon"])
    assert batched == [compressor.compress([t], 0.5, force_tokens=["Lisbon"])[0] for t in texts]
    assert compressor.compress(texts, 1.0) == texts


def test_missing_model_names_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="promem models fetch llmlingua-2-"):
        LLMLingua2Compressor(CompressionConfig(model=str(tmp_path / "nowhere")))


# ------------------------------------------------------------------------------------------ coarse cut
def chain_attention(scores: Sequence[float]) -> np.ndarray:
    """Rows that put ``scores[i-1]`` on the previous sentence and the rest on the sentence itself."""
    n = len(scores) + 1
    matrix = np.eye(n, dtype=np.float32)
    for i, s in enumerate(scores, start=1):
        matrix[i, i - 1], matrix[i, i] = s, 1.0 - s
    return matrix


def test_coarse_cut_finds_the_peaks_of_a_built_attention_pattern() -> None:
    assert coarse_boundaries(chain_attention([0.1, 0.5, 0.1, 0.1, 0.7, 0.1, 0.1, 0.1, 0.3])) == [2, 5, 9]
    assert coarse_boundaries(chain_attention([0.6, 0.2, 0.2, 0.2])) == [1]
    assert coarse_boundaries(chain_attention([0.2, 0.2, 0.2, 0.2])) == []
    assert coarse_boundaries(chain_attention([0.9])) == []  # two sentences: nothing to compare


def test_combine_keeps_fine_cuts_near_coarse_ones() -> None:
    assert combine_boundaries([2, 6, 11, 15], [5, 14], within=3) == [2, 6, 11, 15]
    assert combine_boundaries([1, 6, 10, 15], [5], within=3) == [6]
    assert combine_boundaries([1, 6], [], within=3) == [1, 6]
    assert combine_boundaries([1, 2], [12], within=3) == [1, 2]  # none near: the fine cut stands


def test_attention_matrix_of_the_tiny_model(compressor: LLMLingua2Compressor) -> None:
    turns = [t.text for t in halumem_sessions(1)[0].turns]
    for sentences in (turns[:3], turns, [*turns[:2], "", turns[2]]):
        matrix = compressor.sentence_attention(sentences)
        n = len(sentences)
        assert matrix.shape == (n, n) and matrix.dtype == np.float32
        assert np.isfinite(matrix).all() and (matrix >= 0).all()
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
        if sentences is turns:  # the session spans many windows; every neighbour pair is still read together
            assert all(matrix[i, i - 1] > 0 for i in range(1, n))
    assert compressor.sentence_attention([]).shape == (0, 0)


def test_attention_does_not_depend_on_how_windows_are_batched(compressor: LLMLingua2Compressor,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import promem_fast.backends.compress_llmlingua as module

    turns = [t.text for t in halumem_sessions(1)[0].turns]
    together = compressor.sentence_attention(turns)
    monkeypatch.setattr(module, "ATTENTION_BYTES", 1)  # one window per forward pass
    np.testing.assert_allclose(compressor.sentence_attention(turns), together, atol=1e-5)


def test_xlm_roberta_shaped_model_with_fewer_layers(tmp_path: Path) -> None:
    """The default LLMLingua-2 model's shape: SentencePiece ``▁`` tokens, positions from pad_id + 1; with five
    layers the attention falls back to the last four."""
    folder = build_tiny_token_classifier(tmp_path, family="xlm-roberta", layers=5)
    xlmr = LLMLingua2Compressor(CompressionConfig(model=str(folder)))
    assert xlmr.layers == [1, 2, 3, 4] and xlmr.max_length == TINY_COMPRESSOR_MAX_LENGTH
    texts = [*long_messages()[:3], "I met Ana in Lisbon on Friday, May 3, at 10:30."]
    out = xlmr.compress(texts, 0.3)
    assert out == [xlmr.compress([t], 0.3)[0] for t in texts]
    assert all(is_subsequence(units(o), units(t)) for o, t in zip(out, texts))
    assert {"Ana", "Lisbon", "Friday", "May", "3", "10:30"} <= set(units(out[-1]))
    matrix = xlmr.sentence_attention(texts)
    assert matrix.shape == (4, 4)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)


# -------------------------------------------------------------------------------------------- engine
class FixedAttention:
    """A compressor whose attention is a built matrix (peaks where the test wants topic cuts)."""

    def __init__(self, scores: Sequence[float]) -> None:
        self.scores = list(scores)
        self.calls = 0

    def compress(self, texts: Sequence[str], rate: float, force_tokens: Sequence[str] = ()) -> list[str]:
        return list(texts)

    def sentence_attention(self, sentences: Sequence[str]) -> np.ndarray:
        self.calls += 1
        assert len(sentences) == len(self.scores) + 1
        return chain_attention(self.scores)


def run(sessions: list[Session], config: EngineConfig, compressor: Compressor) -> tuple[list[MemoryGraph], dict]:
    llm = Recording(ScriptedLLM(config.llm), "generate")
    nli = Recording(LexicalNLI(), "entail")
    embedder = Recording(HashingEmbedder(config.embedder), "embed")
    graphs = Engine(config, llm=llm, nli=nli, embedder=embedder, compressor=compressor).extract(sessions)
    return graphs, {"llm": llm, "nli": nli, "embedder": embedder}


def prompts(llm: Recording, role: str) -> list[dict[str, str]]:
    out = []
    for (requests,) in llm.calls:
        for request in requests:
            assert isinstance(request, GenerationRequest)
            parsed = parse_rendered(request.messages)
            if parsed is not None and parsed[0] == role:
                out.append(parsed[1])
    return out


def compression_config(enabled: bool, model: Path, speakers: str = "all", max_segment_tokens: int = 1024
                       ) -> EngineConfig:
    config = scripted_config()
    config.pipeline.max_segment_tokens = max_segment_tokens
    config.compression.enabled = enabled
    config.compression.rate = 0.5
    config.compression.model = str(model)
    config.compression.speakers = speakers  # type: ignore[assignment]
    return config


def with_and_without(which: str, maya: Session, tiny_model: Path, compressor: LLMLingua2Compressor, speakers: str,
                     max_segment_tokens: int = 1024
                     ) -> tuple[Session, Recording, tuple[MemoryGraph, dict], tuple[MemoryGraph, dict]]:
    """The session, the counting compressor, and the session's graph and backends without compression and
    with it (compressing ``speakers``' messages)."""
    session = {"maya": maya, "topics": make_session("topics", "Maya", TOPICS)}.get(which) or halumem_sessions(1)[0]
    counted = Recording(compressor, "compress")
    (plain,), plain_backends = run([session], compression_config(False, tiny_model, "all", max_segment_tokens),
                                   compressor)
    (small,), backends = run([session], compression_config(True, tiny_model, speakers, max_segment_tokens), counted)
    return session, counted, (plain, plain_backends), (small, backends)


@pytest.mark.parametrize("which", ["maya", "halumem"])
def test_compression_cuts_draft_tokens_but_details_and_grounding_see_the_original(
        which: str, maya: Session, tiny_model: Path, compressor: LLMLingua2Compressor) -> None:
    session, counted, (plain, plain_backends), (small, backends) = with_and_without(
        which, maya, tiny_model, compressor, "all")
    assert len(counted.calls) == 1  # every message of the session in one request
    counts = small.stats.counts
    assert 0 < counts["compression_tokens_after"] < counts["compression_tokens_before"]
    assert "compression_tokens_before" not in plain.stats.counts
    assert small.stats.stages["draft"].prompt_tokens < plain.stats.stages["draft"].prompt_tokens
    originals = [t.text for t in session.turns]
    # the draft read compressed text...
    dialogue = "\n".join(shown_text(p) for p in prompts(backends["llm"], "draft"))
    assert any(text not in dialogue for text in originals)
    # ...details, grounding embeddings and NLI premises read the original turns
    detail_text = "\n".join(shown_text(p) for p in prompts(backends["llm"], "detail"))
    assert all(text in detail_text for text in originals)
    assert [d.text for d in small.details] == [d.text for d in plain.details]
    embedded = {t for (texts,) in backends["embedder"].calls for t in texts}
    plain_embedded = {t for (texts,) in plain_backends["embedder"].calls for t in texts}
    turn_texts = [t for t in plain_embedded if t.startswith("[turn ")]
    assert turn_texts and set(turn_texts) <= embedded
    premises = [p for (pairs,) in backends["nli"].calls for p, _ in pairs]
    said = [re.sub(r" \((?:the week of )?\d{4}-\d{2}-\d{2}\)", "", p) for p in premises]  # resolved dates
    assert premises and all(any(text in p for text in originals) for p in said)
    turn_ids = {t.turn_id for t in session.turns}
    assert all(set(n.turn_ids) <= turn_ids for n in small.nodes)
    if which == "maya":  # one fact per turn survives compression: each still grounds in its own turn
        assert sorted(n.turn_ids for n in small.nodes) == sorted(n.turn_ids for n in plain.nodes)


@pytest.mark.parametrize("which", ["maya", "topics", "halumem"])
def test_compressing_the_other_speaker_keeps_the_owners_words_and_reads_details_from_the_block(
        which: str, maya: Session, tiny_model: Path, compressor: LLMLingua2Compressor) -> None:
    # segments capped short, so that capping on the compressed turns would cut the topics session differently
    session, counted, (plain, plain_backends), (small, backends) = with_and_without(
        which, maya, tiny_model, compressor, "other", max_segment_tokens=48)
    assert len(counted.calls) == 1
    sent = counted.calls[0][0]
    assistant = [t.text for t in session.turns if t.role != session.owner_role]
    owner = [t.text for t in session.turns if t.role == session.owner_role]
    assert list(sent) == assistant  # only the other speaker's messages go to the compressor
    counts = small.stats.counts
    assert 0 < counts["compression_tokens_after"] < counts["compression_tokens_before"]
    block = "\n".join(shown_text(p) for p in prompts(backends["llm"], "draft"))
    assert all(text in block for text in owner)  # the owner's words, verbatim
    assert any(text not in block for text in assistant)
    # details are asked from the block: the same requests as without compression, less the other's words
    details = prompts(backends["llm"], "detail")
    plain_details = prompts(plain_backends["llm"], "detail")
    assert len(details) == len(plain_details)
    assert [{k: v for k, v in f.items() if k != "dialogue"} for f in details] == \
        [{k: v for k, v in f.items() if k != "dialogue"} for f in plain_details]
    assert all(not f.get("text") for f in details)  # no original turn shown in the request itself
    assert small.stats.stages["da"].prompt_tokens < plain.stats.stages["da"].prompt_tokens
    assert [d.text for d in small.details] == [d.text for d in plain.details]
    assert small.stats.counts["segments"] == plain.stats.counts["segments"]  # topics cut on what was said
    assert sorted(n.text for n in small.nodes) == sorted(n.text for n in plain.nodes)


def test_the_paper_profile_compresses_every_speaker_and_gpu_the_other() -> None:
    assert EngineConfig.profile("paper").compression.speakers == "all"
    assert EngineConfig.profile("gpu").compression.speakers == "other"
    with pytest.raises(ConfigError, match="compression.speakers"):
        EngineConfig.from_dict({"compression": {"speakers": "owner"}})


TOPICS = [
    ("I adopted a beagle named Biscuit.", "Congratulations on the new puppy!"),
    ("Biscuit chews every shoe in the flat.", "Puppies chew a lot; try toys."),
    ("I bought Biscuit a rope toy.", "Rope toys are great for teething."),
    ("I moved to Lisbon in May.", "Lisbon is a lovely city."),
    ("My flat in Lisbon has a river view.", "A river view sounds wonderful."),
    ("The rent in Lisbon is high.", "Rents there have risen quickly."),
    ("I started a job at Nordvik Labs.", "Congratulations on the new job!"),
    ("My manager at Nordvik is kind.", "A kind manager makes a difference."),
    ("I run 5 km before work.", "Running before work is a good habit."),
    ("I signed up for a half marathon.", "Good luck with the training!"),
    ("My sister Ana cooks on Sundays.", "Family dinners are lovely."),
    ("Ana makes the best soup.", "Homemade soup is the best."),
]


def test_lightmem_segmenter_attends_once_per_session_and_follows_the_attention(tiny_model: Path,
                                                                             compressor: LLMLingua2Compressor) -> None:
    sessions = [make_session(f"topics-{i}", "Maya", TOPICS) for i in range(2)]

    def config(segmenter: str) -> EngineConfig:
        cfg = scripted_config(segmenter=segmenter, theta_start=0.99, theta_step=0.01, theta_max=0.99)
        cfg.compression.model = str(tiny_model)
        return cfg

    similarity, _ = run(sessions, config("similarity"), FixedAttention([0.1] * 11))
    assert all(g.stats.counts["segments"] == len(TOPICS) for g in similarity)  # every pair is a fine cut
    attention = FixedAttention([0.1, 0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1])
    lightmem, _ = run(sessions, config("lightmem"), attention)
    assert attention.calls == len(sessions)
    # one coarse peak at turn 6: only the fine cuts within 3 turns of it (3..9) are kept
    assert all(g.stats.counts["segments"] == 8 for g in lightmem)
    groups = {tuple(e.turn_ids) for e in lightmem[0].events}
    assert (0, 1, 2) in groups and (9, 10, 11) in groups

    counted = Recording(compressor, "sentence_attention")
    graphs, _ = run(sessions, config("lightmem"), counted)
    assert len(counted.calls) == len(sessions) and all(len(args[0]) == len(TOPICS) for args in counted.calls)
    assert all(g.stats.counts["segments"] >= 1 for g in graphs)


def test_calibration_drafts_from_the_compressed_turns_like_the_pipeline(maya: Session, tiny_model: Path,
                                                                       compressor: LLMLingua2Compressor) -> None:
    from promem_fast.calibration import candidates_program

    config = compression_config(True, tiny_model)
    llm = Recording(ScriptedLLM(config.llm), "generate")
    engine = Engine(config, llm=llm, compressor=compressor)
    ((_, value),) = list(engine.run([(maya.session_id, lambda ctx: candidates_program(maya, ctx))]))
    assert not isinstance(value, BaseException), value
    dialogue = "\n".join(shown_text(p) for p in prompts(llm, "draft"))
    assert any(t.text not in dialogue for t in maya.turns)
