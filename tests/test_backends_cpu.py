"""CPU backends: FAISS / torch top-1 search against a numpy reference, MiniLM embeddings (sentence-transformers
and ONNX Runtime), and the error a missing optional library gives."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from promem_fast.backends import create
from promem_fast.config import EmbedderConfig, NLIConfig, SimilarityConfig
from promem_fast.errors import MissingDependency

SIMILARITY_BACKENDS = ("numpy", "faiss", "torch")


TIE = 1e-5
"""Scores within this of the best count as ties (the backends' documented rule)."""


def reference_top1(queries: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The contract spelled out in numpy: argmax of Q @ K.T, the first index among ties.

    Computed in float64 so identical key rows get identical scores (float32 BLAS can round them apart
    depending on their position), then argmax of "within TIE of the row maximum" (argmax takes the first).
    """
    m = queries.shape[0]
    if keys.shape[0] == 0:
        return np.full(m, -1, dtype=np.int64), np.full(m, -np.inf, dtype=np.float32)
    scores = queries.astype(np.float64) @ keys.astype(np.float64).T
    best = scores.max(axis=1)
    index = (scores >= best[:, None] - TIE).argmax(axis=1)
    return index.astype(np.int64), best.astype(np.float32)


def normalised(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def random_pairs(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Mixed shapes: plain random rows, coarse grids (many exact ties), duplicated keys, empty sides."""
    rng = np.random.default_rng(seed)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(40):
        m, n, d = int(rng.integers(0, 30)), int(rng.integers(0, 50)), int(rng.choice([3, 8, 32]))
        style = rng.integers(0, 3)
        if style == 0:
            q, k = normalised(rng, m, d), normalised(rng, n, d)
        elif style == 1:  # values on a 1/4 grid: inner products are exact, so ties are real ties
            q = rng.integers(-2, 3, (m, d)).astype(np.float32) / 4
            k = rng.integers(-2, 3, (n, d)).astype(np.float32) / 4
        else:  # duplicated key rows, queries equal to keys: the best score is shared by several indices
            base = normalised(rng, max(1, n // 3), d)
            k = base[rng.integers(0, base.shape[0], n)]
            q = k[rng.integers(0, n, m)] if n else normalised(rng, m, d)
        pairs.append((q, k))
    return pairs


@pytest.fixture(scope="module", params=SIMILARITY_BACKENDS)
def similarity(request: pytest.FixtureRequest) -> Any:
    return create("similarity", request.param, SimilarityConfig(backend=request.param, device="cpu"))


def assert_matches_reference(backend: Any, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    results = backend.top1(pairs)
    assert len(results) == len(pairs)
    for position, ((q, k), (index, score)) in enumerate(zip(pairs, results, strict=True)):
        want_index, want_score = reference_top1(q, k)
        assert index.dtype == np.int64 and score.dtype == np.float32, position
        assert index.shape == (q.shape[0],) and score.shape == (q.shape[0],), position
        np.testing.assert_array_equal(index, want_index, err_msg=f"pair {position}")
        np.testing.assert_allclose(score, want_score, rtol=0, atol=1e-5, err_msg=f"pair {position}")


@pytest.mark.parametrize("seed", range(4))
def test_top1_matches_numpy_reference(similarity: Any, seed: int) -> None:
    assert_matches_reference(similarity, random_pairs(seed))


def test_top1_ties_beyond_first_candidates(similarity: Any) -> None:
    """Hundreds of identical keys: the lowest index must win even though FAISS returns only a few."""
    rng = np.random.default_rng(7)
    row = normalised(rng, 1, 16)
    keys = np.concatenate([normalised(rng, 5, 16) * 0.1, np.repeat(row, 300, axis=0)])
    queries = np.concatenate([row, row, normalised(rng, 3, 16)])
    assert_matches_reference(similarity, [(queries, keys)])
    index, _ = similarity.top1([(queries, keys)])[0]
    assert index[0] == 5 and index[1] == 5


def test_top1_empty_sides(similarity: Any) -> None:
    rng = np.random.default_rng(1)
    keys = normalised(rng, 4, 8)
    empty_keys = np.zeros((0, 8), dtype=np.float32)
    results = similarity.top1([(np.zeros((0, 8), np.float32), keys), (normalised(rng, 3, 8), empty_keys),
                               (np.zeros((0, 8), np.float32), empty_keys)])
    assert [r[0].shape for r in results] == [(0,), (3,), (0,)]
    np.testing.assert_array_equal(results[1][0], [-1, -1, -1])
    assert np.all(np.isneginf(results[1][1]))
    assert similarity.top1([]) == []


def test_top1_shared_keys_and_odd_layouts(similarity: Any) -> None:
    """The same key array in several pairs (FAISS stacks their queries), float64 and strided inputs."""
    rng = np.random.default_rng(3)
    keys = normalised(rng, 40, 16)
    pairs = [(normalised(rng, int(m), 16), keys) for m in (1, 7, 0, 12)]
    pairs.append((normalised(rng, 5, 16).astype(np.float64), keys[::2]))
    pairs.append((np.asfortranarray(normalised(rng, 6, 16)), keys))
    assert_matches_reference(similarity, pairs)


def test_top1_many_similar_pairs(similarity: Any) -> None:
    """Many pairs of close shapes (the torch backend pads those into one bmm)."""
    rng = np.random.default_rng(11)
    pairs = [(normalised(rng, 20 + i % 3, 32), normalised(rng, 30 + i % 4, 32)) for i in range(64)]
    assert_matches_reference(similarity, pairs)


def test_top1_rejects_bad_shapes(similarity: Any) -> None:
    with pytest.raises(ValueError, match="differs"):
        similarity.top1([(np.zeros((2, 4), np.float32), np.zeros((3, 5), np.float32))])
    with pytest.raises(ValueError, match="2-D"):
        similarity.top1([(np.zeros(4, np.float32), np.zeros((3, 4), np.float32))])


# ------------------------------------------------------------------------------------------ embeddings
RANKING = ("I adopted a puppy", "I got a new dog", "The stock market fell")
TEXTS = (
    "I adopted a puppy",
    "I got a new dog",
    "The stock market fell",
    "My sister is moving to Berlin next month for her new job at a design studio.",
    "ok",
    "",
    "  leading and trailing spaces  ",
    "Das Wetter ist heute schön.",
    " ".join(["a long turn that runs past the model's sequence limit"] * 60),
)


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """ONNX exports go to a temporary models/ folder, not the checkout."""
    folder = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMEM_MODELS_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def st_embedder() -> Any:
    pytest.importorskip("sentence_transformers")
    return create("embedder", "sentence-transformers", EmbedderConfig(device="cpu", batch_size=4))


@pytest.fixture(scope="module")
def onnx_embedder(onnx_cache: Path) -> Any:
    pytest.importorskip("onnxruntime")
    return create("embedder", "onnx", EmbedderConfig(backend="onnx", device="cpu", batch_size=4))


@pytest.mark.slow
def test_minilm_rows_are_unit_norm(st_embedder: Any) -> None:
    vectors = st_embedder.embed(list(TEXTS))
    assert vectors.shape == (len(TEXTS), st_embedder.dim) == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("embedder_name", ["st_embedder", "onnx_embedder"])
def test_similar_sentences_rank_first(embedder_name: str, request: pytest.FixtureRequest) -> None:
    embedder = request.getfixturevalue(embedder_name)
    puppy, dog, market = embedder.embed(list(RANKING))
    assert puppy @ dog > puppy @ market + 0.2


@pytest.mark.slow
@pytest.mark.parametrize("embedder_name", ["st_embedder", "onnx_embedder"])
def test_batching_and_order_do_not_change_vectors(embedder_name: str, request: pytest.FixtureRequest,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = request.getfixturevalue(embedder_name)
    texts = list(TEXTS)
    together = embedder.embed(texts)
    monkeypatch.setattr(embedder, "batch_size", 1)
    one_by_one = embedder.embed(texts)
    monkeypatch.setattr(embedder, "batch_size", 64)
    permutation = np.random.default_rng(0).permutation(len(texts))
    shuffled = embedder.embed([texts[i] for i in permutation])
    np.testing.assert_allclose(one_by_one, together, atol=1e-5)
    np.testing.assert_allclose(shuffled, together[permutation], atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("embedder_name", ["st_embedder", "onnx_embedder"])
def test_empty_input_and_query_prompt(embedder_name: str, request: pytest.FixtureRequest,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = request.getfixturevalue(embedder_name)
    empty = embedder.embed([])
    assert empty.shape == (0, embedder.dim) and empty.dtype == np.float32
    plain = embedder.embed_queries(["where does my sister live"])
    np.testing.assert_allclose(plain, embedder.embed(["where does my sister live"]), atol=1e-6)
    monkeypatch.setattr(embedder, "query_prompt", "query: ")
    prompted = embedder.embed_queries(["where does my sister live"])
    np.testing.assert_allclose(prompted, embedder.embed(["query: where does my sister live"]), atol=1e-6)
    assert float(prompted[0] @ plain[0]) < 0.9999


@pytest.mark.slow
def test_onnx_embedder_matches_sentence_transformers(st_embedder: Any, onnx_embedder: Any) -> None:
    expected = st_embedder.embed(list(TEXTS))
    got = onnx_embedder.embed(list(TEXTS))
    assert got.shape == expected.shape and got.dtype == np.float32
    cosines = np.sum(expected * got, axis=1)
    assert np.all(cosines >= 1 - 1e-4), cosines


@pytest.mark.slow
def test_onnx_export_is_cached(onnx_embedder: Any, onnx_cache: Path) -> None:
    exports = list(onnx_cache.glob("onnx-cache/*/model.onnx"))
    assert len(exports) == 1
    stamp = exports[0].stat().st_mtime_ns
    again = create("embedder", "onnx", EmbedderConfig(backend="onnx", device="cpu"))
    assert exports[0].stat().st_mtime_ns == stamp
    np.testing.assert_allclose(again.embed(["same model"]), onnx_embedder.embed(["same model"]), atol=1e-6)


# --------------------------------------------------------------------------------- missing dependencies
def _build(kind: str, name: str, config: Any) -> Callable[[], Any]:
    return lambda: create(kind, name, config)


@pytest.mark.parametrize(
    ("module", "build"),
    [
        ("faiss", _build("similarity", "faiss", SimilarityConfig(backend="faiss"))),
        ("torch", _build("similarity", "torch", SimilarityConfig(backend="torch"))),
        ("sentence_transformers", _build("embedder", "sentence-transformers", EmbedderConfig())),
        ("onnxruntime", _build("embedder", "onnx", EmbedderConfig(backend="onnx"))),
        ("onnxruntime", _build("nli", "onnx", NLIConfig(backend="onnx", model=os.devnull))),
        ("transformers", _build("nli", "torch", NLIConfig(backend="torch", model=os.devnull))),
    ],
)
def test_missing_library_names_the_extra(module: str, build: Callable[[], Any],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(MissingDependency) as caught:
        build()
    message = str(caught.value)
    assert "pip install 'promem-fast[cpu]'" in message and repr(module) in message


def test_message_cache_computes_once_and_drops_the_least_recently_used() -> None:
    from promem_fast.backends._message_cache import MessageCache

    seen: list[str] = []

    def size(messages: Any, date: str | None) -> int:
        seen.append(messages[0]["content"])
        return len(messages[0]["content"])

    cache = MessageCache(size, size=2)
    ask = [{"role": "user", "content": text} for text in ("a", "bb", "ccc")]
    assert [cache([ask[0]]), cache([ask[1]]), cache([ask[0]])] == [1, 2, 1]
    cache([ask[2]])  # "bb" was used least recently: it goes, "a" stays
    assert [cache([ask[0]]), cache([ask[1]])] == [1, 2]
    assert seen == ["a", "bb", "ccc", "bb"]
