"""What the prompts tell the model: who the memory owner is, when the session was, which way a relation
points, and that a full list is asked for the rest. The stand-ins know only what the prompts say, so a
prompt that loses the owner's name or the date loses the facts that depend on them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from conftest import scripted_config
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.testing.nli_lexical import LexicalNLI
from promem_fast.config import EngineConfig
from promem_fast.engine import Engine
from promem_fast.pipeline.events import uses_lightmem
from promem_fast.pipeline.relations import map_edges
from promem_fast.pipeline.views import DialogueView
from promem_fast.types import Event, MemoryEntry, MemoryGraph, Session, Turn

DAY = "2025-03-14T09:30:00"


class Seeing(ScriptedLLM):
    """The scripted model, keeping every prompt it was sent by role."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.prompts: dict[str, list[str]] = {}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        for request in requests:
            parsed = parse_rendered(request.messages)
            role = parsed[0] if parsed else "?"
            self.prompts.setdefault(role, []).append("\n".join(m["content"] for m in request.messages))
        return super().generate(requests)


def session(owner: str = "Maya Chen", stamp: str | None = DAY) -> Session:
    said = [
        ("I'm flying to Oslo tomorrow for a conference.", "Safe travels!"),
        ("I adopted a cat named Pixel yesterday.", "Pixel is a lovely name."),
        ("My brother Leo works at Harbor Bank in Bergen.", "Do you visit him often?"),
    ]
    turns = tuple(Turn(turn_id=i, role=role, text=text, timestamp=stamp)
                  for i, pair in enumerate(said) for role, text in zip(("user", "assistant"), pair))
    return Session(session_id="s1", user=owner, turns=turns, timestamp=stamp)


def test_every_extraction_prompt_names_the_owner_and_gives_the_date_and_the_date_rule() -> None:
    sailboat = {"draft": lambda f: {"facts": ["Maya Chen owns a red sailboat in Tromso."]}}  # forces adjudication
    llm = Seeing(rules=sailboat)
    Engine(scripted_config(), llm=llm).extract([session()])
    assert {"detail", "event", "draft", "adjudicate", "relation", "probe"} <= set(llm.prompts)
    for role in ("detail", "event", "draft", "adjudicate"):
        for prompt in llm.prompts[role]:
            assert "The memory owner is Maya Chen" in prompt, role
            assert "2025-03-14 (Friday)" in prompt, role
            assert '"yesterday", "tomorrow"' in prompt and "calendar date" in prompt, role
            assert ("Example:" in prompt) == (role != "detail"), role  # the detail example made a small model copy it
            assert "user:" not in prompt, role  # turns speak with names, never as "user"
    assert any("] Maya Chen: I'm flying to Oslo tomorrow" in p for p in llm.prompts["draft"])


def test_relations_default_to_the_papers_two_with_their_direction_in_every_prompt() -> None:
    assert EngineConfig().pipeline.relation_types == ("causal", "temporal")
    llm = Seeing()
    Engine(scripted_config(), llm=llm).extract([session()])
    (relation,) = llm.prompts["relation"]
    assert "- causal: source leads to target\n- temporal: source happens before target" in relation
    for prompt in llm.prompts["probe"] + llm.prompts.get("verify_relation", []):
        assert "relation: temporal (source happens before target)" in prompt
        assert "for/with" not in prompt


FLYING = {"draft": lambda f: {"facts": ["Maya Chen is flying to Oslo for a conference."]},
          "event": lambda f: {"events": []}}
"""A model that states one fact, whatever the prompt: what the nodes' dates are is then the product's doing."""


def test_every_node_carries_the_session_day_through_json_and_node_link_data() -> None:
    for mode in ("promem", "one-off"):
        graph = Engine(scripted_config(mode=mode), llm=ScriptedLLM(rules=FLYING)).extract([session()])[0]
        assert [(n.text, n.date) for n in graph.nodes] == [
            ("Maya Chen is flying to Oslo for a conference.", "2025-03-14")], mode
        again = MemoryGraph.from_json(graph.to_json())
        assert [n.date for n in again.nodes] == ["2025-03-14"], mode
        assert [node["date"] for node in graph.node_link_data()["nodes"]] == ["2025-03-14"], mode


def test_without_a_session_date_the_prompts_say_so_and_no_node_gets_a_date() -> None:
    llm = Seeing(rules=FLYING)
    graph = Engine(scripted_config(mode="one-off"), llm=llm).extract([session(stamp=None)])[0]
    (draft,) = llm.prompts["draft"]
    assert "The session took place on unknown." in draft and "2025" not in draft
    assert [(n.text, n.date) for n in graph.nodes] == [("Maya Chen is flying to Oslo for a conference.", None)]


def test_the_scripted_model_finds_no_owner_facts_in_a_prompt_that_does_not_name_the_owner() -> None:
    llm = ScriptedLLM()
    view = DialogueView.of(session())
    from promem_fast.prompts import render, session_block

    named = render("draft", session_block("Maya Chen", view.when, view.turn(session().turn_groups()[0])),
                   user="Maya Chen")
    anonymous = render("draft", session_block("Maya Chen", view.when, "[turn 0] user: I'm flying to Oslo."),
                       user="Maya Chen")
    replies = llm.generate([GenerationRequest(messages=m, schema=None, max_tokens=256) for m in (named, anonymous)])
    assert "Maya Chen is flying to Oslo on 2025-03-15" in replies[0].text
    assert '"facts": []' in replies[1].text


def test_the_nli_premise_says_who_spoke_and_the_lexical_checker_only_resolves_i_from_it() -> None:
    s = session()
    premise = DialogueView.of(s).premise(s.turn_groups()[2], "turn")
    assert premise.startswith("On 2025-03-14, Maya Chen said: My brother Leo works at Harbor Bank in Bergen.")
    nli = LexicalNLI()
    hypothesis = "Maya Chen's brother Leo works at Harbor Bank."
    named, bare = nli.entail([(premise, hypothesis), ("user: My brother Leo works at Harbor Bank.", hypothesis)])
    assert named.label == "entailment" and bare.label == "neutral"
    (other,) = nli.entail([(premise, "Ana Ruiz's brother Leo works at Harbor Bank.")])
    assert other.label == "neutral"  # "I" is Maya's: the speaker named, not any name


CITIES = ["Oslo", "Rome", "Lima", "Kyoto", "Accra", "Quito", "Hanoi", "Perth", "Cairo", "Dublin", "Tunis", "Riga"]


def trips(count: int) -> tuple[Session, dict[str, Any]]:
    """A one-turn session naming ``count`` trips, and a draft rule that lists every trip the prompt's
    continuation tail has not listed yet (the scripted model cuts a reply at the schema's cap, as a model
    held to the schema does)."""
    facts = [f"Ann visited {city} in {2001 + i}." for i, city in enumerate(CITIES[:count])]
    said = " ".join(f"I visited {city} in {2001 + i}." for i, city in enumerate(CITIES[:count]))

    def draft(fields: dict[str, str]) -> dict[str, list[str]]:
        return {"facts": [fact for fact in facts if fact not in fields["more"]]}

    one_turn = Session(session_id="trips", user="Ann", turns=(Turn(0, "user", said, DAY),), timestamp=DAY)
    return one_turn, {"draft": draft}


class Counting(ScriptedLLM):
    """The scripted model, counting the draft requests it is sent."""

    drafts = 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.drafts += sum(1 for r in requests if (parse_rendered(r.messages) or ("",))[0] == "draft")
        return super().generate(requests)


def test_a_list_that_fills_the_cap_is_asked_for_the_rest() -> None:
    """10 trips with a cap of 4: replies of 4, 4 and 2, so two continuations and every trip kept, in order."""
    one_turn, rules = trips(10)
    llm = Counting(rules=rules)
    graph = Engine(scripted_config(mode="one-off", max_list_items=4), llm=llm).extract([one_turn])[0]
    assert [n.text for n in graph.nodes] == [f"Ann visited {c} in {2001 + i}." for i, c in enumerate(CITIES[:10])]
    assert llm.drafts == 3 and graph.stats.counts["list_continuations"] == 2
    assert "lists_left_full" not in graph.stats.counts


def test_a_list_still_full_after_the_bounded_continuations_is_counted_not_hidden(
        caplog: pytest.LogCaptureFixture) -> None:
    """12 trips with a cap of 2: the first request and 3 continuations (the bound) give 8; the 4 left are
    said to be left (``lists_left_full``), not silently lost, in a warning that names the session."""
    one_turn, rules = trips(12)
    llm = Counting(rules=rules)
    with caplog.at_level(logging.WARNING, logger="promem_fast"):
        graph = Engine(scripted_config(mode="one-off", max_list_items=2), llm=llm).extract([one_turn])[0]
    assert [n.text for n in graph.nodes] == [f"Ann visited {c} in {2001 + i}." for i, c in enumerate(CITIES[:8])]
    assert llm.drafts == 4
    assert graph.stats.counts["lists_left_full"] == 1
    (warning,) = [r.getMessage() for r in caplog.records if "cap" in r.getMessage()]
    assert warning.startswith("session trips: the draft list still filled the cap of 2 items")


def test_an_edge_of_a_split_entry_attaches_to_the_fragment_that_carries_the_linked_event() -> None:
    events = [Event("Maya moved to Lisbon for a new job.", 0, [0]), Event("Maya started at Nordvik Labs.", 0, [1])]
    nodes = [MemoryEntry(0, "Maya has a sister called Ana.", "draft", "atomic", [0]),
             MemoryEntry(1, "Maya moved to Lisbon.", "draft", "atomic", [0]),
             MemoryEntry(2, "Maya started at Nordvik Labs.", "draft", "entailed", [1])]
    src, rel, dst = map_edges([(0, "causal", 1), (1, "temporal", 0)], events, [0, 1], [[0, 1], [2]], nodes,
                              ("causal", "temporal"))
    assert list(zip(src.tolist(), rel.tolist(), dst.tolist())) == [(1, 0, 2), (2, 1, 1)]


def test_lightmems_combined_cut_is_used_on_the_gpu_profile_when_the_compressor_is_there() -> None:
    class Ctx:
        def __init__(self, config: EngineConfig) -> None:
            self.config = config

    gpu = EngineConfig.profile("gpu")
    assert EngineConfig().pipeline.segmenter == "similarity" and gpu.pipeline.segmenter == "auto"
    assert uses_lightmem(Ctx(gpu))  # type: ignore[arg-type]
    gpu.compression.model = None
    assert not uses_lightmem(Ctx(gpu))  # type: ignore[arg-type]


def test_the_session_date_is_read_from_every_input_timestamp_format() -> None:
    from promem_fast.times import day_of

    stamps = {"2025-03-14T09:30:00": "2025-03-14", "Jan 15, 2029, 15:12:20": "2029-01-15",
              "1:56 pm on 8 May, 2023": "2023-05-08", "2023/05/20 (Sat) 02:21": "2023-05-20"}
    assert {s: str(day_of(s)) for s in stamps} == stamps
    odd = Session(session_id="x", user="Ann", turns=(Turn(0, "user", "Hi there friend.", "sometime"),),
                  timestamp="sometime")
    assert DialogueView.of(odd).when == "sometime" and DialogueView.of(odd).date == "sometime"


def test_items_copied_from_the_prompts_example_are_dropped_but_the_same_words_from_the_dialogue_stay() -> None:
    copying = {"event": lambda f: {"events": ["Tom starts a new job at the bakery on 2024-05-13.",
                                              "Maya Chen starts a new job at the bakery."]},
               "draft": lambda f: {"facts": ["Tom's sister Lea loves sushi.", "Maya Chen adopted a cat named Pixel."]}}
    s = session()
    s = Session(session_id="s", user=s.user, timestamp=s.timestamp,
                turns=(*s.turns, Turn(3, "user", "I start a new job at the bakery on Monday.", DAY)))
    graph = Engine(scripted_config(mode="promem"), llm=ScriptedLLM(rules=copying)).extract([s])[0]
    # most words of the second event are the example's too, but turn 3 says them: only the example's event goes
    assert [e.text for e in graph.events] == ["Maya Chen starts a new job at the bakery."]
    assert "Tom's sister Lea loves sushi." not in [n.text for n in graph.nodes]
    assert graph.stats.counts["repaired_replies"] >= 2


def test_rewordings_of_an_example_are_dropped_from_every_list_unless_the_dialogue_names_them() -> None:
    """A 135M model rewords the example ("Tom will begin working at a bakery") rather than copying it: the
    example's names, absent from the dialogue and not the owner's, mark it (most of its words are not the
    example's, so the word-share rule alone keeps it)."""
    reworded = {"event": lambda f: {"events": ["Tom will begin working at a pastry shop soon, he said happily."]},
                "draft": lambda f: {"facts": ["Maya Chen is flying to Oslo for a conference.",
                                              "Lea phoned the user and they chatted about dinner plans."]}}
    config = scripted_config(mode="promem", hallucination_verification=False)  # a weak judge lets all through
    graph = Engine(config, llm=ScriptedLLM(rules=reworded)).extract([session()])[0]
    texts = [n.text for n in graph.nodes] + [e.text for e in graph.events]
    assert not any(name in text for text in texts for name in ("Tom", "Lea", "Porto"))
    assert "Maya Chen is flying to Oslo for a conference." in texts
    # a user called Tom keeps his memories
    tom = Session(session_id="t", user="Tom", timestamp=DAY, turns=(Turn(0, "user", "I moved to Porto.", DAY),))
    kept = Engine(scripted_config(mode="one-off"), llm=ScriptedLLM(
        rules={"draft": lambda f: {"facts": ["Tom moved to Porto."]}})).extract([tom])[0]
    assert [n.text for n in kept.nodes] == ["Tom moved to Porto."]


def test_a_list_cut_at_the_cap_is_continued_even_when_its_check_dropped_an_item() -> None:
    def draft(fields: dict[str, str]) -> dict[str, list[str]]:
        if "Ann visited Oslo" not in fields["more"]:
            return {"facts": ["Ann visited Oslo in 2001.", "Ann"]}  # cut at 2; the fragment is dropped
        return {"facts": ["Ann visited Rome in 2002."]}

    one_turn = Session(session_id="one", user="Ann", timestamp=DAY,
                       turns=(Turn(0, "user", "I visited Oslo in 2001 and Rome in 2002.", DAY),))
    graph = Engine(scripted_config(mode="one-off", max_list_items=2),
                   llm=ScriptedLLM(rules={"draft": draft})).extract([one_turn])[0]
    assert [n.text for n in graph.nodes] == ["Ann visited Oslo in 2001.", "Ann visited Rome in 2002."]


def test_the_scripted_models_nli_answer_takes_no_speakers_name_as_evidence() -> None:
    from promem_fast.prompts import render, session_block

    premise = "On 2025-03-14, Maya said: Tom moved to Lisbon."
    block = session_block("Maya", "2025-03-14 (Friday)", None)
    asked = [render("nli", block, premise=premise, hypothesis=h) for h in ("Maya moved to Lisbon.", "Tom moved to Lisbon.")]
    replies = ScriptedLLM().generate([GenerationRequest(messages=m, schema=None, max_tokens=64) for m in asked])
    assert [r.text for r in replies] == ['{"label": "neutral"}', '{"label": "entailment"}']
