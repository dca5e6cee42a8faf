"""Memory that knows time and what repeats, on a hand-written person: Tom moves city, changes job, sells two
vehicles for a bike and says one fact twice across three sessions.

The update judge is the scripted chat model with a verdict table written by hand for the pairs of this
fixture (any other pair is "add"), so every expectation below is written by hand too: which memory is
current, which held in February, which is one memory said in two sessions, what a delete brings back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import scripted_config
from store_helpers import graph

from promem_fast.backends.base import NLIResult
from promem_fast.engine import Engine
from promem_fast.store import MemoryStore
from promem_fast.testing.eval_rules import EVAL_RULES
from promem_fast.testing.llm_scripted import ScriptedLLM

BOSTON = "Tom has his home in Boston."
NURSE = "Tom works as a nurse at Mercy Hospital."
CELLO = "Tom plays the cello in a community orchestra."
HONDA = "Tom drives a red Honda."
DENVER = "Tom has his home in Denver."
FINTECH = "Tom works in fintech."
VESPA = "Tom bought a blue Vespa scooter."
BIKE = "Tom sold his Honda and his Vespa and now rides a bike to work."

S1 = graph("s1", "Tom", [BOSTON, NURSE, CELLO, HONDA], timestamp="2024-01-15T09:00:00")
S2 = graph("s2", "Tom", [DENVER, FINTECH, VESPA], timestamp="2024-03-02T10:00:00")
S3 = graph("s3", "Tom", [FINTECH, BIKE], timestamp="2024-06-20T18:30:00")

VERDICTS = {
    (BOSTON, DENVER): ("update", "moved from Boston to Denver"),
    (NURSE, FINTECH): ("update", "left nursing for fintech"),
    (FINTECH, FINTECH): ("duplicate", "the same job said again"),
    (HONDA, BIKE): ("update", "sold the Honda"),
    (VESPA, BIKE): ("update", "sold the Vespa"),
}


def table_judge(fields: dict[str, str]) -> dict[str, str]:
    """The hand-written verdicts, read from the prompt's two entries only."""
    verdict, reason = VERDICTS.get((fields["old"], fields["new"]), ("add", "unrelated"))
    return {"verdict": verdict, "reason": reason}


def engine(shown: list[str] | None = None) -> Engine:
    def qa(fields: dict[str, str]) -> Any:
        if shown is not None:
            shown.append(fields["memories"])
        return EVAL_RULES["qa_memory"](fields)

    config = scripted_config()
    return Engine(config, llm=ScriptedLLM(config.llm, rules={"store_update": table_judge, "qa_memory": qa}))


def open_store(path: Path) -> MemoryStore:
    # every earlier memory is a candidate, so the table alone decides
    return MemoryStore(path, scripted_config(), update_min_cosine=-1.0, update_neighbours=10)


def state(store: MemoryStore) -> set[tuple[Any, ...]]:
    """The memory as texts: (text, sessions, replaced by, valid until, reason, merged into), ids left out."""
    hits = store.hits("Tom", history=True)
    text = {h.node_id: (h.session_id, h.text) for h in hits}
    return {(h.session_id, h.text, tuple(h.sessions), text.get(h.superseded_by), h.valid_until, h.reason,
             text.get(h.merged_into)) for h in hits}


def current(store: MemoryStore) -> set[tuple[str, tuple[str, ...]]]:
    return {(h.text, tuple(h.sessions)) for h in store.hits("Tom")}


def test_a_question_about_the_past_finds_the_fact_that_held_then(store_at: str) -> None:
    shown: list[str] = []
    with open_store(store_at) as store, engine(shown) as eng:
        store.add([S1, S2, S3], engine=eng)
        now = [h.text for h in store.search("Tom", "Where is Tom's home?", k=10)]
        assert DENVER in now and BOSTON not in now
        then = store.search("Tom", "Where is Tom's home?", k=10, as_of="2024-02-01")
        assert then[0].text == BOSTON
        assert (then[0].valid_from, then[0].valid_until) == ("2024-01-15T09:00:00", "2024-03-02T10:00:00")
        assert {h.text for h in then} == {BOSTON, NURSE, CELLO, HONDA}  # nothing said later
        # the day the move was said: the new city only from then on
        assert {h.text for h in store.search("Tom", "home", k=10, as_of="2024-03-02")} >= {DENVER}
        assert BOSTON not in {h.text for h in store.search("Tom", "home", k=10, as_of="2024-03-02")}
        # a window: what held at some time in January
        january = {h.text for h in store.search("Tom", "Tom", k=10, since="2024-01-01", until="2024-01-31")}
        assert january == {BOSTON, NURSE, CELLO, HONDA}
        (past,) = store.answer("Tom", ["Where is Tom's home?"], engine=eng, as_of="2024-02-01")
        (today,) = store.answer("Tom", ["Where is Tom's home?"], engine=eng)
    assert past["prediction"] == BOSTON and today["prediction"] == DENVER
    assert "[2024-01-15 (Monday)] Tom has his home in Boston." in shown[0].splitlines()
    assert all("Denver" not in line for line in shown[0].splitlines())
    assert past["as_of"] == "2024-02-01T23:59:59"
    assert any(m["memory"] == BOSTON and m["day"] == "2024-01-15 (Monday)" for m in past["memories"])


def test_a_repeated_fact_is_one_memory_with_both_sessions(store_at: str) -> None:
    with open_store(store_at) as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
        assert current(store) == {(DENVER, ("s2",)), (FINTECH, ("s2", "s3")), (CELLO, ("s1",)), (BIKE, ("s3",))}
        hits = store.search("Tom", "What is Tom's job?", k=10)
        assert [h.text for h in hits].count(FINTECH) == 1
        (kept,) = [h for h in hits if h.text == FINTECH]
        events = store.session_events("Tom", "s3")
    assert events[0] == {"id": events[0]["id"], "memory": FINTECH, "event": "duplicate", "replaces": [],
                         "duplicate_of": kept.node_id, "reason": "the same job said again"}
    assert events[1]["event"] == "update" and events[1]["reason"] == "sold the Honda; sold the Vespa"


def test_history_is_the_graph_of_replacements(store_at: str) -> None:
    with open_store(store_at) as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
        ids = {h.text: h.node_id for h in store.hits("Tom", history=True) if h.session_id != "s3" or h.text == BIKE}
        found = store.history_graph(ids[BIKE])
    assert [n["memory"] for n in found["nodes"]] == [HONDA, VESPA, BIKE]
    assert found["edges"] == [
        {"old": ids[HONDA], "new": ids[BIKE], "kind": "update", "reason": "sold the Honda"},
        {"old": ids[VESPA], "new": ids[BIKE], "kind": "update", "reason": "sold the Vespa"}]
    honda = found["nodes"][0]
    assert (honda["superseded_by"], honda["valid_until"], honda["reason"]) == (
        ids[BIKE], "2024-06-20T18:30:00", "sold the Honda")


def test_deleting_a_session_restores_the_memory_as_if_it_had_never_been_added(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
        assert store.delete(user="Tom", session="s2", engine=eng) == 3
        # written by hand: Boston is current again, the job said in s3 now replaces the nurse job itself,
        # and the bike replaces the Honda only (the Vespa is gone)
        assert current(store) == {(BOSTON, ("s1",)), (CELLO, ("s1",)), (FINTECH, ("s3",)), (BIKE, ("s3",))}
        after = state(store)
    assert after == {
        ("s1", BOSTON, ("s1",), None, None, None, None),
        ("s1", NURSE, ("s1",), ("s3", FINTECH), "2024-06-20T18:30:00", "left nursing for fintech", None),
        ("s1", CELLO, ("s1",), None, None, None, None),
        ("s1", HONDA, ("s1",), ("s3", BIKE), "2024-06-20T18:30:00", "sold the Honda", None),
        ("s3", FINTECH, ("s3",), None, None, None, None),
        ("s3", BIKE, ("s3",), None, None, None, None)}
    with open_store(tmp_path / "b.db") as never, engine() as eng:
        never.add([S1, S3], engine=eng)
        assert state(never) == after


def test_deleting_a_memory_restores_what_it_had_absorbed(store_at: str) -> None:
    with open_store(store_at) as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
        (fintech,) = [h.node_id for h in store.hits("Tom") if h.text == FINTECH]
        assert store.delete(user="Tom", node=fintech, engine=eng) == 1
        # the saying in s3 stands on its own now, and replaces the nurse job
        assert current(store) == {(DENVER, ("s2",)), (CELLO, ("s1",)), (FINTECH, ("s3",)), (BIKE, ("s3",))}
        (nurse,) = [h for h in store.hits("Tom", history=True) if h.text == NURSE]
        assert (nurse.valid_until, nurse.reason) == ("2024-06-20T18:30:00", "left nursing for fintech")


@pytest.mark.parametrize("order", [[S3, S1, S2], [S2, S3, S1], [S1, S3, S2]])
def test_sessions_arriving_out_of_order_give_the_memory_of_the_canonical_order(tmp_path: Path,
                                                                                order: list[Any]) -> None:
    with open_store(tmp_path / "a.db") as ordered, engine() as eng:
        ordered.add([S1, S2, S3], engine=eng)
        expected = state(ordered)
    with open_store(tmp_path / "b.db") as shuffled, engine() as eng:
        for g in order:
            shuffled.add([g], engine=eng)
        assert state(shuffled) == expected


def test_a_store_of_schema_1_gains_validity_times_from_its_own_dates(tmp_path: Path) -> None:
    from promem_fast.persistence.schema import MIGRATIONS

    raw = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    raw.execute("BEGIN")
    MIGRATIONS[1](raw)
    raw.execute("PRAGMA user_version = 1")
    raw.execute("INSERT INTO tenants (id, name) VALUES (1, 'default')")
    raw.execute("INSERT INTO users (id, tenant_id, name) VALUES (1, 1, 'Tom')")
    for pk, sid, ts in [(1, "s1", "9:00 am on 15 January, 2024"), (2, "s2", "2024-03-02T10:00:00+01:00")]:
        raw.execute("INSERT INTO sessions VALUES (?, 1, ?, ?, 'promem', '[]', '{}')", (pk, sid, ts))
    raw.execute("INSERT INTO nodes (id, session_pk, user_id, local_id, text, date, data) VALUES "
                "(1, 1, 1, 0, ?, '2024-01-15', '{}'), (2, 2, 1, 0, ?, NULL, '{}')", (BOSTON, DENVER))
    raw.execute("UPDATE nodes SET superseded_by = 2 WHERE id = 1")
    raw.execute("INSERT INTO supersedes VALUES (1, 2, 'llm')")
    raw.execute("COMMIT")
    raw.close()
    with open_store(tmp_path / "old.db") as store:
        hits = {h.text: h for h in store.hits("Tom", history=True)}
    assert (hits[BOSTON].valid_from, hits[BOSTON].valid_until) == ("2024-01-15T09:00:00", "2024-03-02T09:00:00")
    assert (hits[DENVER].valid_from, hits[DENVER].valid_until, hits[DENVER].sessions) == (
        "2024-03-02T09:00:00", None, ["s2"])


class TableNLI:
    """Hand-written NLI labels for this fixture's (premise, hypothesis) pairs; any other pair is neutral."""

    LABELS: ClassVar[dict[tuple[str, str], str]] = {
        (DENVER, BOSTON): "contradiction", (FINTECH, FINTECH): "entailment",
        (FINTECH, NURSE): "contradiction", (BIKE, HONDA): "contradiction", (BIKE, VESPA): "contradiction",
        # one way only: the bike entails nothing back, so this pair is no duplicate
        (HONDA, BIKE): "entailment"}

    def entail(self, pairs: Any) -> list[NLIResult]:
        out = []
        for pair in pairs:
            label = self.LABELS.get(tuple(pair), "neutral")
            out.append(NLIResult(label, (float(label == "entailment"), float(label == "neutral"),
                                         float(label == "contradiction"))))
        return out


def test_the_nli_judge_reads_contradiction_as_update_and_mutual_entailment_as_duplicate(store_at: str) -> None:
    config = scripted_config()
    config.nli.backend = "onnx"  # any model backend: the injected one answers
    with MemoryStore(store_at, scripted_config(), update_judge="nli", update_min_cosine=-1.0,
                     update_neighbours=10) as store, Engine(config, nli=TableNLI()) as eng:
        store.add([S1, S2, S3], engine=eng)
        assert current(store) == {(DENVER, ("s2",)), (FINTECH, ("s2", "s3")), (CELLO, ("s1",)), (BIKE, ("s3",))}
        (honda,) = [h for h in store.hits("Tom", history=True) if h.text == HONDA]
    assert honda.reason == "nli: the new entry contradicts the earlier one"


def test_an_export_carries_merges_and_replacements_with_their_reasons(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.db") as store, engine() as eng:
        store.add([S1, S2, S3], engine=eng)
        store.export(tmp_path / "a.jsonl")
        expected = state(store)
    with open_store(tmp_path / "b.db") as copy:
        assert copy.import_(tmp_path / "a.jsonl") == 3
        assert state(copy) == expected
        copy.export(tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_sessions_stored_but_not_yet_judged_when_a_run_stopped_are_judged_by_the_next_add(store_at: str) -> None:
    from promem_fast.store.ordering import write_pending

    with open_store(store_at) as store:  # a run killed after storing, before judging
        write_pending(store, "default", [S1, S2, S3], store._embed_graphs([S1, S2, S3]))
        assert current(store) == set()  # not shown: unjudged, each session's memories would all look current
    with open_store(store_at) as store, engine() as eng:
        store.add([graph("x1", "Ann", ["Ann plays chess."])], engine=eng)  # another user's session
        assert current(store) == {(DENVER, ("s2",)), (FINTECH, ("s2", "s3")), (CELLO, ("s1",)), (BIKE, ("s3",))}


def test_a_backup_taken_while_sessions_wait_for_judging_keeps_them_waiting(tmp_path: Path) -> None:
    """An export made while a writer judges (a backup of a running service) marks the sessions still waiting;
    the copy keeps them waiting, unseen, and its next add judges them as the source would have: not sessions
    with no links, whose memories would all stay current."""
    from promem_fast.store.ordering import write_pending

    with open_store(tmp_path / "a.db") as store, engine() as eng:
        store.add([S1], engine=eng)
        write_pending(store, "default", [S2, S3], store._embed_graphs([S2, S3]))  # stored, verdicts to come
        store.export(tmp_path / "a.jsonl")
    with open_store(tmp_path / "b.db") as copy, engine() as eng:
        assert copy.import_(tmp_path / "a.jsonl") == 3
        assert current(copy) == {(text, ("s1",)) for text in (BOSTON, NURSE, CELLO, HONDA)}
        copy.add([graph("x1", "Ann", ["Ann plays chess."])], engine=eng)
        assert current(copy) == {(DENVER, ("s2",)), (FINTECH, ("s2", "s3")), (CELLO, ("s1",)), (BIKE, ("s3",))}


def test_asking_ahead_for_several_sessions_gives_the_links_of_one_at_a_time_in_fewer_rounds(
        tmp_path: Path) -> None:
    jobs, homes = ["nurse", "surgeon", "porter"], ["Boston", "Denver"]
    days = [graph(f"d{day}", "Tom", [f"Tom works at the Mercy hospital as a {jobs[day % 3]} on night shifts.",
                                     f"Tom lives in a small flat in {homes[day % 2]} near the old harbour.",
                                     f"Tom keeps {day + 1} plants on his balcony."],
                  timestamp=f"2024-02-{day + 1:02d}T09:00:00") for day in range(12)]
    found, calls = [], []
    for lookahead in (1, 8):
        config = scripted_config()
        llm = ScriptedLLM(config.llm)
        with MemoryStore(tmp_path / f"{lookahead}.db", config, update_lookahead=lookahead) as store, \
                Engine(config, llm=llm) as eng:
            store.add(days, engine=eng)
            found.append(state(store))
        calls.append(len(llm.calls))
    assert found[0] == found[1]
    assert sum(1 for row in found[0] if row[3] is not None) >= 20  # jobs, homes and plant counts replaced
    assert calls[0] == 11 and calls[1] <= 3  # one judge run per session after the first, against a few

def test_deleting_the_sessions_of_a_scope_at_once_judges_the_rest_once_as_adding_them_would(
        tmp_path: Path) -> None:
    """mem0's ``delete_all(user_id=, agent_id=)``: every session of one agent goes, in one step. The memory is
    then that of a store never given those sessions, and the sessions after them are judged once, asking the
    judge what adding them to the first would ask (deleting one by one judges s3 twice: after s2, after s4)."""
    from dataclasses import replace

    s4 = graph("s4", "Tom", [BOSTON, VESPA], timestamp="2024-08-01T09:00:00")
    s5 = graph("s5", "Tom", [HONDA], timestamp="2024-09-01T09:00:00")
    bot = {"agent_id": "relocation-bot"}
    sessions = [S1, replace(S2, metadata=bot), S3, replace(s4, metadata=bot), s5]

    def counting_engine(asked: list[int]) -> Engine:
        def judge(fields: dict[str, str]) -> dict[str, str]:
            asked.append(1)
            return table_judge(fields)
        config = scripted_config()
        return Engine(config, llm=ScriptedLLM(config.llm, rules={"store_update": judge}))

    deleting: list[int] = []
    with open_store(tmp_path / "a.db") as store, counting_engine(deleting) as eng:
        store.add(sessions, engine=eng)
        deleting.clear()
        assert store.delete(user="Tom", filters=bot, engine=eng) == 5  # s2's three memories and s4's two
        assert store.sessions("Tom") == ["s1", "s3", "s5"]
        # what s2 had done is undone: Boston is current again (s3 and s5 say nothing of a home)
        assert (BOSTON, ("s1",)) in current(store) and not any(t == DENVER for t, _ in current(store))
        after = state(store)
    adding: list[int] = []
    with open_store(tmp_path / "b.db") as never, counting_engine(adding) as eng:
        never.add([S1], engine=eng)
        adding.clear()
        never.add([S3, s5], engine=eng)
        assert state(never) == after
    assert len(deleting) == len(adding) > 0
