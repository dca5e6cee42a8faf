"""The driver: batching across sessions, order and determinism, bounded window, fault isolation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from conftest import Recording, make_session, scripted_config, tomas_sessions
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.embed_hashing import HashingEmbedder
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.testing.nli_lexical import LexicalNLI
from promem_fast.engine import Engine
from promem_fast.errors import BackendUnavailable
from promem_fast.requests import Failure, Generate
from promem_fast.types import Session


def sessions(n: int, distinct: int = 3) -> list[Session]:
    base = tomas_sessions(distinct)
    out = []
    for i in range(n):
        s = base[i % len(base)]
        out.append(Session(session_id=f"{s.session_id}#{i}", user=s.user, turns=s.turns, timestamp=s.timestamp))
    return out


def extract(n: int, distinct: int = 3, **config: Any) -> tuple[list[str], Engine, dict[str, Recording]]:
    cfg = scripted_config()
    for key, value in config.items():
        setattr(cfg, key, value)
    backends = {"llm": Recording(ScriptedLLM(cfg.llm), "generate"), "nli": Recording(LexicalNLI(), "entail"),
                "embedder": Recording(HashingEmbedder(cfg.embedder), "embed")}
    engine = Engine(cfg, **backends)
    lines = [g.to_json(timings=False) for g in engine.extract(sessions(n, distinct))]
    return lines, engine, backends


def test_output_is_identical_whatever_the_batch_size_or_window() -> None:
    reference, _, _ = extract(6)
    for window, batch in [(1, 4096), (2, 3), (4, 1), (6, 7)]:
        lines, _, _ = extract(6, max_in_flight=window, max_batch_size=batch)
        assert lines == reference, (window, batch)


def round_config() -> Any:
    cfg = scripted_config()
    cfg.driver = "round"
    return cfg


def test_backend_calls_grow_with_pipeline_steps_not_sessions_in_rounds() -> None:
    """Twelve different sessions (not copies of one, which would take the same path by construction) run
    together by the round driver take as many rounds and generate calls as the longest of them alone, and
    those calls carry every session's requests."""
    alone = []
    for session in tomas_sessions():
        llm = Recording(ScriptedLLM(scripted_config().llm), "generate")
        engine = Engine(round_config(), llm=llm)
        engine.extract([session])
        alone.append((engine.summary.rounds, len(llm.batches), sum(llm.batches)))
    assert len(set(alone)) > 1  # the sessions do take different paths
    cfg = round_config()
    cfg.max_in_flight = 12
    llm = Recording(ScriptedLLM(cfg.llm), "generate")
    together = Engine(cfg, llm=llm)
    together.extract(tomas_sessions())
    assert together.summary.rounds == max(rounds for rounds, _, _ in alone)
    assert len(llm.batches) == max(calls for _, calls, _ in alone)
    assert sum(llm.batches) == sum(requests for _, _, requests in alone)


def test_window_bounds_sessions_in_flight() -> None:
    seen: list[int] = []

    class Probe(ScriptedLLM):
        def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
            seen.append(len({r.messages[1]["content"].split("\n")[1] for r in requests if "Dialogue:" in
                             r.messages[1]["content"]}))
            return super().generate(requests)

    cfg = scripted_config()
    cfg.max_in_flight = 3
    Engine(cfg, llm=Probe(cfg.llm)).extract(sessions(10))
    assert max(seen) <= 3


def test_graphs_come_out_in_input_order_even_when_later_sessions_finish_first() -> None:
    short = make_session("short", "Ann", [("I like tea.", "ok")])
    long = sessions(1)[0]
    engine = Engine(scripted_config())
    ids = [g.session_id for g in engine.extract_stream([long, short, long.__class__(
        session_id="long2", user=long.user, turns=long.turns)])]
    assert ids == [long.session_id, "short", "long2"]


class Flaky(ScriptedLLM):
    """Raises for any batch containing a poisoned prompt, like a backend choking on one request."""

    def __init__(self, poison: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.poison = poison
        self.failed_batches: list[int] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if any(self.poison in m["content"] for r in requests for m in r.messages):
            self.failed_batches.append(len(requests))
            raise RuntimeError("CUDA out of memory (simulated)")
        return super().generate(requests)


def test_a_failing_request_is_isolated_and_the_rest_of_the_batch_finishes() -> None:
    bad = make_session("bad", "Ann", [("I keep a POISON pill in my drawer.", "Hm.")])
    good = [make_session(f"g{i}", "Ben", [(f"I visited Oslo in {m}.", "Nice.")]) for i, m in enumerate(["May", "June"])]
    llm = Flaky("POISON")
    engine = Engine(scripted_config(), llm=llm)
    graphs = engine.extract([good[0], bad, good[1]])
    assert [g.session_id for g in graphs] == ["g0", "bad", "g1"]
    reference = Engine(scripted_config()).extract(good)
    assert [g.to_json(timings=False) for g in (graphs[0], graphs[2])] == [g.to_json(timings=False) for g in reference]
    failures = graphs[1].stats.failures
    assert failures and all("out of memory" in f.error for f in failures)
    assert {f.role for f in failures} >= {"draft", "detail"}
    assert 1 in llm.failed_batches and max(llm.failed_batches) > 1  # split down to the single request


def test_a_dead_backend_stops_the_run_with_a_clear_error() -> None:
    class Dead(ScriptedLLM):
        def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
            raise ConnectionError("server went away")

    cfg = scripted_config()
    engine = Engine(cfg, llm=Dead(cfg.llm))
    with pytest.raises(BackendUnavailable, match="server went away"):
        engine.extract(sessions(2))


def test_replies_that_never_parse_are_retried_then_recorded_with_the_raw_text() -> None:
    attempts: list[tuple[int, float]] = []

    class Garbled(ScriptedLLM):
        def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
            out = super().generate(requests)
            for i, r in enumerate(requests):
                if (parse_rendered(r.messages) or ("?",))[0] == "draft":
                    attempts.append((r.seed, r.temperature))
                    out[i] = Completion("I'm sorry, I cannot help with that.", 10, 8)
            return out

    cfg = scripted_config(max_attempts=3)
    graph = Engine(cfg, llm=Garbled(cfg.llm)).extract([make_session("s", "Ann", [("I like tea.", "ok")])])[0]
    assert attempts == [(0, 0.0), (1, cfg.llm.retry_temperature), (2, cfg.llm.retry_temperature)]
    (failure,) = [f for f in graph.stats.failures if f.role == "draft"]
    assert failure.raw == ["I'm sorry, I cannot help with that."] * 3
    assert "no JSON" in failure.error
    assert graph.stats.stages["draft"].calls == 3


def test_a_crashing_program_loses_only_its_own_session() -> None:
    cfg = scripted_config()
    engine = Engine(cfg)

    def ok(ctx: Any) -> Any:
        (value,) = yield [Generate(stage="qa", role="probe", messages=({"role": "system", "content": "x"},
                                                                       {"role": "user", "content": "y"}),
                                   schema={"type": "object"}, max_tokens=8)]
        return value

    def broken(ctx: Any) -> Any:
        yield [Generate(stage="qa", role="probe", messages=({"role": "system", "content": "x"},
                                                            {"role": "user", "content": "y"}),
                        schema={"type": "object"}, max_tokens=8)]
        raise KeyError("bug")

    out = list(engine.run([("a", ok), ("b", broken), ("c", ok)]))
    assert [k for k, _ in out] == ["a", "b", "c"]
    assert isinstance(out[1][1], KeyError) and out[0][1] == {} and out[2][1] == {}


def test_prompts_over_the_context_fail_before_sending_and_the_draft_is_rechunked() -> None:
    cfg = scripted_config()
    cfg.llm.context_length = 1500  # the draft prompt without dialogue takes about 350 tokens, its reply 1,024
    long = make_session("long", "Ann", [(f"I visited city number {i} called Town{i} in year {2000 + i}.", "Nice.")
                                        for i in range(60)])
    llm = ScriptedLLM(cfg.llm)
    graph = Engine(cfg, llm=llm).extract([long])[0]
    assert graph.stats.counts["draft_chunks"] > 1
    assert not [f for f in graph.stats.failures if "ContextOverflow" in f.error]
    towns = {w for n in graph.nodes for w in n.text.replace(".", " ").split() if w.startswith("Town")}
    assert len(towns) >= 25  # facts from all over the session, not just the part that fits one prompt


def test_failure_objects_reach_the_program() -> None:
    cfg = scripted_config()
    cfg.llm.context_length = 64
    engine = Engine(cfg)

    def program(ctx: Any) -> Any:
        (value,) = yield [Generate(stage="qa", role="probe", messages=({"role": "system", "content": "x" * 400},
                                                                       {"role": "user", "content": "y"}),
                                   schema={"type": "object"}, max_tokens=8, item="too long")]
        return value

    ((_, value),) = list(engine.run([("a", program)]))
    assert isinstance(value, Failure) and value.error.startswith("ContextOverflow") and value.item == "too long"
