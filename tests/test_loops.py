"""A reply that repeats itself: recognised, and neither continued nor asked again with more room (a model
at temperature 0 that has started over only writes more of the same, at the cost of its whole budget)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conftest import scripted_config
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.engine import Engine
from promem_fast.loops import looping
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.types import Session, Turn

DAY = "2025-03-14T09:30:00"
ITEM = '"Ann visited Oslo in 2001 with her brother Leo.", '


def test_a_text_ending_in_a_repeated_item_or_clause_loops() -> None:
    assert looping('{"facts": [' + ITEM * 2)
    assert looping(('{"facts": ' + ITEM * 3).encode())  # the backend checks the bytes it has decoded
    assert looping('{"events": ["Ann flew to Oslo. ' + "She is going to buy a boat. " * 3)
    assert not looping('{"events": ["Ann flew to Oslo. ' + "She is going to buy a boat. " * 2)  # 56 characters


def test_distinct_items_and_short_repeats_do_not_loop() -> None:
    distinct = '{"facts": ["Ann visited Oslo in 2001.", "Ann visited Rome in 2002.", "Ann visited Lima in 2003.", '
    assert not looping(distinct)
    assert not looping('{"facts": ["Ann", "Ann", ')  # a repeat shorter than the span is not a loop yet
    assert not looping('{"facts": [' + ITEM)  # one copy
    assert not looping('{"facts": [' + ITEM * 2 + '"Ann has a dog."')  # it went on after the repeat


class Drafts(ScriptedLLM):
    """The scripted model with a fixed draft reply, counting the draft requests it is sent."""

    def __init__(self, reply: str, finish: str) -> None:
        super().__init__()
        self.reply, self.finish, self.drafts = reply, finish, 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = super().generate(requests)
        for i, request in enumerate(requests):
            if (parse_rendered(request.messages) or ("",))[0] == "draft":
                self.drafts += 1
                out[i] = Completion(text=self.reply, prompt_tokens=out[i].prompt_tokens,
                                    completion_tokens=len(self.reply) // 4, finish_reason=self.finish)  # type: ignore[arg-type]
        return out


def one_turn() -> Session:
    said = "I visited Oslo in 2001 with my brother Leo. I visited Rome in 2002."
    return Session(session_id="trips", user="Ann", turns=(Turn(0, "user", said, DAY),), timestamp=DAY)


def extract(llm: Drafts, cap: int = 4) -> Any:
    return Engine(scripted_config(mode="one-off", max_list_items=cap), llm=llm).extract([one_turn()])[0]


def test_a_list_that_names_an_item_twice_at_the_cap_is_not_asked_for_the_rest() -> None:
    """Four items at a cap of 4, one of them twice: the model has started over; the two distinct facts are
    kept once each and no continuation is sent."""
    reply = ('{"facts": ["Ann visited Oslo in 2001 with her brother Leo.", "Ann visited Rome in 2002.", '
             '"Ann visited Oslo in 2001 with her brother Leo.", "Ann visited Rome in 2002."]}')
    llm = Drafts(reply, "stop")
    graph = extract(llm)
    assert llm.drafts == 1
    assert [n.text for n in graph.nodes] == ["Ann visited Oslo in 2001 with her brother Leo.",
                                             "Ann visited Rome in 2002."]


def test_a_reply_cut_while_it_repeated_itself_keeps_its_items_and_is_not_continued() -> None:
    """A reply cut by its budget in the middle of a loop (any backend: the text shows it) or stopped by the
    backend for looping: its complete items are kept, and neither a continuation nor a larger budget is
    asked for."""
    looped = '{"facts": ["Ann visited Rome in 2002.", ' + ITEM * 3 + '"Ann visited Oslo in 2001 wi'
    for finish in ("length", "loop"):
        llm = Drafts(looped, finish)
        graph = extract(llm, cap=12)
        assert llm.drafts == 1, finish
        assert [n.text for n in graph.nodes] == ["Ann visited Rome in 2002.",
                                                 "Ann visited Oslo in 2001 with her brother Leo."], finish
        assert graph.stats.counts["looped_replies"] == 1


def test_a_reply_cut_without_a_loop_is_still_continued() -> None:
    cut = '{"facts": ["Ann visited Rome in 2002.", "Ann visited Oslo in 2001 wi'
    llm = Drafts(cut, "length")
    extract(llm, cap=12)
    assert llm.drafts > 1


class Details(ScriptedLLM):
    """The scripted model whose first detail reply, in the first turn it names, starts a detail that repeats
    one clause until the backend stops it; the turns every detail request names are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = super().generate(requests)
        for i, request in enumerate(requests):
            parsed = parse_rendered(request.messages)
            if parsed is None or parsed[0] != "detail":
                continue
            self.asked.append(parsed[1]["turns"])
            if len(self.asked) == 1:
                first = parsed[1]["turns"].split(", ")[0]
                text = ('{"' + first + '": ["Ann has a brother called Leo.", '
                        '"Ann visited Oslo in 2001.", "Ann liked Oslo and ' + "she liked the old harbour and " * 4)
                out[i] = Completion(text=text, prompt_tokens=out[i].prompt_tokens,
                                    completion_tokens=len(text) // 4, finish_reason="loop")
        return out


def test_a_detail_request_for_several_turns_that_loops_on_one_asks_again_only_for_the_turns_after_it() -> None:
    """Three of Ann's turns in one request; the reply loops inside the first turn's third detail. That turn
    keeps its two complete details and is not asked again (asking would only loop again); the other two are
    asked in a second request."""
    from conftest import make_session

    session = make_session("trips", "Ann", [
        ("I have a brother called Leo. I visited Oslo in 2001.", "Nice."),
        ("I work as a nurse in Bergen.", "Good."),
        ("My dog is called Rex.", "Cute.")])
    llm = Details()
    graph = Engine(scripted_config(detail_turns_per_request=3), llm=llm).extract([session])[0]
    assert llm.asked == ["0, 1, 2", "1, 2"]
    first_turn = sorted(d.text for d in graph.details if d.turn_id == 0)
    assert first_turn == ["Ann has a brother called Leo.", "Ann visited Oslo in 2001."]
    assert graph.stats.counts["looped_replies"] == 1
