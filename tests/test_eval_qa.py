"""QA over memory and the judges: retrieval on constructed vectors, what the answerer is shown, the labels
the judges produce, and their aggregation to numbers worked out by hand."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from conftest import Recording, make_session, scripted_config
from promem_fast.config_ranking import RankingConfig
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.testing.embed_hashing import HashingEmbedder
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.engine import Engine
from promem_fast.eval.judges import (
    accuracy_program, aggregate_halumem, aggregate_locomo, aggregate_longmemeval, halumem_qa_judge,
    integrity_program, locomo_qa_judge, longmemeval_qa_judge, longmemeval_template, memory_lines,
    update_program,
)
from promem_fast.eval.prompts import EVAL_TEMPLATES, QA_NOT_FOUND, eval_schema
from promem_fast.store.qa import (
    Answer, RetrievalIndex, Unit, answer_questions, build_index, memory_units, top_k, turn_units, with_stats,
)
from promem_fast.eval.benchmark import GoldMemory, Question
from promem_fast.prompts import PREAMBLE
from promem_fast.types import Detail, Edge, MemoryEntry, MemoryGraph, RunStats, Session

approx = pytest.approx

Reply = Callable[[str], Any]
"""Given the user message of an evaluation prompt, the JSON value to answer."""


class EvalLLM:
    """A deterministic chat backend that answers only our evaluation prompts, by template name.

    It keeps every prompt it was sent (template name, user message) so tests can check what was shown.
    """

    def __init__(self, replies: dict[str, Reply], context_length: int = 8192) -> None:
        self.replies = replies
        self.context_length = context_length
        self.seen: list[tuple[str, str]] = []

    @staticmethod
    def template_of(messages: Sequence[Message]) -> str:
        system = messages[0]["content"].removeprefix(f"{PREAMBLE}\n\n")
        for name, template in EVAL_TEMPLATES.items():
            head = template.system.split("{", 1)[0]
            if system.startswith(head) and (head != template.system or system == template.system):
                return name
        raise AssertionError(f"not an evaluation prompt: {system[:60]!r}")

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m["content"].split()) + 4 for m in messages)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        for request in requests:
            name = self.template_of(request.messages)
            user = request.messages[1]["content"]
            self.seen.append((name, user))
            text = json.dumps(self.replies[name](user))
            out.append(Completion(text=text, prompt_tokens=self.count_tokens(request.messages),
                                  completion_tokens=len(text.split())))
        return out


def engine_with(llm: EvalLLM, top_k_: int = 20, *, dense_only: bool = False) -> Engine:
    config = scripted_config()
    config.qa_top_k = top_k_
    if dense_only:  # cosine alone, the ranking before the hybrid one
        config.ranking = RankingConfig(lexical=False, names=False, speaker=False, dedup=False, when=False)
    return Engine(config, llm=llm, embedder=HashingEmbedder(config.embedder))


def graph(sid: str, texts: list[str], *, details: dict[int, list[str]] | None = None,
          edges: Sequence[tuple[int, str, int]] = (), timestamp: str = "2025-01-01T10:00:00") -> MemoryGraph:
    all_details: list[Detail] = []
    nodes = []
    for i, text in enumerate(texts):
        ids = []
        for d in (details or {}).get(i, []):
            ids.append(len(all_details))
            all_details.append(Detail(d, i))
        nodes.append(MemoryEntry(id=i, text=text, origin="draft", verification="entailed", turn_ids=[i], details=ids))
    return MemoryGraph(session_id=sid, user="Maya", nodes=nodes,
                       edges=[Edge(source=s, target=t, relation=r) for s, r, t in edges],
                       details=all_details, events=[], stats=RunStats(), timestamp=timestamp)


def question(qid: str, text: str, sessions: Sequence[str], dates: Sequence[str | None] = (), **kw: Any) -> Question:
    return Question(question_id=qid, user_id="u", question=text, answer=kw.pop("answer", "x"),
                    question_type=kw.pop("question_type", "t"), session_ids=tuple(sessions),
                    session_dates=tuple(dates), question_time=kw.pop("question_time", "2025-02-01"), **kw)


def echo_first_line(user: str) -> dict[str, str]:
    """Answer with the first context line (so the test sees the context reached the model)."""
    body = user.split(":\n", 1)[1].split("\n\n", 1)[0]
    return {"answer": body.splitlines()[0]}


# ============================================================================================= retrieval
def test_top_k_orders_by_cosine_and_breaks_ties_by_position() -> None:
    keys = np.array([[1, 0, 0], [0, 1, 0], [0.6, 0.8, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    query = np.array([0, 1, 0], np.float32)
    order, scores = top_k(query, keys, 3)
    assert order.tolist() == [1, 3, 2]  # two exact matches (lower index first), then the 0.8 cosine
    assert scores.tolist() == approx([1.0, 1.0, 0.8])
    assert top_k(query, keys, 10)[0].tolist() == [1, 3, 2, 0, 4]
    assert top_k(query, keys[:0], 3)[0].size == 0 and top_k(query, keys, 0)[0].size == 0


def test_memory_units_carry_details_and_both_ends_of_each_edge() -> None:
    g = graph("s1", ["Maya adopted a beagle.", "Maya bought dog food."], details={0: ["Biscuit", "Saturday"]},
              edges=[(0, "causal", 1)])
    first, second = memory_units(g)
    assert first.body == "Maya adopted a beagle. | details: Biscuit; Saturday | links: causal → Maya bought dog food."
    assert first.key == "Maya adopted a beagle. (Biscuit; Saturday)"
    assert second.body == "Maya bought dog food. | links: causal ← Maya adopted a beagle."
    assert second.key == "Maya bought dog food."


def test_retrieval_returns_the_top_k_units_by_hashed_cosine_shown_in_conversation_order() -> None:
    texts_a = ["Maya adopted a beagle named Biscuit.", "Maya works as a nurse in Lisbon.",
               "Maya walks Biscuit the beagle every evening."]
    texts_b = ["Maya started learning the piano.", "Biscuit the beagle chewed Maya's piano bench."]
    graphs = [graph("a", texts_a, timestamp="2025-01-01"), graph("b", texts_b, timestamp="2025-01-08")]
    llm = EvalLLM({"qa_memory": echo_first_line})
    engine = engine_with(llm, top_k_=3, dense_only=True)
    index = build_index(engine, {g.session_id: memory_units(g) for g in graphs})
    q = question("q1", "What is the name of Maya's beagle?", ["a", "b"], ["Jan 01", "Jan 08"])
    (answer,), stats = answer_questions(engine, [(q, "Maya")], index)

    # the expected top-3, computed here independently of the code under test
    embedder = HashingEmbedder(engine.config.embedder)
    units = [u for g in graphs for u in memory_units(g)]
    scores = embedder.embed([u.key for u in units]) @ embedder.embed([q.question])[0]
    expected = sorted(range(len(units)), key=lambda i: (-scores[i], i))[:3]
    assert sorted(r.rank for r in answer.retrieved) == [0, 1, 2]
    by_rank = sorted(answer.retrieved, key=lambda r: r.rank)
    assert [r.text for r in by_rank] == [units[i].body for i in expected]
    assert [r.score for r in by_rank] == approx([float(scores[i]) for i in expected], abs=1e-6)
    # shown chronologically (session a before b, entry order inside a session), each with its session date
    assert [r.text for r in answer.retrieved] == [units[i].body for i in sorted(expected)]
    name, prompt = llm.seen[0]
    assert name == "qa_memory" and "The question is asked on 2025-02-01." in prompt
    shown = prompt.split("Memories:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    dates = {"a": "Jan 01", "b": "Jan 08"}
    assert shown == [f"[{dates[units[i].session_id]}] {units[i].body}" for i in sorted(expected)]
    assert answer.prediction == shown[0] and answer.candidates == 5 and answer.error is None
    assert stats.stages["qa"].calls == 1 and stats.stages["qa"].embedded_texts == 1


def test_only_the_question_history_is_searched_and_missing_memory_is_reported() -> None:
    llm = EvalLLM({"qa_memory": echo_first_line})
    engine = engine_with(llm)
    g1, g2 = graph("early", ["Maya lives in Porto."]), graph("later", ["Maya moved to Lisbon."])
    index = build_index(engine, {"early": memory_units(g1), "later": memory_units(g2)})
    q = question("q", "Where does Maya live?", ["early", "gone"])
    (answer,), _ = answer_questions(engine, [(q, "Maya")], index)
    assert [r.session_id for r in answer.retrieved] == ["early"]
    assert answer.missing_sessions == ["gone"]


def test_native_rag_retrieves_raw_turns_and_drops_the_peer_copy_of_a_turn() -> None:
    turns = make_session("s", "Ann", [("I hike every Sunday.", "Nice!"), ("My dog is Max.", "Cute name.")])
    peer = Session(session_id="s:peer", user="Ben", turns=turns.turns, timestamp=turns.timestamp)
    units = turn_units(turns)
    assert [u.body for u in units] == ["user: I hike every Sunday. / assistant: Nice!",
                                       "user: My dog is Max. / assistant: Cute name."]
    llm = EvalLLM({"qa_dialogue": echo_first_line})
    engine = engine_with(llm)
    index = build_index(engine, {"s": units, "s:peer": turn_units(peer)})
    q = question("q", "What is the name of Ann's dog?", ["s", "s:peer"], ["May 8", "May 8"])
    (answer,), _ = answer_questions(engine, [(q, "Ann")], index, source="turns")
    assert answer.candidates == 2 and len(answer.retrieved) == 2  # each turn once, not four times
    assert llm.seen[0][0] == "qa_dialogue" and "Excerpts:\n[May 8] user: I hike" in llm.seen[0][1]


def test_a_context_too_small_for_every_unit_drops_the_lowest_ranked_ones() -> None:
    texts = [f"Maya visited museum number {i} in Lisbon with her sister Ana." for i in range(12)]
    llm = EvalLLM({"qa_memory": echo_first_line}, context_length=330)
    engine = engine_with(llm)
    index = build_index(engine, {"a": memory_units(graph("a", texts))})
    (answer,), _ = answer_questions(engine, [(question("q", "Which museum did Maya visit?", ["a"]), "Maya")], index)
    assert answer.dropped_for_budget > 0 and answer.retrieved
    assert len(answer.retrieved) + answer.dropped_for_budget == 12
    assert max(r.rank for r in answer.retrieved) < min(
        set(range(12)) - {r.rank for r in answer.retrieved})  # kept = the best-ranked ones


def test_a_failed_answer_is_recorded_not_raised() -> None:
    llm = EvalLLM({"qa_memory": lambda user: {"wrong": "shape"}})
    engine = engine_with(llm)
    index = build_index(engine, {"a": memory_units(graph("a", ["Maya lives in Porto."]))})
    (answer,), stats = answer_questions(engine, [(question("q", "Where does Maya live?", ["a"]), "Maya")], index)
    assert answer.prediction is None and answer.error.startswith("answer failed")
    assert stats.counts["failed_steps"] == 1 and stats.failures[0].stage == "qa"
    assert stats.stages["qa"].calls == engine.config.pipeline.max_attempts  # retried, then given up


# ============================================================================================= judges
def run_programs(engine: Engine, makers: list[Callable[[Any], Any]]) -> list[Any]:
    out = []
    for _, value in engine.run((i, lambda ctx, make=make: with_stats(ctx, make(ctx))) for i, make in enumerate(makers)):
        assert not isinstance(value, BaseException), value
        out.append(value[0])
    return out


def point(content: str, source: str = "secondary", importance: float = 1.0, mtype: str = "Event Memory",
          index: int = 0, replaces: Sequence[str] = ()) -> GoldMemory:
    """A gold point of session ``s``; ``replaces`` makes it an update of those earlier memories."""
    return GoldMemory(session_id="s", content=content, memory_type=mtype, source=source, index=index,
                      importance=importance, is_update=bool(replaces), original_memories=tuple(replaces))


SESSION = make_session("s", "Maya", [("I adopted a beagle named Biscuit.", "Lovely!"),
                                     ("I moved to Lisbon in May.", "Nice city."),
                                     ("My sister Ana visits monthly.", "Great.")])


def test_integrity_and_accuracy_labels_carry_what_metrics_needs_and_the_raw_reply() -> None:
    scores = {"Maya adopted a beagle named Biscuit.": 2, "Maya moved to Lisbon.": 1, "Maya owns a cat.": 0}
    llm = EvalLLM({
        "judge_integrity": lambda user: {"score": scores[user.split("Reference fact: ", 1)[1].split("\n", 1)[0]]},
        "judge_accuracy": lambda user: {"score": 2, "in_reference": "Biscuit" in user.split("Memory to grade: ")[1]},
    })
    engine = engine_with(llm)
    points = [point("Maya adopted a beagle named Biscuit.", importance=0.5, index=1),
              point("Maya moved to Lisbon.", index=2),
              point("Maya owns a cat.", source="interference", index=3)]
    g = graph("s", ["Maya adopted a beagle named Biscuit.", "Maya moved to Lisbon in May."], details={1: ["May"]})
    integrity, accuracy = run_programs(engine, [
        lambda ctx: integrity_program(SESSION, points, g, ctx), lambda ctx: accuracy_program(SESSION, points, g, ctx)])
    assert [lab["memory_integrity_score"] for lab in integrity] == [2, 1, 0]
    assert [lab["memory_source"] for lab in integrity] == ["secondary", "secondary", "interference"]
    assert integrity[0]["importance"] == 0.5 and integrity[0]["judge_reply"] == {"score": 2}
    assert [lab["is_included_in_golden_memories"] for lab in accuracy] == ["true", "false"]
    assert [lab["memory_accuracy_score"] for lab in accuracy] == [2, 2]
    integrity_prompt = next(user for name, user in llm.seen if name == "judge_integrity")
    assert "1. Maya adopted a beagle named Biscuit.\n2. Maya moved to Lisbon in May. (details: May)" in integrity_prompt
    accuracy_prompt = next(user for name, user in llm.seen if name == "judge_accuracy")
    assert "[turn 1] user: I moved to Lisbon in May." in accuracy_prompt
    assert "Maya owns a cat." not in accuracy_prompt  # the planted point is not offered as a gold fact
    # hand computation: N = 2 non-interference points, one scored 2 -> recall 1/2; weighted
    # 0.5·(2·0.5 + 1·1) / (0.5 + 1) = 1/1.5; FMR: the interference point scored 0 -> 1; target entries:
    # only the first (score 2 -> 0.5·2 = 1) -> target precision 1
    numbers = aggregate_halumem(integrity, accuracy, [])
    assert numbers["headline"]["memory_integrity"] == approx(0.5)
    assert numbers["extraction"]["integrity"]["weighted_recall"] == approx(1 / 1.5)
    assert numbers["headline"]["false_memory_resistance"] == approx(1.0)
    assert numbers["headline"]["memory_accuracy"] == approx(1.0)
    assert numbers["headline"]["memory_f1"] == approx(2 * 0.5 * 1.0 / 1.5)


def test_a_session_with_no_memories_scores_every_point_zero_without_asking() -> None:
    llm = EvalLLM({})
    engine = engine_with(llm)
    points = [point("Maya adopted a beagle."), point("Maya lives in Lisbon.")]
    integrity, accuracy = run_programs(engine, [
        lambda ctx: integrity_program(SESSION, points, None, ctx),
        lambda ctx: accuracy_program(SESSION, points, None, ctx)])
    assert [lab["memory_integrity_score"] for lab in integrity] == [0, 0] and accuracy == []
    assert integrity[0]["rule"] == "no memories" and llm.seen == []


UPDATES = [point("Maya adopted a beagle named Biscuit.", index=1),
           point("Maya moved from Porto to Lisbon.", mtype="Persona Memory", index=2,
                 replaces=["Maya lives in Porto."]),
           point("Maya's sister Ana now visits weekly instead of monthly.", mtype="Relationship Memory", index=3,
                 replaces=["Maya's sister Ana visits monthly."])]


VERDICT_OF = {"Maya moved from Porto to Lisbon.": "Correct",
              "Maya's sister Ana now visits weekly instead of monthly.": "Omission"}
"""The update judge's verdicts, chosen here: what the labels say must then be the judge's word, point by point."""


def test_each_update_point_is_judged_once_against_the_session_memories_and_keeps_its_verdict() -> None:
    config = scripted_config()
    shown: list[dict[str, str]] = []

    def judge(fields: dict[str, str]) -> dict[str, str]:
        shown.append(fields)
        return {"verdict": VERDICT_OF[fields["point"]]}

    llm = Recording(ScriptedLLM(config.llm, rules={"judge_update": judge}), "generate")
    engine = Engine(config, llm=llm, embedder=HashingEmbedder(config.embedder))
    g = graph("s", ["Maya adopted a beagle named Biscuit.", "Maya moved to Lisbon in May.",
                    "Maya's sister Ana visits monthly."])
    found = [memory_lines(g)] * 2  # what the store's search returned for each of the two update points
    (labels,) = run_programs(engine, [lambda ctx: update_program(SESSION, UPDATES, found, ctx)])
    # the beagle is no update: only points 2 and 3 go to the judge, each once, with the memories found for them
    assert sorted(f["point"] for f in shown) == sorted(VERDICT_OF)
    assert [(lab["index"], lab["memory_update_type"]) for lab in labels] == [(2, "Correct"), (3, "Omission")]
    assert labels[0]["judge_reply"] == {"verdict": "Correct"} and labels[0]["error"] is None
    assert labels[0]["original_memories"] == ["Maya lives in Porto."] and labels[0]["memories_shown"] == 3
    assert [lab["memory_type"] for lab in labels] == ["Persona Memory", "Relationship Memory"]
    (requests,) = llm.calls[0]
    prompt = requests[0].messages[1]["content"]
    assert "Earlier information:\n1. Maya lives in Porto.\n" in prompt and "2. Maya moved to Lisbon in May." in prompt


def test_an_update_point_with_nothing_retrieved_is_omitted_without_asking() -> None:
    config = scripted_config()
    llm = Recording(ScriptedLLM(config.llm), "generate")
    engine = Engine(config, llm=llm, embedder=HashingEmbedder(config.embedder))
    (labels,) = run_programs(engine, [lambda ctx: update_program(SESSION, UPDATES, [[], []], ctx)])
    assert [(lab["memory_update_type"], lab["rule"]) for lab in labels] == [("Omission", "no memories")] * 2
    assert llm.calls == []


def test_long_dialogues_are_cut_to_the_grounded_and_most_similar_turns() -> None:
    exchanges = [(f"Filler message number {i} about the weather and traffic today.", "I see.") for i in range(30)]
    exchanges[17] = ("I adopted a beagle named Biscuit yesterday.", "Congratulations!")
    session = make_session("s", "Maya", exchanges)
    llm = EvalLLM({"judge_accuracy": lambda user: {"score": 2, "in_reference": True}}, context_length=420)
    engine = engine_with(llm)
    g = graph("s", ["Maya adopted a beagle named Biscuit."])
    g.nodes[0].turn_ids = [17]
    (labels,) = run_programs(engine, [lambda ctx: accuracy_program(session, [point("Maya has a beagle.")], g, ctx)])
    assert 0 < labels[0]["turns_shown"] < labels[0]["turns_total"] == 30
    assert "[turn 17] user: I adopted a beagle" in llm.seen[0][1]


def qa_case(prediction: str | None, **kw: Any) -> tuple[Question, Answer]:
    q = question(kw.pop("qid", "q"), "What pet does Maya have?", ["s"], answer="a beagle", **kw)
    return q, Answer(q.question_id, q.question, q.question_type, q.answer, prediction, "memory",
                     error=None if prediction is not None else "answer failed: boom")


def test_qa_judges_produce_metric_labels_and_skip_failed_answers() -> None:
    llm = EvalLLM({
        "judge_halumem_qa": lambda user: {"verdict": "Correct" if "beagle" in user.split("Answer to grade: ")[1]
                                          else "Omission"},
        "judge_locomo": lambda user: {"verdict": "CORRECT"},
        "judge_lme_temporal": lambda user: {"verdict": "no"},
        "judge_lme_abstention": lambda user: {"verdict": "yes"},
    })
    engine = engine_with(llm)
    good, miss, failed = qa_case("A beagle."), qa_case(QA_NOT_FOUND, qid="q2"), qa_case(None, qid="q3")
    loc = qa_case("a beagle", qid="l1", category=4, question_type="single-hop")
    lme_t = qa_case("3 days", qid="t1", question_type="temporal-reasoning")
    lme_a = qa_case(QA_NOT_FOUND, qid="t2_abs", question_type="temporal-reasoning", abstention=True)
    labels = run_programs(engine, [
        lambda ctx: halumem_qa_judge(*good, ctx), lambda ctx: halumem_qa_judge(*miss, ctx),
        lambda ctx: halumem_qa_judge(*failed, ctx), lambda ctx: locomo_qa_judge(*loc, ctx),
        lambda ctx: longmemeval_qa_judge(*lme_t, ctx), lambda ctx: longmemeval_qa_judge(*lme_a, ctx)])
    assert [lab["result_type"] for lab in labels[:3]] == ["Correct", "Omission", None]
    assert labels[2]["error"] == "answer failed: boom" and labels[0]["judge_reply"] == {"verdict": "Correct"}
    assert labels[3]["llm_correct"] is True and labels[3]["f1"] == approx(1.0) and labels[3]["category"] == 4
    assert [labels[4]["template"], labels[5]["template"]] == ["judge_lme_temporal", "judge_lme_abstention"]
    assert [labels[4]["label"], labels[5]["label"]] == [False, True]
    assert sum(name.startswith("judge") for name, _ in llm.seen) == 5  # the failed answer was not sent


def test_longmemeval_picks_the_type_specific_prompt() -> None:
    def of(qtype: str, abstention: bool = False) -> str:
        return longmemeval_template(question("q", "?", ["s"], question_type=qtype, abstention=abstention))
    assert of("temporal-reasoning") == "judge_lme_temporal"
    assert of("knowledge-update") == "judge_lme_update"
    assert of("single-session-preference") == "judge_lme_preference"
    assert of("multi-session") == of("single-session-user") == "judge_lme"
    assert of("knowledge-update", abstention=True) == "judge_lme_abstention"


# ============================================================================================= aggregation
def test_halumem_aggregation_by_hand() -> None:
    def integ(score: Any, source: str = "primary", importance: float = 1.0) -> dict[str, Any]:
        return {"memory_integrity_score": score, "memory_source": source, "importance": importance,
                "memory_type": "Event Memory"}
    integrity = [integ(2), integ(2, importance=0.5), integ(1), integ(0), integ(None),
                 integ(0, "interference"), integ(2, "interference")]
    accuracy = [{"memory_accuracy_score": 2, "is_included_in_golden_memories": "true"},
                {"memory_accuracy_score": 1, "is_included_in_golden_memories": "true"},
                {"memory_accuracy_score": 0, "is_included_in_golden_memories": "false"},
                {"memory_accuracy_score": None, "is_included_in_golden_memories": None}]
    qa = [{"result_type": r, "question_type": t} for r, t in
          [("Correct", "a"), ("Correct", "a"), ("Hallucination", "b"), ("Omission", "b"), (None, "b")]]
    out = aggregate_halumem(integrity, accuracy, qa)["headline"]
    # recall: 2 of the 5 non-interference points scored 2 -> 0.4; target precision: entries in gold are
    # the first two, 0.5·2 + 0.5·1 = 1.5 over 2 -> 0.75; F1 = 2·0.4·0.75 / 1.15; FMR: 1 of 2 scored 0
    assert out["memory_integrity"] == approx(0.4)
    assert out["memory_accuracy"] == approx(0.75)
    assert out["memory_f1"] == approx(0.6 / 1.15)
    assert out["false_memory_resistance"] == approx(0.5)
    assert (out["qa_accuracy"], out["qa_hallucination"], out["qa_omission"]) == approx((0.4, 0.2, 0.2))
    native = aggregate_halumem([], [], qa)
    assert native["extraction"] is None and native["headline"]["memory_integrity"] is None


def test_halumem_update_aggregation_by_hand() -> None:
    def label(mtype: str, score: int | None, update: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        base = {"memory_source": "primary", "importance": 1.0, "memory_type": mtype, "is_update": update is not None}
        return {**base, "memory_integrity_score": score}, {**base, "memory_update_type": update}
    rows = [label("Event Memory", 2), label("Event Memory", 1), label("Persona Memory", 2, "Correct"),
            label("Persona Memory", 0, "Omission"), label("Event Memory", 2, "Hallucination"),
            label("Relationship Memory", None, "not a label")]
    update = [u for i, u in rows if i["is_update"]]
    # official routing: the update points reached the update judge only, so integrity holds the two plain ones
    official = aggregate_halumem([i for i, _ in rows if not i["is_update"]], [], [], update)
    extraction = official["extraction"]
    # four update points, three with one of the four labels: one each of Correct, Hallucination, Omission
    assert extraction["update"] == approx({
        "n": 4, "n_valid": 3, "correct": 0.25, "hallucination": 0.25, "omission": 0.25, "other": 0.0,
        "correct_valid": 1 / 3, "hallucination_valid": 1 / 3, "omission_valid": 1 / 3, "other_valid": 0.0})
    assert official["headline"]["memory_integrity"] == 0.5 and official["update_routing"] == "official"
    # type-wise, each point once: Event = two plain points (one scored 2) and one hallucinated update -> 1/3;
    # Persona = two updates, one Correct -> 1/2
    types = extraction["memory_type_accuracy"]
    assert types["Event Memory"] == approx({"n": 3, "integrity": 1 / 3, "update": 0.0, "accuracy": 1 / 3})
    assert types["Persona Memory"] == approx({"n": 2, "integrity": 0.0, "update": 0.5, "accuracy": 0.5})
    assert types["Relationship Memory"]["accuracy"] == 0.0
    assert official["unscored"]["update"]["unscored"] == 1
    assert official["warnings"] == [('update judge: 1 of 4 records (25.0%) have no usable grade (e.g. "not a label"), '
                                     "so its figures rest on 3")]
    # "both": every point also went to the integrity judge; recall covers all six, the type table still
    # counts each point once (the update points by their update label)
    both = aggregate_halumem([i for i, _ in rows], [], [], update, update_routing="both")
    assert both["headline"]["memory_integrity"] == approx(3 / 6)
    assert both["extraction"]["integrity"]["n"] == 6
    assert both["extraction"]["memory_type_accuracy"] == types
    with pytest.raises(ValueError, match="unknown update routing"):
        aggregate_halumem([], [], [], [], update_routing="integrity")


def test_locomo_aggregation_by_hand() -> None:
    rows = [
        {"category": 4, "prediction": "Max", "answer": "Max", "llm_correct": True},
        {"category": 4, "prediction": "a red car", "answer": "the blue car", "llm_correct": False},
        {"category": 2, "prediction": "May 2023", "answer": "7 May 2023", "llm_correct": True},
        {"category": 1, "prediction": "hiking", "answer": "hiking, swimming", "llm_correct": None},
        {"category": 5, "prediction": "Not mentioned", "answer": None, "llm_correct": True},
    ]
    out = aggregate_locomo(rows)
    # LLM judge over categories 1-4: 2 correct of 4 (the unparsed grade counts as wrong); all five: 3/5
    assert out["headline"]["llm_accuracy"] == approx(0.5)
    assert out["headline"]["llm_accuracy_all"] == approx(0.6)
    assert out["llm_judge"]["n_valid"] == 3
    # F1: 1; "red car" vs "blue car": P = R = 1/2 -> 0.5; {may, 2023} vs {7, may, 2023}: P 1, R 2/3 -> 0.8;
    # multi-answer: hiking 1, swimming 0 -> 0.5; mean over 1-4 = (1 + 0.5 + 0.8 + 0.5) / 4 = 0.7
    assert out["headline"]["f1"] == approx(0.7)
    assert out["headline"]["f1_all"] == approx((2.8 + 1.0) / 5)
    assert out["by_category"]["single-hop"] == {"category": 4, "n": 2, "n_valid": 2, "accuracy": 0.5,
                                               "f1": approx(0.75)}
    assert out["by_category"]["adversarial"]["f1"] == 1.0


def test_longmemeval_aggregation_by_hand() -> None:
    labels = [{"question_id": "a", "question_type": "temporal-reasoning", "label": True},
              {"question_id": "b", "question_type": "temporal-reasoning", "label": False},
              {"question_id": "c_abs", "question_type": "temporal-reasoning", "label": True},
              {"question_id": "d", "question_type": "knowledge-update", "label": False}]
    out = aggregate_longmemeval(labels)
    # overall 2/4; per type: temporal 2/3, update 0 -> task average 1/3; abstention 1/1
    assert out["headline"] == approx({"accuracy": 0.5, "task_average": 1 / 3, "abstention": 1.0})


def test_every_template_has_a_schema_and_renders_with_its_fields() -> None:
    for name, template in EVAL_TEMPLATES.items():
        assert eval_schema(name)["type"] == "object"
        fields = {f: "x" for f in ("user", "memories", "excerpts", "question_time", "question", "point", "dialogue",
                                   "reference", "memory", "evidence", "answer", "previous")}
        messages = template.render(**fields)
        assert messages[0]["content"].startswith(PREAMBLE) and EvalLLM.template_of(messages) == name


def test_units_are_embedded_once_per_session() -> None:
    llm = EvalLLM({"qa_memory": echo_first_line})
    engine = engine_with(llm)
    index = build_index(engine, {"a": [Unit("a", "Maya lives in Porto.", "Maya lives in Porto.")], "b": []})
    assert isinstance(index, RetrievalIndex) and index.vectors["a"].shape == (1, engine.config.embedder.dim)
    assert index.vectors["b"].shape[0] == 0 and index.stats.stages["qa"].embedded_texts == 1
    questions = [(question(f"q{i}", "Where does Maya live?", ["a", "b"]), "Maya") for i in range(4)]
    answers, stats = answer_questions(engine, questions, index)
    assert [a.prediction for a in answers] == ["Maya lives in Porto."] * 4  # undated: no session dates given
    assert stats.stages["qa"].embedded_texts == 4  # only the four queries, the units were embedded already
