"""The token budget and the protocol of the pipeline's prompts: one leading block per session, details of
all turns in one request, replies cut by their budget continued, details and NLI premises from the owner's
words, resolved dates in premises, the adjudication and draft prompts agreeing with their own rules.

Expected values are written from the sessions below, read by hand; the stand-ins know only what the prompts
say, so a prompt that loses something loses the facts that depend on it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from conftest import Recording, make_session, scripted_config
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.testing.nli_lexical import LexicalNLI
from promem_fast.engine import Engine
from promem_fast.pipeline.views import DialogueView, resolve_dates
from promem_fast.prompts import example_of, render, session_block

DAY = "2025-03-14T09:30:00"  # a Friday


class Seeing(ScriptedLLM):
    """The scripted model, keeping every request it was sent with its role."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.sent: list[tuple[str, GenerationRequest]] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        for request in requests:
            parsed = parse_rendered(request.messages)
            self.sent.append((parsed[0] if parsed else "?", request))
        return super().generate(requests)

    def of(self, role: str) -> list[GenerationRequest]:
        return [r for got, r in self.sent if got == role]


def three_turns(sid: str = "s1", owner: str = "Maya Chen") -> Any:
    return make_session(sid, owner, [
        ("I'm flying to Oslo tomorrow for a conference at Nordvik Labs.",
         "Safe travels! Harbor Bank has an office in Oslo."),
        ("I adopted a cat named Pixel yesterday.", "Pixel is a lovely name."),
        ("My brother Leo works at Harbor Bank in Bergen.", "Do you visit him often?"),
    ], timestamp=DAY)


def test_every_prompt_of_a_session_starts_with_the_same_block_holding_its_dialogue() -> None:
    llm = Seeing()
    sessions = [three_turns("a"), three_turns("b", owner="Ana Ruiz")]
    Engine(scripted_config(), llm=llm).extract(sessions)
    entries_only = {"probe", "answer_flat"}  # they work from the entries: the block without the dialogue
    systems = {r.messages[0]["content"] for role, r in llm.sent if role not in entries_only}
    assert len(systems) == 2  # one leading block per session, whatever the role
    roles = {role for role, _ in llm.sent}
    assert {"detail", "event", "draft", "relation", "probe", "answer_flat", "verify_relation"} <= roles
    bare = {r.messages[0]["content"] for role, r in llm.sent if role in entries_only}
    assert len(bare) == 2 and all("not shown here" in s and "flying to Oslo" not in s for s in bare)
    assert all(s.split("The dialogue")[0] in {t.split("The dialogue")[0] for t in systems} for s in bare)
    maya = next(s for s in systems if "Maya Chen" in s)
    assert "[turn 0] Maya Chen: I'm flying to Oslo tomorrow for a conference at Nordvik Labs." in maya
    assert "[turn 2] Maya Chen: My brother Leo works at Harbor Bank in Bergen." in maya
    for _, request in llm.sent:  # the dialogue is never sent again after the block
        assert "I adopted a cat named Pixel" not in request.messages[1]["content"]


def test_the_details_of_every_turn_come_from_one_request() -> None:
    llm = Seeing()
    graph = Engine(scripted_config(), llm=llm).extract([three_turns()])[0]
    (detail,) = llm.of("detail")
    assert "Turns: 0, 1, 2" in detail.messages[1]["content"]
    assert graph.stats.stages["da"].calls == 1
    # the stand-in's rule: runs of capitalised words and "at/in/on Place" from the owner's words
    assert {(d.turn_id, d.text) for d in graph.details} == {
        (0, "Nordvik Labs"), (0, "at Nordvik Labs"), (2, "Harbor Bank"), (2, "at Harbor Bank"), (2, "in Bergen")}


def test_a_detail_reply_leaving_out_turns_with_nothing_is_complete() -> None:
    """The prompt asks to leave out a turn with no detail (an empty list per turn costs reply tokens that each
    read the whole cached dialogue): a complete reply naming one turn of three is not asked again."""
    llm = Seeing(rules={"detail": lambda fields: {"2": ["Leo", "in Bergen"]}})
    graph = Engine(scripted_config(), llm=llm).extract([three_turns()])[0]
    (detail,) = llm.of("detail")
    assert "leave out a turn with none" in detail.messages[1]["content"]
    assert {(d.turn_id, d.text) for d in graph.details} == {(2, "Leo"), (2, "in Bergen")}
    assert graph.stats.stages["da"].calls == 1 and not graph.stats.failures


def test_details_and_premises_come_from_the_owner_and_the_old_behaviour_is_an_ablation() -> None:
    session = three_turns()
    owner = Engine(scripted_config()).extract([session])[0]
    assert (0, "Harbor Bank") not in {(d.turn_id, d.text) for d in owner.details}  # the assistant said it
    both = Engine(scripted_config(detail_source="turn")).extract([session])[0]
    assert (0, "Harbor Bank") in {(d.turn_id, d.text) for d in both.details}
    view, first = DialogueView.of(session), session.turn_groups()[0]
    assert "Harbor Bank" not in view.premise(first, "speaker")
    assert "assistant said: Safe travels! Harbor Bank has an office in Oslo." in view.premise(first, "turn")
    assert scripted_config().pipeline.premise == "speaker"


def test_premises_carry_the_calendar_day_of_relative_dates() -> None:
    session = three_turns()
    view = DialogueView.of(session)
    assert view.premise(session.turn_groups()[0], "speaker") == (
        "On 2025-03-14, Maya Chen said: I'm flying to Oslo tomorrow (2025-03-15) for a conference at Nordvik Labs.")
    verdict = LexicalNLI().entail([(view.premise(session.turn_groups()[1], "speaker"),
                                    "Maya Chen adopted a cat named Pixel on 2025-03-13.")])[0]
    assert verdict.label == "entailment"
    assert resolve_dates("I start next Monday, not last Friday; a week ago I quit", view.day) == (
        "I start next Monday (2025-03-17), not last Friday (2025-03-07); a week ago (2025-03-07) I quit")


def test_a_correctly_dated_fact_is_entailed_at_once_not_split_and_adjudicated() -> None:
    # on 2025-03-01 "yesterday" is 2025-02-28: no word of that date is in the turn or its header
    session = make_session("pixel", "Maya Chen", [("I adopted a cat named Pixel yesterday.", "Lovely.")],
                           timestamp="2025-03-01T10:00:00")
    llm = Seeing()
    graph = Engine(scripted_config(), llm=llm).extract([session])[0]
    (pixel,) = [n for n in graph.nodes if n.text == "Maya Chen adopted a cat named Pixel on 2025-02-28."]
    assert pixel.verification == "entailed"
    assert llm.of("decompose") == [] and llm.of("adjudicate") == []


def test_an_atomic_entry_goes_to_adjudication_without_a_second_nli_check() -> None:
    unsupported = {"draft": lambda f: {"facts": ["Maya Chen owns a red sailboat."]}}  # no split possible
    nli = Recording(LexicalNLI(), "entail")
    llm = Seeing(rules=unsupported)
    cfg = scripted_config(completeness_check=False, relations=False, detail_anchoring=False)
    graph = Engine(cfg, llm=llm, nli=nli).extract([three_turns()])[0]
    pairs = [h for (batch,) in nli.calls for _, h in batch]
    assert pairs == ["Maya Chen owns a red sailboat."]  # checked once, not again after an empty split
    assert len(llm.of("adjudicate")) == 1 and graph.nodes == []
    assert graph.stats.counts["discarded"] == 1


def test_the_adjudication_prompt_follows_the_calendar_date_rule() -> None:
    block = session_block("Tom", "2024-05-06 (Monday)", None)
    (system, user) = render("adjudicate", block, user="Tom", turn="[turn 0] Tom: I moved yesterday.",
                            fact="Tom moved on 2024-05-05.")
    assert "the turn's terms" not in user["content"]
    assert "calendar date counted from the turn's date" in user["content"]
    assert "Write every date as a calendar date" in system["content"]


def test_the_draft_example_names_the_owner_in_every_fact_as_its_rule_asks() -> None:
    example = example_of("draft")
    facts = re.findall(r'"([^"]+\.)"', example.split("gives the facts", 1)[1])
    assert len(facts) == 3 and all("Tom" in f for f in facts)
    (_, user) = render("draft", session_block("Tom", "2024-05-06 (Monday)", "x"), user="Tom")
    assert "name Tom in every fact" in user["content"]


class Cutting(Seeing):
    """Replies as the scripted model, but cuts every reply after ``keep`` list items with finish "length"
    (a reply that ran out of its token budget)."""

    def __init__(self, keep: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.keep = keep

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = super().generate(requests)
        cut = []
        for completion in out:
            text = completion.text
            items = [m.end() for m in re.finditer(r'\.", ', text)]
            if len(items) >= self.keep:
                text = text[:items[self.keep - 1]] + '"Ann'  # the next item broken off mid-sentence
                completion = Completion(text, completion.prompt_tokens, completion.completion_tokens, "length")
            cut.append(completion)
        return cut


def test_a_reply_cut_by_its_token_budget_is_continued_and_counted() -> None:
    said = " ".join(f"I visited the town of Place{i} in {2000 + i}." for i in range(6))
    session = make_session("one", "Ann", [(said, "Nice.")], timestamp=DAY)
    llm = Cutting(keep=2)
    graph = Engine(scripted_config(mode="one-off"), llm=llm).extract([session])[0]
    # the scripted draft lists every other sentence: Place0, Place2, Place4; the first reply was cut after 2
    assert [n.text for n in graph.nodes] == ["Ann visited the town of Place0 in 2000.",
                                             "Ann visited the town of Place2 in 2002.",
                                             "Ann visited the town of Place4 in 2004."]
    assert graph.stats.stages["draft"].cut_replies == 1
    assert len(llm.of("draft")) == 2
    assert graph.stats.counts["continued_items"] == 1  # Place4 came only with the continuation


def test_without_the_dialogue_in_the_block_each_prompt_shows_its_own_turns() -> None:
    llm = Seeing()
    graph = Engine(scripted_config(dialogue_in_block=False), llm=llm).extract([three_turns()])[0]
    assert all("I adopted a cat named Pixel" not in r.messages[0]["content"] for _, r in llm.sent)
    details = llm.of("detail")
    assert len(details) == 3  # one request per turn, each showing it
    assert "[turn 1] Maya Chen: I adopted a cat named Pixel yesterday." in details[1].messages[1]["content"]
    assert {(d.turn_id, d.text) for d in graph.details} == {
        (0, "Nordvik Labs"), (0, "at Nordvik Labs"), (2, "Harbor Bank"), (2, "at Harbor Bank"), (2, "in Bergen")}
    # each link is verified in a request of its own that names it and shows the turns of its two facts
    links = [(e.source, e.relation, e.target) for e in graph.edges]
    with_block = Engine(scripted_config(), llm=Seeing()).extract([three_turns()])[0]
    assert links and links == [(e.source, e.relation, e.target) for e in with_block.edges]
    (verify,) = llm.of("verify_relation")
    user = verify.messages[1]["content"]
    assert "Links to check: 0\n" in user
    near = user.split("The dialogue near the two facts:\n", 1)[1]
    assert "[turn 0] Maya Chen: I'm flying to Oslo" in near and "[turn 1] Maya Chen: I adopted a cat" in near


def test_items_only_a_continuation_brought_are_counted() -> None:
    """With a cap of one item per list, the first detail reply names one detail for turn 0 and one for turn 2;
    the other three (at Nordvik Labs, at Harbor Bank, in Bergen) come from continuations. The draft's first
    reply names one of its two entries, the continuation the other. So 3 + 1 items were recovered."""
    graph = Engine(scripted_config(max_list_items=1), llm=Seeing()).extract([three_turns()])[0]
    assert {(d.turn_id, d.text) for d in graph.details} == {
        (0, "Nordvik Labs"), (0, "at Nordvik Labs"), (2, "Harbor Bank"), (2, "at Harbor Bank"), (2, "in Bergen")}
    assert graph.stats.counts["draft_entries"] == 2
    assert graph.stats.counts["continued_items"] == 4
