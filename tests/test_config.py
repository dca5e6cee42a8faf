"""The configuration: paper defaults, files, --set overrides, profiles, per-role models, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import scripted_config
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.cli import main
from promem_fast.config import EngineConfig, LLMConfig
from promem_fast.engine import Engine
from promem_fast.errors import ConfigError, MissingDependency


def test_defaults_are_the_papers_where_it_gives_one() -> None:
    c = EngineConfig()
    assert c.pipeline.tau_comp == 0.6 and c.qa_top_k == 20
    assert c.pipeline.relation_types == ("causal", "temporal")
    # the paper follows LightMem's segmentation; ours is an embedding cut of our own unless LightMem's is asked for
    assert c.pipeline.segmenter == "similarity"
    assert (c.pipeline.theta_start, c.pipeline.theta_step, c.pipeline.theta_max) == (0.2, 0.05, 0.5)
    assert c.pipeline.mode == "promem"
    assert all([c.pipeline.completeness_check, c.pipeline.hallucination_verification, c.pipeline.detail_anchoring,
                c.pipeline.relations])
    assert (c.llm.backend, c.nli.backend, c.embedder.backend) == ("llamacpp", "llm", "sentence-transformers")


@pytest.mark.parametrize("suffix,text", [
    (".yaml", "profile: scripted\npipeline:\n  tau_comp: 0.5\n  relations: false\nroles:\n  draft: {temperature: 0.2}\n"),
    (".toml", 'profile = "scripted"\n[pipeline]\ntau_comp = 0.5\nrelations = false\n[roles.draft]\ntemperature = 0.2\n'),
    (".json", '{"profile": "scripted", "pipeline": {"tau_comp": 0.5, "relations": false},'
              ' "roles": {"draft": {"temperature": 0.2}}}'),
])
def test_config_files(tmp_path: Path, suffix: str, text: str) -> None:
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    c = EngineConfig.load(path)
    assert c.llm.backend == "scripted" and c.pipeline.tau_comp == 0.5 and c.pipeline.relations is False
    assert c.llm_for("draft").temperature == 0.2 and c.llm_for("draft").backend == "scripted"
    assert c.llm_for("event") is c.llm


@pytest.mark.parametrize("assignment,message", [
    ("pipeline.tau_comp=high", "must be a number"),
    ("pipeline.nope=1", "unknown config field 'pipeline.nope'"),
    ("roles.writer.model=x", "unknown role 'writer'"),
    ("pipeline.relations=maybe", "true or false"),
    ("tau", "section.field=value"),
])
def test_bad_overrides_name_the_field(assignment: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig().with_overrides([assignment])


def test_a_backend_is_any_name_the_registry_has_and_an_unknown_one_is_refused_by_field() -> None:
    """A package that registers a backend (the entry-point group, or ``register``) is chosen by name in the config,
    as the product's own are; a name nobody registered is refused when the services are made, before any model
    loads, naming the field and the names there are."""
    from promem_fast.backends import BackendSpec, register
    from promem_fast.services import Services

    register([BackendSpec("similarity", "vendor-sim", "vendor_pkg.sim:VendorSimilarity", None, "a plugin's")])
    chosen = Services(EngineConfig.profile("scripted").with_overrides(["similarity.backend=vendor-sim"]))
    assert chosen.config.similarity.backend == "vendor-sim"
    with pytest.raises(ConfigError, match=r"^llm\.backend: unknown llm backend 'gpt5'; available: llamacpp, "):
        Services(EngineConfig().with_overrides(["llm.backend=gpt5"]))
    with pytest.raises(ConfigError, match=r"^roles\.qa\.backend: unknown llm backend 'gpt5'"):
        Services(EngineConfig().with_overrides(["roles.qa.backend=gpt5"]))
    with pytest.raises(ConfigError, match=r"^similarity\.backend: unknown similarity backend 'gpu'"):
        Services(EngineConfig().with_overrides(["similarity.backend=gpu"]))


def test_range_checks() -> None:
    with pytest.raises(ConfigError, match="tau_comp"):
        EngineConfig().with_overrides(["pipeline.tau_comp=1.5"]).validate()
    with pytest.raises(ConfigError, match="unknown profile"):
        EngineConfig.profile("tpu")
    with pytest.raises(ConfigError, match=r"roles.judge.prefix_state_mib must be >= 0"):
        EngineConfig().with_overrides(["roles.judge.prefix_state_mib=-1"]).validate()


def test_resolve_applies_profile_file_overrides_then_flags_in_that_order(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pipeline:\n  tau_comp: 0.5\n  relations: false\nmax_in_flight: 7\n")
    c = EngineConfig.resolve(profile="scripted", file=path, overrides=["pipeline.tau_comp=0.4"],
                             run={"max_in_flight": 3, "compression": {"enabled": True, "rate": 0.5}})
    assert (c.llm.backend, c.nli.backend, c.embedder.backend) == ("scripted", "lexical", "hashing")  # the profile
    assert c.pipeline.relations is False  # the file, on the profile
    assert c.pipeline.tau_comp == 0.4  # --set over the file
    assert c.max_in_flight == 3 and (c.compression.enabled, c.compression.rate) == (True, 0.5)  # flags last
    alone = EngineConfig.resolve(file=path)
    assert alone.llm.backend == "llamacpp" and alone.max_in_flight == 7 and alone.pipeline.tau_comp == 0.5


@pytest.mark.parametrize(("run", "message"), [
    ({"max_in_flight": -1}, r"max_in_flight must be >= 0 \(0: auto\)"),
    ({"on_error": "maybe"}, "command line: on_error = 'maybe'; choose one of"),
    ({"compression": {"rate": 1.5}}, "compression.rate must lie in"),
])
def test_resolve_refuses_a_bad_flag_naming_it(run: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig.resolve(profile="scripted", run=run)


def test_a_validated_config_changed_afterwards_is_checked_again() -> None:
    """The engine, the store and the Ray driver skip the checks of a config already validated, but only while
    it is unchanged: a field set by hand after :meth:`EngineConfig.resolve` is still caught."""
    c = EngineConfig.resolve(profile="scripted")
    assert c.validate() is c
    c.pipeline.tau_comp = 1.5
    with pytest.raises(ConfigError, match="tau_comp"):
        c.validate()
    with pytest.raises(ConfigError, match="tau_comp"):
        Engine(c)


def test_gpu_profile_sets_every_backend() -> None:
    g = EngineConfig.profile("gpu")
    assert (g.llm.backend, g.llm.model) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
    assert (g.nli.backend, g.nli.device, g.nli.fp16) == ("onnx", "cuda", True)
    assert g.embedder.model.startswith("Qwen/Qwen3-Embedding") and g.similarity.device == "cuda"


def test_a_role_override_gets_its_own_backend(maya) -> None:  # type: ignore[no-untyped-def]
    cfg = scripted_config()
    cfg.roles["draft"] = LLMConfig(backend="scripted", context_length=8192, seed=7)
    engine = Engine(cfg)
    engine.extract([maya])
    draft, event = engine.services.llm("draft"), engine.services.llm("event")
    assert draft is not event and isinstance(draft, ScriptedLLM)
    assert len(draft.calls) == 1 and sum(draft.calls) == 1  # only the draft went to the override
    assert engine.services.llm("detail") is event


def test_missing_optional_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)
    cfg = EngineConfig.profile("scripted")
    cfg.llm = LLMConfig(backend="vllm", model="x")
    with pytest.raises(MissingDependency, match=r"pip install 'promem-fast\[gpu\]'"):
        Engine(cfg).services.llm("draft")


def test_config_command_prints_the_effective_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--profile", "scripted", "--set", "pipeline.tau_comp=0.55"]) == 0
    out = capsys.readouterr().out
    assert '"tau_comp": 0.55' in out and '"backend": "scripted"' in out
