"""Answering and ingesting through the store: the units evaluation retrieves from are the graph's own QA
units, ``answer`` reads current memory, and ``ingest`` extracts only sessions the store does not hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import Recording, make_session, scripted_config
from promem_fast.backends.base import NLIResult
from promem_fast.testing.embed_hashing import HashingEmbedder
from promem_fast.engine import Engine
from promem_fast.store.qa import memory_units
from promem_fast.store import MemoryStore, answering
from store_helpers import TopicEmbedder, graph


def test_store_units_and_vectors_are_the_graphs_qa_units(tmp_path: Path) -> None:
    graphs = [graph("a", "Maya", ["Maya adopted a beagle named Biscuit.", "Maya moved to Lisbon in May."],
                    details=[["Biscuit"], ["Lisbon", "May"]], edges=[(1, 0, "temporal")]),
              graph("b", "Ben", ["Ben plays chess on Sundays."], details=[["Sundays"]])]
    with MemoryStore(tmp_path / "m.db", scripted_config()) as store:
        store.add(graphs)
        index = store.retrieval_index(["a", "b", "gone"])
    embedder = HashingEmbedder(scripted_config().embedder)
    assert set(index.units) == {"a", "b"}
    for g in graphs:
        units = memory_units(g)
        assert index.units[g.session_id] == units
        np.testing.assert_allclose(index.vectors[g.session_id], embedder.embed([u.key for u in units]), atol=1e-6)


def test_answer_reads_current_memory_and_dates_it(tmp_path: Path) -> None:
    jobs = [graph("j1", "Maya", ["Maya works as a nurse at Mercy hospital in Boston."], timestamp="2024-01-10"),
            graph("j2", "Maya", ["Maya works as a teacher at Lincoln school in Boston."], timestamp="2024-06-10")]
    config = scripted_config()
    topic = TopicEmbedder()
    with MemoryStore(tmp_path / "m.db", config, embedder=topic) as store, Engine(config, embedder=topic) as engine:
        store.add(jobs)
        (reply,) = store.answer("Maya", ["Where does Maya work as a teacher or nurse?"], engine=engine)
    # the answerer is shown the current job only, dated with its weekday (what it answers is the stand-in's)
    assert [(r["session_id"], r["date"], r["text"]) for r in reply["retrieved"]] == [
        ("j2", "2024-06-10 (Monday)", "Maya works as a teacher at Lincoln school in Boston.")]


def test_ingest_extracts_only_what_the_store_lacks(tmp_path: Path) -> None:
    sessions = [make_session(f"s{i}", "Maya", [(f"I visited museum number {i} in Porto.", "Nice!")]) for i in range(3)]
    config = scripted_config()
    with MemoryStore(tmp_path / "m.db", config) as store:
        with Engine(config) as engine:
            assert store.ingest(sessions[:2], engine).sessions == 2
        with Engine(config) as engine:
            summary = store.ingest(sessions, engine)
        assert summary.sessions == 1
        assert store.sessions("Maya") == ["s0", "s1", "s2"]
        assert store.search("Maya", "museum number 2", k=1)[0].session_id == "s2"


def test_a_large_users_pool_preselected_by_the_index_gives_the_same_answers(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    topics = ["pottery", "sailing", "chess", "violin", "climbing", "baking", "astronomy", "cycling"]
    graphs = [graph(f"s{i}", "Maya", [f"Maya practised {topics[(i + j) % 8]} with friend{j} in week {i}."
                                      for j in range(25)], timestamp=f"2025-02-{i + 1:02d}") for i in range(12)]
    questions = ["When did Maya practise violin with friend3?", "Who sails with Maya?", "Maya baking week 7"]
    config = scripted_config()
    config.qa_top_k = 5
    with MemoryStore(tmp_path / "m.db", config, update_judge="off") as store, Engine(config) as engine:
        store.add(graphs)
        whole = store.answer("Maya", questions, engine=engine)
        monkeypatch.setattr(answering, "PRESELECT_ABOVE", 10)
        picked = store.answer("Maya", questions, engine=engine)
    # the pool: each question's 4 x 5 best on each side (dense and BM25), three questions: at most 120 of 300
    assert [a["candidates"] for a in whole] == [300] * 3 and all(a["candidates"] <= 120 for a in picked)
    # the same answer from nearly the same memories: BM25 over the smaller pool weighs a word a little
    # differently (its share of the pool's memories is not the user's), which may let one neighbour in
    for a, b in zip(whole, picked, strict=True):
        assert (a["prediction"], a["missing_sessions"]) == (b["prediction"], b["missing_sessions"])
        shown = [{(r["session_id"], r["text"]) for r in x["retrieved"]} for x in (a, b)]
        assert len(shown[0] & shown[1]) >= len(shown[0]) - 1, shown


class JobNLI:
    """NLI stand-in: a newer statement of another job contradicts an older one (from the pair alone)."""

    def entail(self, pairs: list[tuple[str, str]]) -> list[NLIResult]:
        jobs = ("nurse", "teacher", "pilot")
        out = []
        for premise, hypothesis in pairs:
            said = {j for j in jobs if j in premise}, {j for j in jobs if j in hypothesis}
            clash = all(said) and said[0] != said[1]
            out.append(NLIResult("contradiction", (0.0, 0.0, 1.0)) if clash
                       else NLIResult("neutral", (0.0, 1.0, 0.0)))
        return out


def test_the_nli_judge_supersedes_on_contradiction_in_one_batched_call(tmp_path: Path) -> None:
    config = scripted_config()
    config.nli.backend = "lexical"
    nli = Recording(JobNLI(), "entail")
    facts = [("nurse", "a cat"), ("teacher", "a dog")]
    jobs = [graph(f"j{i}", "Maya", [f"Maya works as a {job} in Boston.", f"Maya owns {pet} in Boston."],
                  timestamp=f"2024-0{i + 1}-10") for i, (job, pet) in enumerate(facts)]
    topic = TopicEmbedder()
    with MemoryStore(tmp_path / "m.db", config, update_judge="nli", embedder=topic) as store, \
            Engine(config, nli=nli, embedder=topic) as engine:
        store.add(jobs[:1], engine=engine)
        store.add(jobs[1:], engine=engine)
        old = {h.text: h.superseded_by for h in store.hits("Maya", history=True)}
    assert old["Maya works as a nurse in Boston."] is not None
    assert old["Maya owns a cat in Boston."] is None  # judged (similar wording) but not contradicted
    assert nli.batches == [len(nli.calls[0][0])] and len(nli.calls[0][0]) >= 2  # every pair in one call
