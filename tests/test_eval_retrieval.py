"""Retrieval-only evaluation: evidence recall@k per LoCoMo category, through the store, on a conversation
written in LoCoMo's schema (``locomo_fixture``) with hand-built memories and hand-chosen vectors, so every
rank below is worked out by hand from cosines."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import scripted_config
from locomo_fixture import write_locomo
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.cli import main
from promem_fast.config_ranking import RankingConfig
from promem_fast.engine import Engine
from promem_fast.eval.datasets import load_benchmark
from promem_fast.eval.retrieval import evidence_recall
from promem_fast.eval.store_index import evaluation_index
from promem_fast.types import MemoryEntry, MemoryGraph, RunStats

AXES = ("cat", "nurse", "cafe", "cello", "harbour", "mural", "porto", "marathon", "bicycle", "garden", "wedding")

MEMORIES: dict[str, list[tuple[str, str, str]]] = {
    # session copy → (memory text, its axis, the dia_id of the turn it is grounded in)
    "conv-t:session_1:Nora": [("Nora adopted a cat named Pebble.", "cat", "D1:1"),
                              ("Nora works as a nurse.", "nurse", "D1:3"),
                              ("Nora and Omar met at a cafe.", "cafe", "D1:4")],
    "conv-t:session_1:Omar": [("Omar learns the cello.", "cello", "D1:2"),
                              ("Omar lives in a flat by the harbour.", "harbour", "D1:4"),
                              ("Nora and Omar met at a cafe.", "cafe", "D1:4")],  # both copies hold it
    "conv-t:session_2:Nora": [("Nora painted a mural of Pebble.", "mural", "D2:2"),
                              ("Nora visited her aunt in Porto.", "porto", "D2:4")],
    "conv-t:session_2:Omar": [("Omar ran a marathon.", "marathon", "D2:1"),
                              ("Omar bought a red bicycle.", "bicycle", "D2:3")],
    "conv-t:session_3:Nora": [("Nora moved to a flat with a garden.", "garden", "D3:1")],
    "conv-t:session_3:Omar": [("Omar played the cello at a wedding.", "wedding", "D3:2")],
}

QUERIES: dict[str, dict[str, float]] = {
    "What is the name of Nora's cat?": {"cat": 1.0, "mural": 0.5},
    "What instrument did Omar play at the wedding?": {"wedding": 1.0, "cello": 0.8},
    "When did Omar run the Rotterdam marathon?": {"bicycle": 1.0, "marathon": 0.9},
    "What did Nora paint on her kitchen wall?": {"garden": 1.0, "harbour": 0.8, "porto": 0.6, "mural": 0.4},
    "Which of them keeps a pet, Nora or Omar?": {"cafe": 1.0, "nurse": 0.9, "porto": 0.8, "bicycle": 0.7,
                                                 "garden": 0.6, "harbour": 0.5, "cat": 0.1},
}


def _unnamed(text: str) -> str:
    return " ".join(re.findall(r"\w+", re.sub(r"\b(Nora|Omar)('s)?\b", " ", text)))


class TableEmbedder:
    """Each memory on its own axis, each question the weighted axes written above: nothing else is known."""

    dim = len(AXES)

    def __init__(self) -> None:
        self.vectors = {text: {axis: 1.0} for rows in MEMORIES.values() for text, axis, _ in rows}
        self.vectors.update(QUERIES)
        self.unnamed = {_unnamed(q): q for q in QUERIES}
        """A question with the speakers' names left out (as the ranking embeds it) is the same question."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for axis, weight in self.vectors[text if text in self.vectors else self.unnamed[_unnamed(text)]].items():
                out[row, AXES.index(axis)] = weight
        return out / np.linalg.norm(out, axis=1, keepdims=True)


DAYS = {"session_1": "2023-03-03", "session_2": "2023-04-20", "session_3": "2023-06-02"}
"""The fixture's session dates."""


def graphs() -> list[MemoryGraph]:
    return [MemoryGraph(session_id=sid, user=sid.rsplit(":", 1)[1], timestamp=DAYS[sid.split(":")[1]],
                        nodes=[MemoryEntry(id=i, text=text, origin="draft", verification="entailed", turn_ids=[turn],
                                           date=DAYS[sid.split(":")[1]])
                               for i, (text, _, turn) in enumerate(rows)],
                        edges=[], details=[], events=[], stats=RunStats())
            for sid, rows in MEMORIES.items()]


DENSE_ONLY = RankingConfig(lexical=False, names=False, speaker=False, dedup=False, when=False)
"""The ranking before the hybrid one: cosine alone."""


def test_evidence_recall_per_category_through_the_store(tmp_path: Path) -> None:
    bench = load_benchmark("locomo", write_locomo(tmp_path))
    config = scripted_config()
    with Engine(config, llm=ScriptedLLM(config.llm), embedder=TableEmbedder()) as engine:
        index = evaluation_index(engine, graphs(), tmp_path / "store.db")
        result = evidence_recall(engine, bench, graphs(), index, kind="locomo", ks=(1, 2, 5, 7), ranking=DENSE_ONLY)

    # by hand, the first memory grounded in an evidence turn: the cat (rank 1); the wedding (1); the marathon
    # after the bicycle (2); the mural after garden, harbour and Porto (4); the cat after cafe, nurse, Porto,
    # bicycle, garden and harbour (7: the cafe memory of both speakers' copies counts once)
    ranks = {row["question"]: row["rank"] for row in result["questions"]}
    assert ranks == {"What is the name of Nora's cat?": 1, "What instrument did Omar play at the wedding?": 1,
                     "When did Omar run the Rotterdam marathon?": 2, "What did Nora paint on her kitchen wall?": 4,
                     "Which of them keeps a pet, Nora or Omar?": 7}
    assert result["level"] == "turn" and result["questions_without_evidence"] == 1  # the adversarial one
    by = result["by_category"]
    assert by["single-hop"] == {"n": 2, "recall@1": 0.5, "recall@2": 0.5, "recall@5": 1.0, "recall@7": 1.0}
    assert by["multi-hop"] == {"n": 1, "recall@1": 1.0, "recall@2": 1.0, "recall@5": 1.0, "recall@7": 1.0}
    assert by["temporal"] == {"n": 1, "recall@1": 0.0, "recall@2": 1.0, "recall@5": 1.0, "recall@7": 1.0}
    assert by["open-domain"] == {"n": 1, "recall@1": 0.0, "recall@2": 0.0, "recall@5": 0.0, "recall@7": 1.0}
    assert result["overall"] == {"n": 5, "recall@1": 2 / 5, "recall@2": 3 / 5, "recall@5": 4 / 5, "recall@7": 1.0}


def test_hybrid_ranking_lifts_the_memories_a_question_names_by_word_and_speaker(tmp_path: Path) -> None:
    bench = load_benchmark("locomo", write_locomo(tmp_path))
    config = scripted_config()
    with Engine(config, llm=ScriptedLLM(config.llm), embedder=TableEmbedder()) as engine:
        index = evaluation_index(engine, graphs(), tmp_path / "store.db")
        result = evidence_recall(engine, bench, graphs(), index, kind="locomo", ks=(1, 2, 5, 7))

    # by hand, reciprocal rank fusion with k = 60 (a memory scores 1/(60 + dense rank) + 1/(60 + BM25 rank),
    # halved when it is the other speaker's), BM25 over stems ("painted" is "paint"):
    # - marathon: "marathon" is the only question word in a memory, so BM25 ranks "Omar ran a marathon." first:
    #   1/62 + 1/61 beats the bicycle's 1/61 (dense alone: 2);
    # - mural: "paint" is only in "Nora painted a mural of Pebble.": 1/64 + 1/61 beats the garden's 1/61 (dense
    #   alone: 4); with the speaker step alone, Nora is named, so Omar's harbour (dense 2) is halved, 1/124,
    #   below Nora's porto (1/63) and mural (1/64): 3;
    # - the pet question names both speakers and shares no word with a memory: dense order, 7, as before
    ranks = {row["question"]: row["rank"] for row in result["questions"]}
    assert ranks == {"What is the name of Nora's cat?": 1, "What instrument did Omar play at the wedding?": 1,
                     "When did Omar run the Rotterdam marathon?": 1, "What did Nora paint on her kitchen wall?": 1,
                     "Which of them keeps a pet, Nora or Omar?": 7}
    by_question = {row["question"]: row["variants"] for row in result["questions"]}
    marathon, mural = by_question["When did Omar run the Rotterdam marathon?"], by_question[
        "What did Nora paint on her kitchen wall?"]
    assert (marathon["dense"], marathon["dense+lexical"], marathon["lexical"]) == (2, 1, 1)
    assert (mural["dense"], mural["dense+speaker"], mural["dense+lexical"], mural["all-lexical"]) == (
        4, 3, 1, 3)
    variants = result["variants"]
    assert variants["dense"]["recall@1"] == 2 / 5 and variants["dense+lexical"]["recall@1"] == 4 / 5
    assert variants["all"]["recall@5"] == 4 / 5 and variants["all"]["recall@7"] == 1.0
    # a random order of the 11 distinct memories: one grounded memory is among the first k with chance k/11;
    # the wedding question has two (cello and wedding): 1 - C(9, k) / C(11, k)
    assert result["random"]["overall"]["recall@1"] == pytest.approx((4 * 1 / 11 + 2 / 11) / 5)
    assert result["random"]["overall"]["recall@7"] == pytest.approx((4 * 7 / 11 + 1 - 36 / 330) / 5)


def test_the_words_a_memory_was_taken_from_find_it_for_the_lexical_side(tmp_path: Path) -> None:
    """Each memory's source is its turn's line of the fixture, as extraction keeps the owner's words."""
    import dataclasses

    from locomo_fixture import CONVERSATION

    said = {turn["dia_id"]: turn["text"] for key, turns in CONVERSATION["conversation"].items()
            if key.startswith("session_") and isinstance(turns, list) for turn in turns}
    sourced = graphs()
    for made in sourced:
        for node in made.nodes:
            node.source = said[node.turn_ids[0]]
    bench = load_benchmark("locomo", write_locomo(tmp_path))
    user = bench.users[0]
    cat = next(q for q in user.questions if q.question == "What is the name of Nora's cat?")
    asked = "Which hospital in the city employs someone?"  # "hospital" and "city" were said, never kept
    user.questions = [dataclasses.replace(cat, question_id="hospital", question=asked, evidence=("D1:3",),
                                          evidence_session_ids=("conv-t:session_1",))]
    embedder = TableEmbedder()
    embedder.vectors[asked] = {"cafe": 1.0, "porto": 0.9, "bicycle": 0.8, "garden": 0.7, "harbour": 0.6,
                               "nurse": 0.5}
    embedder.unnamed[_unnamed(asked)] = asked
    config = scripted_config()
    with Engine(config, llm=ScriptedLLM(config.llm), embedder=embedder) as engine:
        index = evaluation_index(engine, sourced, tmp_path / "store.db")
        result = evidence_recall(engine, bench, sourced, index, kind="locomo", ks=(1, 6))
    ranks = result["questions"][0]["variants"]
    # by hand: the nurse memory is 6th by cosine (after cafe, counted once, Porto, bicycle, garden, harbour);
    # BM25 finds it alone, by its source's "hospital" and "city", so the fusion puts it first
    # (1/66 + 1/61 against the cafe's 1/61); without the sources BM25 finds nothing; these memories keep no
    # exchange, so leaving it out changes nothing
    assert (ranks["all"], ranks["all-source"], ranks["lexical"], ranks["lexical-source"]) == (1, 6, 1, None)
    assert (ranks["all-exchange"], ranks["lexical-exchange"]) == (1, 1)


def test_time_aware_recall_sees_only_what_was_said_by_the_questions_time(tmp_path: Path) -> None:
    import dataclasses

    from promem_fast.eval.retrieval import _as_of
    from promem_fast.store import MemoryStore

    bench = load_benchmark("locomo", write_locomo(tmp_path))
    # the pet question asked on 21 April 2023, before the third session (garden, wedding) took place
    pet = "Which of them keeps a pet, Nora or Omar?"
    user = bench.users[0]
    user.questions = [dataclasses.replace(q, question_time="1:00 pm on 21 April, 2023") if q.question == pet else q
                      for q in user.questions]
    config = scripted_config()
    embedder = TableEmbedder()
    with Engine(config, llm=ScriptedLLM(config.llm), embedder=embedder) as engine:
        evaluation_index(engine, graphs(), tmp_path / "store.db")
        with MemoryStore(tmp_path / "store.db", config, embedder=embedder, update_judge="off") as store:
            result = evidence_recall(engine, bench, graphs(), _as_of(store, {g.session_id: g for g in graphs()}),
                                     kind="locomo", ks=(6, 7), ranking=DENSE_ONLY)
    ranks = {row["question"]: row["rank"] for row in result["questions"]}
    # the garden memory is not there yet: the cat comes after cafe, nurse, Porto, bicycle and harbour (6);
    # every other question is asked after the last session and ranks as without time (see above)
    assert ranks == {"What is the name of Nora's cat?": 1, "What instrument did Omar play at the wedding?": 1,
                     "When did Omar run the Rotterdam marathon?": 2, "What did Nora paint on her kitchen wall?": 4,
                     pet: 6}
    assert result["by_category"]["open-domain"] == {"n": 1, "recall@6": 1.0, "recall@7": 1.0}


def test_promem_eval_locomo_retrieval_writes_the_table(tmp_path: Path, capsys: Any) -> None:
    data = write_locomo(tmp_path)
    assert main(["eval", "locomo", "--data", str(data), "--retrieval", "--k", "1,10", "--time-aware",
                 "--profile", "scripted", "--no-progress", "-o", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "retrieval-locomo.json").read_text())
    assert result["without_time"]["ks"] == [1, 10] and result["without_time"]["overall"]["n"] == 5
    # every recall is a share of questions: at 10 no smaller than at 1
    for row in [*result["without_time"]["by_category"].values(), result["without_time"]["overall"]]:
        assert 0 <= row["recall@1"] <= row["recall@10"] <= 1
    # LoCoMo's questions are asked after the last session: as of then, every memory holds
    timed = result["with_time"]
    assert timed["measured"] and [q["rank"] for q in timed["questions"]] == [
        q["rank"] for q in result["without_time"]["questions"]]
    assert "| Category | n | recall@1 | recall@10 |" in printed and "Time-aware: only the memories" in printed
    assert (tmp_path / "retrieval-locomo.md").read_text().startswith("# Evidence recall@k: locomo")
    assert main(["eval", "locomo", "--data", str(data), "--retrieval", "--k", "0", "--profile", "scripted",
                 "-o", str(tmp_path)]) == 2
    assert "--k takes positive integers" in capsys.readouterr().err


def test_halumem_dev_user_gives_turn_and_session_level_figures(tmp_path: Path) -> None:
    from conftest import HALUMEM, skip_without_sample
    from promem_fast.eval.retrieval import run_retrieval

    skip_without_sample()

    config = scripted_config()
    result = run_retrieval("halumem", HALUMEM, config, out_dir=tmp_path, sessions=2, ks=(1, 20),
                           llm=ScriptedLLM(config.llm))
    plain = result["without_time"]
    assert plain["level"] == "turn" and plain["overall"]["n"] > 0
    # a memory anchored to an evidence turn comes from an evidence session: the session figure is never lower
    for k in (1, 20):
        assert plain["session_level"]["overall"][f"recall@{k}"] >= plain["overall"][f"recall@{k}"]
    assert "turn / session / random" in (tmp_path / "retrieval-halumem.md").read_text()


def test_halumem_evidence_text_is_placed_on_the_turn_that_says_most_of_it() -> None:
    from conftest import ROOT
    from promem_fast.eval.evidence import all_evidence_turns

    bench = load_benchmark("halumem", ROOT / "tests" / "fixtures" / "halumem_mini.jsonl")
    turns = all_evidence_turns("halumem", bench)
    by_question = {q.question: turns[q.question_id] for q in bench.questions}
    # "Ada Byron adopted a cat named Pixel.": turn 0 ("I adopted a cat last week, her name is Pixel. /
    # Congratulations on adopting Pixel!") shares adopted, cat and Pixel; turn 1 shares none of its words.
    # "... updated from baker to pastry chef.": turn 1 ("promoted to pastry chef") shares pastry and chef.
    assert by_question["What pet did Ada adopt?"] == {("u-ada:0", "0")}
    assert by_question["What is Ada's current job?"] == {("u-ada:0", "1")}
