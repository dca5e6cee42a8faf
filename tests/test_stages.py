"""Each stage's logic on small hand-written inputs, driven through the engine with scripted replies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from conftest import make_session, scripted_config
from promem_fast.testing.embed_hashing import HashingEmbedder
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.engine import Engine
from promem_fast.pipeline.anchor import anchor_details
from promem_fast.pipeline.completeness import Candidate, check_completeness
from promem_fast.pipeline.common import without_dialogue
from promem_fast.pipeline.relations import verify_relations
from promem_fast.pipeline.segment import cap_tokens, fine_boundaries
from promem_fast.pipeline.verify import verify_entries
from promem_fast.pipeline.views import DialogueView
from promem_fast.types import Detail, Event, MemoryEntry


def run_one(engine: Engine, make: Any) -> Any:
    ((_, value),) = list(engine.run([("k", make)]))
    if isinstance(value, BaseException):
        raise value
    return value


def cosine(a: str, b: str) -> float:
    vecs = HashingEmbedder().embed([a, b])
    return float(vecs[0] @ vecs[1])


# ------------------------------------------------------------------------------------------ segmentation
def test_fine_cut_raises_theta_until_a_boundary_appears() -> None:
    # consecutive similarities 0.9, 0.45, 0.8: nothing is below 0.2..0.45, the first cut appears at 0.5
    sims = [0.9, 0.45, 0.8]
    vecs = [np.array([1.0, 0.0])]
    for s in sims:
        prev = vecs[-1]
        angle = np.arccos(s) + np.arctan2(prev[1], prev[0])
        vecs.append(np.array([np.cos(angle), np.sin(angle)]))
    v = np.stack(vecs).astype(np.float32)
    assert fine_boundaries(v, 0.2, 0.05, 0.5) == [2]
    assert fine_boundaries(v, 0.2, 0.05, 0.4) == []
    assert fine_boundaries(v, 0.2, 0.05, 0.95) == [2]  # the lowest threshold that cuts wins


def test_segments_are_capped_in_tokens() -> None:
    assert cap_tokens([[0, 1, 2, 3]], [5, 5, 5, 5].__getitem__, 10) == [[0, 1], [2, 3]]
    assert cap_tokens([[0, 1]], [50, 1].__getitem__, 10) == [[0], [1]]


# ------------------------------------------------------------------------------------------ CC
def test_completeness_recovers_exactly_the_events_at_or_under_tau() -> None:
    draft = ["Maya adopted a beagle named Biscuit.", "Maya works at Nordvik Labs in Lisbon."]
    events = [
        Event("Maya adopted a beagle named Biscuit.", 0, [0]),          # identical to a draft entry
        Event("Maya adopted a beagle and works at Nordvik Labs.", 0, [0]),  # partial overlap
        Event("Maya's sister Ana visits every month.", 1, [2]),           # missing from the draft
    ]
    best = [max(cosine(e.text, d) for d in draft) for e in events]
    assert best[0] > 0.99 and best[2] < 0.3
    tau = (best[1] + best[2]) / 2 if best[1] > best[2] else 0.6
    engine = Engine(scripted_config(tau_comp=tau))
    done = run_one(engine, lambda ctx: check_completeness(events, draft, ctx, recover=True))
    expected_missing = [e.text for e, b in zip(events, best) if b <= tau]
    assert [c.text for c in done.entries[2:]] == expected_missing
    assert all(c.origin == "recovered" for c in done.entries[2:])
    assert done.event_to_entry[0] == 0
    assert done.event_to_entry[2] == 2
    assert done.vectors.shape == (len(done.entries), HashingEmbedder().dim)

    # switched off: nothing appended, events still mapped onto their best entry
    off = run_one(engine, lambda ctx: check_completeness(events, draft, ctx, recover=False))
    assert [c.text for c in off.entries] == draft
    assert off.event_to_entry[0] == 0


# ------------------------------------------------------------------------------------------ HV
def test_hallucination_verification_keeps_splits_revises_and_discards() -> None:
    session = make_session("s", "Maya", [
        ("I adopted a beagle named Biscuit in March.", "Nice!"),
        ("I moved to Lisbon for a job at Nordvik Labs.", "Great."),
    ])
    groups = session.turn_groups()
    entries = [
        Candidate("Maya adopted a beagle named Biscuit.", "draft"),                    # entailed as a whole
        Candidate("Maya moved to Lisbon and bought a sailboat.", "draft"),             # one part supported
        Candidate("Maya adopted Biscuit in April.", "recovered"),                      # wrong month: revise
    ]
    decompositions = {
        "Maya moved to Lisbon and bought a sailboat.": ["Maya moved to Lisbon.", "Maya bought a sailboat."],
        "Maya adopted Biscuit in April.": ["Maya adopted Biscuit in April."],
    }
    asked: list[str] = []

    def adjudicate(fields: dict[str, str]) -> dict[str, Any]:
        asked.append(fields["fact"])
        if "April" in fields["fact"]:
            return {"action": "REVISE", "revised_fact": "Maya adopted Biscuit in March."}
        return {"action": "DISCARD", "revised_fact": None}

    llm = _Keeping(cut_first=False, rules={"decompose": lambda f: {"facts": decompositions[f["entry"]]},
                                           "adjudicate": adjudicate})
    engine = Engine(scripted_config(), llm=llm)
    turn_of = np.array([0, 1, 0], np.int64)
    score = np.array([0.9, 0.8, 0.7], np.float32)
    nodes, became = run_one(engine, lambda ctx: verify_entries(DialogueView.of(session), groups, entries, turn_of, score, ctx, True))
    texts = [(n.text, n.origin, n.verification) for n in nodes]
    assert texts == [
        ("Maya adopted a beagle named Biscuit.", "draft", "entailed"),
        ("Maya moved to Lisbon.", "draft", "atomic"),
        ("Maya adopted Biscuit in March.", "revised", "revised"),
    ]
    assert sorted(asked) == ["Maya adopted Biscuit in April.", "Maya bought a sailboat."]
    assert became == [[0], [1], [2]]
    assert nodes[1].parent == 1 and nodes[1].turn_ids == [1]
    assert nodes[2].turn_ids == [0]
    # the split sees the entry and its owner, not the session's dialogue (each token it writes would read it on
    # a GPU); the adjudicator is shown the fact and its turn, and reads them after the dialogue
    other = "I moved to Lisbon for a job at Nordvik Labs."
    assert all(other not in system and "Maya" in system for system in llm.systems["decompose"])
    assert all(other in system for system in llm.systems["adjudicate"])
    april = next(u for u in llm.users["adjudicate"] if "Maya adopted Biscuit in April." in u)
    assert "I adopted a beagle named Biscuit in March." in april and other not in april


def test_the_chat_model_as_nli_judge_reads_the_premise_not_the_dialogue() -> None:
    session = make_session("s", "Maya", [("I adopted a beagle named Biscuit.", "Nice!"),
                                          ("I moved to Lisbon for a job at Nordvik Labs.", "Great.")])
    config = scripted_config()
    config.nli.backend = "llm"
    llm = _Keeping(cut_first=False)
    entries = [Candidate("Maya adopted a beagle named Biscuit.", "draft")]
    nodes, _ = run_one(Engine(config, llm=llm), lambda ctx: verify_entries(
        DialogueView.of(session), session.turn_groups(), entries, np.zeros(1, np.int64), np.ones(1, np.float32),
        ctx, True))
    (system,), (user,) = llm.systems["nli"], llm.users["nli"]
    assert "Lisbon" not in system and "Lisbon" not in user  # the other turn is in no part of the judge's prompt
    assert "Maya said: I adopted a beagle named Biscuit." in user
    assert [n.verification for n in nodes] == ["entailed"]


def test_hv_switched_off_keeps_every_entry_unverified() -> None:
    session = make_session("s", "Maya", [("I like tea.", "ok")])
    entries = [Candidate("Maya likes tea.", "draft"), Candidate("Maya owns a boat.", "recovered")]
    engine = Engine(scripted_config())
    nodes, became = run_one(engine, lambda ctx: verify_entries(
        DialogueView.of(session), session.turn_groups(), entries, np.zeros(2, np.int64), np.ones(2, np.float32), ctx, False))
    assert [n.verification for n in nodes] == ["unverified", "unverified"]
    assert became == [[0], [1]]


# ------------------------------------------------------------------------------------------ REL
def _nodes(texts: list[str]) -> list[MemoryEntry]:
    return [MemoryEntry(id=i, text=t, origin="draft", verification="entailed", turn_ids=[i]) for i, t in enumerate(texts)]


class _RelationCase:
    """Four entries of Maya and six candidate edges: 0->1 causal (implicit: entry 3 says it), 1->2 temporal
    (unsupported), 0->2 causal (kept), plus a self-loop, a duplicate and an edge to a discarded entry (-1)."""

    session = make_session("s", "Maya", [
        ("I hurt my knee in March.", "Sorry to hear."),
        ("Because of the knee I switched to swimming.", "Smart."),
        ("I also like jazz.", "Cool."),
    ])
    texts = ["Maya hurt her knee.", "Maya switched to swimming.", "Maya likes jazz.",
             "Maya switched to swimming because of her knee."]

    @staticmethod
    def rules() -> dict[str, Any]:
        def probe(f: dict[str, str]) -> dict[str, str]:
            return {"question": f"Q[{f['source']}|{f['target']}]"}

        def answer_flat(f: dict[str, str]) -> dict[str, Any]:
            return {"answerable": f["question"] == "Q[Maya hurt her knee.|Maya switched to swimming.]"}

        def verify(f: dict[str, str]) -> dict[str, bool]:
            return {"supported": f["target"] != "Maya likes jazz." or f["source"] == "Maya hurt her knee."}

        return {"probe": probe, "answer_flat": answer_flat, "verify_relation": verify}

    def run(self, llm: ScriptedLLM) -> list[Any]:
        types = scripted_config().pipeline.relation_types
        rid = {t: i for i, t in enumerate(types)}
        src = np.array([0, 1, 0, 2, 0, 0], np.int64)
        rel = np.array([rid["causal"], rid["temporal"], rid["causal"], rid["causal"], rid["causal"], rid["causal"]])
        dst = np.array([1, 2, 2, 2, 2, -1], np.int64)
        engine = Engine(scripted_config(), llm=llm)
        return run_one(engine, lambda ctx: verify_relations(DialogueView.of(self.session), self.session.turn_groups(),
                                                            _nodes(self.texts), [0, 1, 2, 1], src, rel, dst, ctx))


def test_relation_verification_drops_implicit_and_unsupported_edges() -> None:
    case = _RelationCase()
    edges = case.run(ScriptedLLM(rules=case.rules()))
    assert [(e.source, e.relation, e.target) for e in edges] == [(0, "causal", 2)]
    assert edges[0].probe == "Q[Maya hurt her knee.|Maya likes jazz.]"


class _Keeping(ScriptedLLM):
    """The scripted model keeping each request's messages by role and the roles of each batch it was sent; its
    first verification reply leaves link 2 out (unless ``cut_first`` is false)."""

    def __init__(self, cut_first: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.cut_first = cut_first
        self.users: dict[str, list[str]] = {}
        self.systems: dict[str, list[str]] = {}
        self.batches: list[list[str]] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        self.batches.append([])
        for request in requests:
            role = (parse_rendered(request.messages) or ("?",))[0]
            self.batches[-1].append(role)
            self.users.setdefault(role, []).append(request.messages[1]["content"])
            self.systems.setdefault(role, []).append(request.messages[0]["content"])
            if role == "verify_relation" and len(self.users[role]) == 1 and self.cut_first:
                text = json.dumps({"0": True, "1": True})
                out.append(Completion(text=text, prompt_tokens=10, completion_tokens=20))
            else:
                out.extend(super().generate([request]))
        return out


def test_relation_checks_read_the_entries_once_and_the_dialogue_only_to_verify() -> None:
    case = _RelationCase()
    llm = _Keeping(rules=case.rules())
    edges = case.run(llm)
    assert [(e.source, e.relation, e.target) for e in edges] == [(0, "causal", 2)]
    (probe,), (flat,) = llm.users["probe"], llm.users["answer_flat"]
    first, again = llm.users["verify_relation"]  # the reply that left link 2 out was refused, and asked again
    assert first == again
    # the probe and the flat answer work from the entries: their block holds no dialogue; verification's does
    said = "I hurt my knee in March."
    assert said not in llm.systems["probe"][0] and said not in llm.systems["answer_flat"][0]
    assert said in llm.systems["verify_relation"][0]
    # verification goes out with the probe, so the session's cached dialogue is read by one wave after another
    assert llm.batches[0] == ["probe", "verify_relation"]
    entries = "\n".join(f"{i}. {t}" for i, t in enumerate(case.texts))
    # the probe and the flat answer open with the same entries; verification shows only the three its links
    # join (entry 3, in no link, is left out), by their numbers, then the probe's links
    for user in (probe, flat):
        assert user.startswith(f"Memory entries of Maya:\n{entries}\n\n")
    joined = "\n".join(f"{i}. {t}" for i, t in enumerate(case.texts[:3]))
    links = probe[probe.index("Proposed links"):probe.index("Task:")]
    assert first.startswith(f"Memory entries of Maya:\n{joined}\n\n{links}")
    questions = flat.split("Questions, by link number:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert questions == ["0. Q[Maya hurt her knee.|Maya switched to swimming.]",
                         "1. Q[Maya switched to swimming.|Maya likes jazz.]",
                         "2. Q[Maya hurt her knee.|Maya likes jazz.]"]
    # the links name entries by number, not by repeating their text
    assert links.split("Proposed links between entries:\n", 1)[1].strip().splitlines() == [
        "0. source: entry 0, target: entry 1, relation: causal (source leads to target)",
        "1. source: entry 1, target: entry 2, relation: temporal (source happens before target)",
        "2. source: entry 0, target: entry 2, relation: causal (source leads to target)"]
    # the flat answer sees the questions, never the proposed links
    assert "Proposed links" not in flat
    # verification asks about every link, by their numbers (the implicit 0 -> 1 is then dropped all the same)
    assert "Links to check: 0, 1, 2\n" in first


def test_without_the_dialogue_in_the_block_only_links_the_entries_do_not_answer_are_checked() -> None:
    """Each check then carries its own part of the dialogue, a request per link: the implicit 0 -> 1 gets none."""
    case = _RelationCase()
    llm = _Keeping(cut_first=False, rules=case.rules())
    types = scripted_config().pipeline.relation_types
    src, rel, dst = (np.array([0, 1, 0], np.int64), np.array([types.index("causal"), types.index("temporal"),
                                                               types.index("causal")]), np.array([1, 2, 2], np.int64))
    view = without_dialogue(DialogueView.of(case.session))
    edges = run_one(Engine(scripted_config(), llm=llm), lambda ctx: verify_relations(
        view, case.session.turn_groups(), _nodes(case.texts), [0, 1, 2, 1], src, rel, dst, ctx))
    assert [(e.source, e.relation, e.target) for e in edges] == [(0, "causal", 2)]
    assert [b for b in llm.batches if "verify_relation" in b][0] == ["verify_relation", "verify_relation"]
    checked = sorted(u.split("Links to check: ", 1)[1].split("\n", 1)[0] for u in llm.users["verify_relation"])
    assert checked == ["1", "2"]
    assert llm.batches.index(["probe"]) < llm.batches.index(["answer_flat"]) < len(llm.batches) - 1


class _ProbeFails(ScriptedLLM):
    """The scripted model whose probe replies are never valid JSON (as a reply stopped in a loop is not)."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        for request in requests:
            if (parse_rendered(request.messages) or ("?",))[0] == "probe":
                out.append(Completion(text='{"0": "what what what',
                                      prompt_tokens=10, completion_tokens=20, finish_reason="loop"))
            else:
                out.extend(super().generate([request]))
        return out


def test_a_link_whose_probe_failed_is_still_checked_against_the_dialogue() -> None:
    case = _RelationCase()
    edges = case.run(_ProbeFails(rules=case.rules()))
    # no question, so no necessity test: every cleaned link is kept on verification alone, which supports
    # 0 -> 1 and 0 -> 2 and not 1 -> 2 (the rule above); before, a failed probe dropped all three unchecked
    assert [(e.source, e.relation, e.target, e.probe) for e in edges] == [
        (0, "causal", 1, None), (0, "causal", 2, None)]


def test_a_link_whose_flat_answer_failed_is_still_checked_against_the_dialogue() -> None:
    case = _RelationCase()

    def unreadable(fields: dict[str, str]) -> str:
        return "yes"  # never the JSON asked for: the flat-answer request fails after its tries

    edges = case.run(ScriptedLLM(rules={**case.rules(), "answer_flat": unreadable}))
    # 0 -> 1 would have been implicit (entry 3 says it) and is kept on verification; each edge keeps its probe
    assert [(e.source, e.relation, e.target, e.probe) for e in edges] == [
        (0, "causal", 1, "Q[Maya hurt her knee.|Maya switched to swimming.]"),
        (0, "causal", 2, "Q[Maya hurt her knee.|Maya likes jazz.]")]


# ------------------------------------------------------------------------------------------ DA
def test_details_anchor_to_entries_grounded_in_the_same_turn() -> None:
    details = [Detail("Biscuit", 0), Detail("beagle", 0), Detail("Lisbon", 1), Detail("Ana", 2)]
    nodes = [MemoryEntry(0, "a", "draft", "entailed", [1]), MemoryEntry(1, "b", "draft", "entailed", [0]),
             MemoryEntry(2, "c", "draft", "entailed", [0]), MemoryEntry(3, "d", "draft", "entailed", [])]
    engine = Engine(scripted_config())
    anchored = run_one(engine, lambda ctx: anchor_details(details, nodes, {0: 0, 1: 1, 2: 2}))
    assert [n.details for n in nodes] == [[2], [0, 1], [0, 1], []]
    assert anchored == 3  # "Ana" (turn 2) has no entry


# ------------------------------------------------------------------------------------------ whole session
def test_full_session_statistics_add_up(maya: Any) -> None:
    engine = Engine(scripted_config())
    (graph,) = engine.extract([maya])
    c = graph.stats.counts
    assert c["nodes"] == len(graph.nodes) > 0
    assert c["details"] == len(graph.details)
    assert c["draft_entries"] + c.get("recovered", 0) == c["hv_checked"]
    assert c.get("edges_kept", 0) == len(graph.edges)
    assert c["edges_candidate"] >= c["edges_kept"]
    assert {"draft", "cc", "hv", "da", "rel"} <= set(graph.stats.stages)
    assert sum(s.calls for s in graph.stats.stages.values()) == engine.summary.stats.total().calls
    for edge in graph.edges:
        assert 0 <= edge.source < len(graph.nodes) and 0 <= edge.target < len(graph.nodes)
        assert edge.source != edge.target
    for node in graph.nodes:
        assert all(graph.details[i].turn_id == node.turn_ids[0] for i in node.details)


@pytest.mark.parametrize("switch,stage", [("completeness_check", None), ("detail_anchoring", "da"),
                                          ("relations", None), ("hallucination_verification", None)])
def test_ablation_switches_remove_their_module(maya: Any, switch: str, stage: str | None) -> None:
    full = Engine(scripted_config()).extract([maya])[0]
    cut = Engine(scripted_config(**{switch: False})).extract([maya])[0]
    if switch == "completeness_check":
        assert "recovered" not in {n.origin for n in cut.nodes}
        assert cut.stats.counts.get("recovered", 0) == 0
    if switch == "detail_anchoring":
        assert cut.details == [] and "da" not in cut.stats.stages and full.details
    if switch == "relations":
        assert cut.edges == [] and cut.stats.counts.get("edges_candidate", 0) == 0
    if switch == "hallucination_verification":
        assert {n.verification for n in cut.nodes} == {"unverified"}
        assert cut.stats.stages["hv"].nli_pairs == 0


def test_one_off_mode_is_a_single_draft_prompt(maya: Any) -> None:
    config = scripted_config(mode="one-off")
    graph = Engine(config).extract([maya])[0]
    assert set(graph.stats.stages) == {"draft"}
    assert graph.stats.stages["draft"].calls == 1
    assert graph.edges == [] and graph.details == [] and graph.mode == "one-off"
    assert graph.nodes and all(n.verification == "unverified" for n in graph.nodes)


def test_placeholder_and_fragment_facts_are_dropped_and_empty_replies_retried(maya: Any) -> None:
    replies = iter([{"facts": ["sentence", "Biscuit", "Maya adopted a beagle named Biscuit."]}])
    seen: list[int] = []

    def draft(fields: dict[str, str]) -> dict[str, list[str]]:
        seen.append(1)
        return next(replies, {"facts": ["sentence"]})

    cfg = scripted_config(completeness_check=False, hallucination_verification=False, relations=False,
                          detail_anchoring=False)
    graph = Engine(cfg, llm=ScriptedLLM(cfg.llm, rules={"draft": draft})).extract([maya])[0]
    assert [n.text for n in graph.nodes] == ["Maya adopted a beagle named Biscuit."]
    assert graph.stats.counts["repaired_replies"] == 1

    seen.clear()
    graph = Engine(cfg, llm=ScriptedLLM(cfg.llm, rules={"draft": draft})).extract([maya])[0]
    assert graph.nodes == [] and len(seen) == cfg.pipeline.max_attempts
    (failure,) = graph.stats.failures
    assert "no item of 'facts' is a statement" in failure.error and failure.raw == ['{"facts": ["sentence"]}'] * 3
