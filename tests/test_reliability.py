"""Fault injection: malformed replies, backend faults, context limits, fuzzed input. Nothing is lost silently."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import tomas_sessions, make_session, scripted_config
from faulty import RAISE_FAULTS, REPLY_FAULTS, FaultyLLM, corrupt
from promem_fast.backends.base import NLIResult
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.testing.nli_lexical import LexicalNLI
from promem_fast.engine import Engine
from promem_fast.errors import InputError, SessionFailed
from promem_fast.io import session_from_dict
from promem_fast.parsing import dominant_script, parse_reply
from promem_fast.pipeline.completeness import Candidate
from promem_fast.pipeline.verify import verify_entries
from promem_fast.pipeline.views import DialogueView
from promem_fast.prompts import schema_for
from promem_fast.requests import ReplyError


@pytest.fixture(scope="module")
def sample() -> list:  # type: ignore[type-arg]
    return tomas_sessions()


def clean_lines(sessions: list) -> list[str]:  # type: ignore[type-arg]
    return [g.to_json(timings=False) for g in Engine(scripted_config()).extract(sessions)]


def test_strictly_repairable_faults_change_nothing(sample: list) -> None:  # type: ignore[type-arg]
    llm = FaultyLLM(["prose", "fence"], rate=0.5, sticky=1.0)
    graphs = Engine(scripted_config(), llm=llm).extract(sample)
    assert sum(llm.injected.values()) > 20
    strip = [json.loads(line) for line in clean_lines(sample)]
    for graph, clean in zip(graphs, strip):
        got = json.loads(graph.to_json(timings=False))
        assert got["nodes"] == clean["nodes"] and got["edges"] == clean["edges"] and got["details"] == clean["details"]
        assert not graph.stats.failures
    assert sum(g.stats.counts.get("repaired_replies", 0) for g in graphs) == sum(llm.injected.values())


def test_every_fault_kind_is_survived_and_accounted_for(sample: list) -> None:  # type: ignore[type-arg]
    llm = FaultyLLM([*REPLY_FAULTS, *RAISE_FAULTS], rate=0.45, sticky=0.4)  # a session sends ~16 requests now
    cfg = scripted_config(max_attempts=3)
    graphs = Engine(cfg, llm=llm).extract(sample)
    assert [g.session_id for g in graphs] == [s.session_id for s in sample]  # no session lost
    assert set(llm.injected) == set(REPLY_FAULTS) | set(RAISE_FAULTS)
    failures = [f for g in graphs for f in g.stats.failures]
    assert failures, "sticky faults must end as recorded failures"
    for f in failures:
        assert f.error and f.stage in {"draft", "cc", "hv", "da", "rel"}
        assert f.raw or f.error.startswith(("RuntimeError", "TimeoutError"))  # raw reply kept when there was one
    for graph in graphs:
        assert graph.nodes, "a session keeps what was verified"
        for node in graph.nodes:
            assert dominant_script(node.text) != "CJK"  # other-language replies are never stored
        n = len(graph.nodes)
        assert all(0 <= e.source < n and 0 <= e.target < n for e in graph.edges)
        assert graph.stats.counts.get("failed_steps", 0) == len(graph.stats.failures)


def test_faults_are_reproducible(sample: list) -> None:  # type: ignore[type-arg]
    def run() -> list[str]:
        llm = FaultyLLM([*REPLY_FAULTS, *RAISE_FAULTS], rate=0.45, sticky=0.4)  # a session sends ~16 requests now
        return [g.to_json(timings=False) for g in Engine(scripted_config(), llm=llm).extract(sample[:4])]

    assert run() == run()


@pytest.mark.parametrize("kind", REPLY_FAULTS)
def test_each_malformed_reply_is_repaired_or_rejected(kind: str) -> None:
    relations = json.dumps({"links": [[0, "causal", 1]]})
    schema = schema_for("relation", n_events=3, relation_types=["causal"])
    damaged = corrupt(kind, relations)
    try:
        value, _ = parse_reply(damaged, schema)
    except ReplyError:
        assert kind in ("truncated", "non_json", "empty", "wrong_types", "other_language")
        return
    # whatever parsed is a subset of the true answer: nothing was invented
    assert all(link == [0, "causal", 1] for link in value["links"])


def test_a_turn_longer_than_the_context_is_windowed_not_cut() -> None:
    import re

    from promem_fast.testing.llm_scripted import ScriptedLLM

    cfg = scripted_config()
    cfg.llm.context_length = 1700
    words = " ".join(f"I visited Town{i} in {2000 + i}." for i in range(300))
    session = make_session("long-turn", "Ann", [(words, "Wow.")])
    seen: list[str] = []

    def towns(fields: dict[str, str]) -> dict[str, Any]:
        found = re.findall(r"Town\d+", fields["text"])  # the window of the turn this request shows
        seen.append(fields["text"])
        return {"details": [found[0], found[-1]] if found else []}  # one turn asked: one flat list

    graph = Engine(cfg, llm=ScriptedLLM(cfg.llm, rules={"detail": towns})).extract([session])[0]
    assert graph.stats.counts.get("windowed_turns", 0) >= 1
    assert len(seen) > 1 and all(len(s) < len(words) for s in seen)
    assert not [f for f in graph.stats.failures if "ContextOverflow" in f.error]
    assert {"Town0", "Town299"} <= {d.text for d in graph.details}  # the start and the end both reached the model


def test_a_10_mb_turn_is_rejected_by_validation_with_its_field() -> None:
    record = {"session_id": "huge", "user": "Ann", "turns": [{"role": "user", "text": "x" * 10_000_000}]}
    with pytest.raises(InputError) as info:
        session_from_dict(record, file="in.jsonl", line=7)
    assert info.value.field == "turns[0].text" and info.value.line == 7 and info.value.session_id == "huge"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["session_id", "user", "turns", "messages", "role", "text", "content", "turn_id",
                         "timestamp", "owner_role", "metadata", "x"]), children, max_size=6),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_the_validator_never_crashes_on_arbitrary_json(record: Any) -> None:
    try:
        session = session_from_dict(record, file="fuzz.jsonl", line=1)
    except InputError as exc:
        assert exc.file == "fuzz.jsonl" and exc.line == 1 and exc.message
        return
    assert session.turns and all(t.text.strip() for t in session.turns)


def test_statement_check_strips_list_marks_and_drops_echoed_format_words() -> None:
    from promem_fast.pipeline.common import statements

    check = statements("facts", "Maya moved to Lisbon in May and adopted a dog named Rex.")
    value, notes = check({"facts": ["1. Maya moved to Lisbon in May.", "- Maya adopted a dog named Rex.",
                                    "Maya runs 2.5 km daily.", "sentence", "Lisbon, May"]})
    # numbering and bullets are formatting: removed; a number inside a statement stays; the copied
    # format word and the two-word fragment go
    assert value["facts"] == ["Maya moved to Lisbon in May.", "Maya adopted a dog named Rex.", "Maya runs 2.5 km daily."]
    assert any("numbering" in n for n in notes) and any("dropped 2" in n for n in notes)
    with pytest.raises(ReplyError):
        check({"facts": ["sentence", "sentence"]})


class _NLIFailingOn(LexicalNLI):
    """The lexical NLI, except that any batch holding a hypothesis with ``word`` raises (a flaky model)."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def entail(self, pairs: Sequence[tuple[str, str]]) -> list[NLIResult]:
        if any(self.word in hypothesis for _, hypothesis in pairs):
            raise RuntimeError("NLI model crashed")
        return super().entail(pairs)


def _verify(entries: list[Candidate], *, nli: Any = None, **rules: Any) -> tuple[list[Any], Any]:
    """Run hallucination verification on two turns of Maya's; the nodes and the run's statistics."""
    session = make_session("s", "Maya", [("I adopted a beagle named Biscuit in March.", "Nice!"),
                                         ("I moved to Lisbon for a job at Nordvik Labs.", "Great.")])
    engine = Engine(scripted_config(), llm=ScriptedLLM(rules=rules), nli=nli)
    turn_of = np.array([i % 2 for i in range(len(entries))], np.int64)

    def make(ctx: Any) -> Any:
        def program() -> Any:
            nodes, _ = yield from verify_entries(DialogueView.of(session), session.turn_groups(), entries, turn_of,
                                                 np.ones(len(entries), np.float32), ctx, True)
            return nodes, ctx.stats
        return program()

    ((_, value),) = list(engine.run([("s", make)]))
    assert not isinstance(value, BaseException), value
    return value


def test_a_failed_nli_check_keeps_the_entry_as_unverified_with_its_failure() -> None:
    entries = [Candidate("Maya adopted a beagle named Biscuit.", "draft"),
               Candidate("Maya moved to Lisbon for a job at Nordvik Labs.", "draft")]
    nodes, stats = _verify(entries, nli=_NLIFailingOn("Lisbon"))
    assert [(n.text, n.verification) for n in nodes] == [("Maya adopted a beagle named Biscuit.", "entailed"),
                                                         ("Maya moved to Lisbon for a job at Nordvik Labs.",
                                                          "unverified")]
    assert [f.item for f in stats.failures] == ["Maya moved to Lisbon for a job at Nordvik Labs."]
    assert stats.counts["hv_unverified"] == 1


def test_a_failed_decomposition_keeps_the_entry_as_unverified() -> None:
    entries = [Candidate("Maya adopted Biscuit and bought a sailboat.", "draft")]
    nodes, stats = _verify(entries, decompose=lambda f: "no JSON here")
    assert [(n.text, n.verification) for n in nodes] == [("Maya adopted Biscuit and bought a sailboat.", "unverified")]
    assert [(f.role, f.item) for f in stats.failures] == [("decompose", "Maya adopted Biscuit and bought a sailboat.")]


def test_a_failed_adjudication_keeps_the_fact_and_only_an_explicit_discard_removes_one() -> None:
    entries = [Candidate("Maya adopted Biscuit and sold a yacht.", "draft"),              # turn 0
               Candidate("Maya moved to Lisbon and bought a sailboat.", "draft")]         # turn 1
    facts = {entries[0].text: ["Maya adopted Biscuit.", "Maya sold a yacht."],
             entries[1].text: ["Maya moved to Lisbon.", "Maya bought a sailboat."]}

    def adjudicate(fields: dict[str, str]) -> Any:
        return {"action": "DISCARD", "revised_fact": None} if "yacht" in fields["fact"] else "no JSON here"

    nodes, stats = _verify(entries, decompose=lambda f: {"facts": facts[f["entry"]]}, adjudicate=adjudicate)
    kept = {(n.text, n.verification) for n in nodes}
    assert ("Maya bought a sailboat.", "unverified") in kept  # the adjudicator failed: kept, marked
    assert not any("yacht" in text for text, _ in kept)         # the adjudicator said DISCARD: removed
    assert [f.item for f in stats.failures] == ["Maya bought a sailboat."]
    assert stats.counts["discarded"] == 1 and stats.counts["hv_unverified"] == 1


def test_a_revise_without_a_revised_fact_keeps_the_fact_as_unverified() -> None:
    """Only DISCARD removes content: a REVISE that brings no text is a reply that did not do its job."""
    entries = [Candidate("Maya adopted Biscuit and sold a yacht.", "draft")]
    facts = {entries[0].text: ["Maya adopted Biscuit.", "Maya sold a yacht."]}

    def adjudicate(fields: dict[str, str]) -> Any:
        return {"action": "REVISE", "revised_fact": "  " if "yacht" in fields["fact"] else None}

    nodes, stats = _verify(entries, decompose=lambda f: {"facts": facts[f["entry"]]}, adjudicate=adjudicate)
    kept = {(n.text, n.verification) for n in nodes}
    assert ("Maya sold a yacht.", "unverified") in kept
    assert "discarded" not in stats.counts and "Maya sold a yacht." in [f.item for f in stats.failures]


class _SimilarityDown:
    """A similarity backend that always fails: grounding cannot finish, so each session's program crashes."""

    def top1(self, pairs: Sequence[Any]) -> list[Any]:
        raise RuntimeError("similarity backend down")


def test_under_stop_a_crashed_session_is_reported_then_ends_the_run(sample: list) -> None:  # type: ignore[type-arg]
    config = scripted_config()
    config.on_error, config.max_failed_batches = "stop", 1000
    engine = Engine(config, similarity=_SimilarityDown())
    reported: list[str] = []
    engine.on_session_error = lambda session, error: reported.append(session.session_id)
    with pytest.raises(SessionFailed) as info:
        list(engine.extract_stream(sample[:3]))
    assert reported == [sample[0].session_id]  # written to the rejects before the run stops
    assert sample[0].session_id in str(info.value) and "similarity backend down" in str(info.value.__cause__)
