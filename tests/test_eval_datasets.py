"""Benchmark loaders on small hand-written fixtures (one per schema, with the odd cases each real file has)
and on the real HaluMem development sample. Expected values are read off the fixtures by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import HALUMEM, TOMAS, skip_without_sample

from promem_fast.errors import ConfigError, InputError
from promem_fast.eval import (
    LOCOMO_CATEGORIES,
    load_benchmark,
    load_halumem,
    load_locomo,
    load_longmemeval,
)

FIXTURES = Path(__file__).parent / "fixtures"


# ============================================================================================= HaluMem
@pytest.fixture(scope="module")
def halumem():
    return load_halumem(FIXTURES / "halumem_mini.jsonl")


def test_halumem_counts_and_names(halumem):
    assert halumem.counts() == {"users": 2, "sessions": 5, "memory_points": 6, "questions": 5}
    assert [u.name for u in halumem.users] == ["Ada Byron", "Bo Chen"]
    assert [u.user_id for u in halumem.users] == ["u-ada", "u-bo"]
    assert [s.session_id for s in halumem.sessions] == ["u-ada:0", "u-ada:1", "u-ada:2", "u-ada:3", "u-bo:0"]
    assert halumem.name == "halumem"


def test_halumem_session_turns_and_times(halumem):
    first = halumem.users[0].sessions[0]
    assert first.user == "Ada Byron" and first.owner_role == "user"
    assert first.timestamp == "Jan 01, 2025, 09:00:00"
    assert first.metadata["end_time"] == "Jan 01, 2025, 09:30:00"
    assert first.metadata["distractor"] is False
    groups = first.turn_groups()
    assert [tid for tid, _ in groups] == [0, 1]
    assert [m.role for m in groups[1][1]] == ["user", "assistant"]
    assert groups[1][1][0].text == "Also, I was promoted to pastry chef."
    assert groups[1][1][0].timestamp == "Jan 01, 2025, 09:10:00"


def test_halumem_distractor_session_kept_and_paired(halumem):
    distractor = halumem.users[0].sessions[2]
    assert distractor.metadata["distractor"] is True
    assert distractor.metadata["title"] == "Pure_QA_Session"
    # no dialogue_turn in the file: user messages open turns, replies join them
    assert [t.turn_id for t in distractor.turns] == [0, 0, 1, 1]
    assert all(t.timestamp is None for t in distractor.turns)


def test_halumem_memory_points(halumem):
    ada = halumem.users[0]
    by_session = ada.memory_points_by_session()
    assert [len(by_session[f"u-ada:{i}"]) for i in range(4)] == [3, 1, 0, 1]
    plain, update, planted = by_session["u-ada:0"]
    assert plain.is_update is False and plain.importance == 0.75 and plain.memory_type == "Event Memory"
    assert update.is_update is True
    assert update.original_memories == ("Ada Byron works as a baker",)
    assert planted.is_interference and not plain.is_interference
    assert planted.index == 3 and planted.importance == 1.0
    assert planted.metadata["reference_memory_index"] == 1
    assert planted.metadata["reason"] == "Planted to confuse which pet Ada adopted."
    assert by_session["u-ada:1"][0].source == "primary"


def test_halumem_questions(halumem):
    qs = {q.question_id: q for q in halumem.questions}
    # session 1 has no questions key
    assert sorted(qs) == ["u-ada:0:q0", "u-ada:0:q1", "u-ada:3:q0", "u-bo:0:q0", "u-bo:0:q1"]
    first = qs["u-ada:0:q0"]
    assert first.session_ids == ("u-ada:0",)
    assert first.evidence_session_ids == ("u-ada:0",)
    assert first.question_time == "Jan 01, 2025, 09:30:00"
    assert first.difficulty == "easy" and first.question_type == "Basic Fact Recall"
    hop = qs["u-ada:3:q0"]
    assert hop.session_ids == ("u-ada:0", "u-ada:1", "u-ada:2", "u-ada:3")
    assert hop.session_dates == ("Jan 01, 2025, 09:00:00", "Jan 05, 2025, 18:00:00", "Jan 06, 2025, 12:00:00",
                                 "Jan 09, 2025, 08:00:00")
    assert hop.evidence_session_ids == ("u-ada:1", "u-ada:3")
    assert hop.answer == "Paris" and hop.question_time == "Jan 09, 2025, 08:45:00"
    assert hop.evidence[0]["memory_type"] == "Relationship Memory"
    assert qs["u-bo:0:q0"].user_id == "u-bo"
    boundary = qs["u-bo:0:q1"]
    assert boundary.abstention and boundary.evidence == () and boundary.evidence_session_ids == ()
    assert not any(q.abstention for qid, q in qs.items() if qid != "u-bo:0:q1")


def test_halumem_limit(halumem):
    assert [u.user_id for u in load_halumem(FIXTURES / "halumem_mini.jsonl", limit=1).users] == ["u-ada"]
    assert load_halumem(FIXTURES / "halumem_mini.jsonl", limit=0).users == []
    with pytest.raises(ConfigError):
        load_halumem(FIXTURES / "halumem_mini.jsonl", limit=-1)


def test_halumem_variant_name_from_file(tmp_path):
    target = tmp_path / "HaluMem-Long.jsonl"
    shutil.copy(FIXTURES / "halumem_mini.jsonl", target)
    assert load_halumem(target).name == "halumem-long"


def _one_user(**session_overrides):
    session = {
        "start_time": "Jan 01, 2025, 09:00:00", "end_time": "Jan 01, 2025, 09:30:00",
        "dialogue": [{"role": "user", "content": "hi", "timestamp": "t", "dialogue_turn": 0}],
        "memory_points": [{"index": 1, "memory_content": "x", "memory_type": "Persona Memory",
                           "memory_source": "secondary", "is_update": "False", "importance": 0.5}],
    }
    session.update(session_overrides)
    return {"uuid": "u-x", "persona_info": "Name: X Y; Gender: Male.", "sessions": [session]}


def test_halumem_bad_json_names_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_one_user()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_halumem(path)
    assert err.value.line == 2 and err.value.file == str(path)


def test_halumem_bad_update_flag_names_field(tmp_path):
    record = _one_user()
    record["sessions"][0]["memory_points"][0]["is_update"] = "Maybe"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_halumem(path)
    assert err.value.line == 1
    assert err.value.session_id == "u-x:0"
    assert err.value.field == "sessions[0].memory_points[0].is_update"


def test_halumem_missing_content_names_message(tmp_path):
    record = _one_user(dialogue=[{"role": "user", "content": "hi", "dialogue_turn": 0},
                                 {"role": "assistant", "dialogue_turn": 0}])
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_halumem(path)
    assert err.value.field == "sessions[0].dialogue[1].content"
    assert "missing required field" in str(err.value)


def test_halumem_name_falls_back_to_uuid(tmp_path):
    record = _one_user()
    record["persona_info"] = "Gender: Male; Location: Oslo."
    path = tmp_path / "anon.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    user = load_halumem(path).users[0]
    assert user.name == "u-x" and user.sessions[0].user == "u-x"


def test_the_hand_written_halumem_user():
    """The tests' own HaluMem-schema user (tests/fixtures/halumem_tomas.jsonl), counted by hand."""
    bench = load_halumem(TOMAS)
    assert bench.counts() == {"users": 1, "sessions": 12, "memory_points": 20, "questions": 3}
    user = bench.users[0]
    assert user.name == "Tomas Berg" and user.sessions[2].session_id == "u-tomas:2"
    assert user.sessions[2].timestamp == "Mar 02, 2025, 09:00:00"
    assert [len(s.turn_groups()) for s in user.sessions] == [3] * 12
    assert sorted(p.content for p in user.memory_points if p.is_update) == [
        "Tomas Berg cycles to work instead of running.", "Tomas Berg lives in Oslo.",
        "Tomas Berg stopped running after a left knee injury.",
        "Tomas Berg was promoted to ward manager at Ulleval hospital.",
        "Tomas Berg works as a charge nurse at Ulleval hospital."]
    job = next(q for q in bench.questions if q.question == "What is Tomas's job now?")
    assert job.answer == "Ward manager at Ulleval hospital" and job.question_time == "Jul 06, 2025, 09:20:00"
    assert len(job.session_ids) == 12 and job.evidence_session_ids == ("u-tomas:11",)


def test_real_halumem_sample():
    skip_without_sample()
    bench = load_halumem(HALUMEM)
    assert bench.counts() == {"users": 1, "sessions": 29, "memory_points": 297, "questions": 67}
    user = bench.users[0]
    assert user.name == "Martin Mark"
    assert user.sessions[0].session_id == "2f1f897e-d67f-dbc5-6a7b-b7634a9e294f:0"
    assert user.sessions[0].timestamp == "Jan 15, 2029, 15:12:20"
    raw = json.loads(HALUMEM.read_text(encoding="utf-8").splitlines()[0])
    # the loader's turns match the file's own per-session turn counts, and its interference flags the raw field
    assert [len(s.turn_groups()) for s in user.sessions] == [s["dialogue_turn_num"] for s in raw["sessions"]]
    raw_interference = sum(m["memory_source"] == "interference" for s in raw["sessions"] for m in s["memory_points"])
    assert sum(p.is_interference for p in user.memory_points) == raw_interference > 0
    raw_updates = sum(m["is_update"] == "True" for s in raw["sessions"] for m in s["memory_points"])
    assert sum(p.is_update for p in user.memory_points) == raw_updates > 0
    raw_boundary = sum(q["question_type"] == "Memory Boundary" for s in raw["sessions"] for q in s.get("questions", []))
    assert sum(q.abstention for q in bench.questions) == raw_boundary > 0
    # every evidence statement of the sample is a gold point of an earlier-or-same session
    for q in bench.questions:
        assert bool(q.evidence_session_ids) == bool(q.evidence) != q.abstention
        assert set(q.evidence_session_ids) <= set(q.session_ids)
        assert q.session_ids[-1] == f"{user.user_id}:{q.metadata['session_index']}"


# ============================================================================================= LoCoMo
@pytest.fixture(scope="module")
def locomo():
    return load_locomo(FIXTURES / "locomo_mini.json")


def test_locomo_counts_and_sessions(locomo):
    assert locomo.counts() == {"users": 2, "sessions": 6, "memory_points": 4, "questions": 6}
    conv = locomo.users[0]
    assert conv.user_id == "conv-1" and conv.name == "Ann and Ben"
    # session_3 has a date but no dialogue: not a session
    assert [s.session_id for s in conv.sessions] == [
        "conv-1:session_1:Ann", "conv-1:session_1:Ben", "conv-1:session_2:Ann", "conv-1:session_2:Ben"]


def test_locomo_peer_sessions(locomo):
    ann, ben = locomo.users[0].sessions[:2]
    assert (ann.user, ann.owner_role, ben.user, ben.owner_role) == ("Ann", "Ann", "Ben", "Ben")
    assert ann.turns == ben.turns  # the same dialogue, seen from each speaker
    assert ben.metadata["interlocutor"] == "Ann" and ben.metadata["peer_session_id"] == ann.session_id
    assert ben.timestamp == "1:56 pm on 8 May, 2023"
    assert [t.turn_id for t in ben.turns] == ["D1:1", "D1:2", "D1:3"]
    assert [t.role for t in ben.turns] == ["Ann", "Ben", "Ann"]
    assert len(ben.turn_groups()) == 3
    assert ben.turns[1].text == "Nice! I started painting again. [shares a photo of a painting of a sunset]"
    assert ben.turns[0].text == "I went hiking at Lake Tahoe yesterday!"


def test_locomo_event_summary_gold(locomo):
    by_session = locomo.users[0].memory_points_by_session()
    assert [p.content for p in by_session["conv-1:session_1:Ann"]] == [
        "Ann goes hiking at Lake Tahoe.", "Ann adopts a dog named Max."]
    assert [p.content for p in by_session["conv-1:session_1:Ben"]] == ["Ben starts painting again."]
    assert by_session["conv-1:session_2:Ann"] == []
    point = by_session["conv-1:session_1:Ann"][0]
    assert point.source == "event_summary" and point.timestamp == "8 May, 2023"


def test_locomo_questions(locomo):
    q = locomo.users[0].questions
    assert [x.category for x in q] == [1, 2, 3, 4, 5]
    assert [x.question_type for x in q] == ["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"]
    assert q[0].evidence == ("D1:1", "D2:2")
    assert q[0].evidence_session_ids == (
        "conv-1:session_1:Ann", "conv-1:session_1:Ben", "conv-1:session_2:Ann", "conv-1:session_2:Ben")
    assert q[1].answer == "2022"  # an int in the file
    assert q[3].evidence == ("D1:3", "D2:1") and q[3].metadata["raw_evidence"] == ["D1:3; D2:1"]
    assert "raw_evidence" not in q[0].metadata
    adversarial = q[4]
    assert adversarial.answer is None and adversarial.abstention
    assert adversarial.metadata["adversarial_answer"] == "a sunset"
    assert not any(x.abstention for x in q[:4])
    # asked after the last session that has dialogue (session_3 only has a date)
    assert {x.question_time for x in q} == {"10:00 am on 20 May, 2023"}
    assert q[0].session_ids == tuple(s.session_id for s in locomo.users[0].sessions)
    assert q[0].session_dates == ("1:56 pm on 8 May, 2023",) * 2 + ("10:00 am on 20 May, 2023",) * 2
    assert q[0].question_id == "conv-1:q0"


def test_locomo_limit_and_dispatch():
    assert len(load_locomo(FIXTURES / "locomo_mini.json", limit=1).users) == 1
    assert load_benchmark("LoCoMo", FIXTURES / "locomo_mini.json").counts()["users"] == 2
    with pytest.raises(ConfigError):
        load_benchmark("squad", FIXTURES / "locomo_mini.json")


def test_locomo_category_names_cover_all_ids():
    assert sorted(LOCOMO_CATEGORIES) == [1, 2, 3, 4, 5]


def _locomo_record(**qa):
    base = {"question": "q?", "answer": "a", "evidence": ["D1:1"], "category": 4}
    base.update(qa)
    return [{"sample_id": "c", "conversation": {
        "speaker_a": "A", "speaker_b": "B", "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
        "qa": [base]}]


def test_locomo_bad_category(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_locomo_record(category=7)), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_locomo(path)
    assert err.value.field == "[0].qa[0].category" and err.value.file == str(path)


def test_locomo_missing_answer_outside_category_5(tmp_path):
    record = _locomo_record()
    del record[0]["qa"][0]["answer"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_locomo(path)
    assert err.value.field == "[0].qa[0].answer"


def test_locomo_unknown_speaker(tmp_path):
    record = _locomo_record()
    record[0]["conversation"]["session_1"][0]["speaker"] = "Zed"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_locomo(path)
    assert err.value.field == "[0].conversation.session_1[0].speaker"
    assert err.value.session_id == "c:session_1"


def test_locomo_invalid_json_names_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n{"sample_id": "c",\n oops}\n]', encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_locomo(path)
    assert err.value.line == 3


# ============================================================================================= LongMemEval
@pytest.fixture(scope="module")
def lme():
    return load_longmemeval(FIXTURES / "longmemeval_mini.json")


def test_longmemeval_items_and_dedup(lme):
    assert lme.counts() == {"users": 3, "sessions": 5, "memory_points": 0, "questions": 3}
    assert [s.session_id for s in lme.sessions] == [
        "answer_city_1", "filler_pasta", "filler_odd", "answer_runs_1", "answer_runs_2"]
    city, dog, _ = lme.users
    assert city.user_id == "q-city" and [q.question_id for q in city.questions] == ["q-city"]
    # the shared session is one object, dated where first seen; each question keeps its own date
    assert city.sessions[1] is dog.sessions[0]
    assert city.sessions[1].timestamp == "2023/05/25 (Thu) 14:30"
    assert dog.questions[0].session_dates == ("2023/07/01 (Sat) 12:00", "2023/07/02 (Sun) 12:00")
    assert lme.name == "longmemeval"


def test_longmemeval_turn_pairing(lme):
    index = lme.session_index()
    assert [t.turn_id for t in index["answer_city_1"].turns] == [0, 0, 1, 1]
    # assistant first, two user messages in a row, two replies in a row
    assert [t.turn_id for t in index["filler_odd"].turns] == [0, 1, 2, 2, 3]
    assert [t.role for t in index["filler_odd"].turns] == ["assistant", "user", "user", "assistant", "assistant"]
    assert all(s.owner_role == "user" and s.user == "user" for s in lme.sessions)


def test_longmemeval_questions(lme):
    city, dog, runs = lme.questions
    assert city.abstention is False and dog.abstention is True
    assert city.evidence_session_ids == ("answer_city_1",)
    assert city.question_time == "2023/06/01 (Thu) 10:00"
    assert city.metadata["evidence_turn_ids"] == {"answer_city_1": [0]}
    assert dog.evidence_session_ids == () and dog.metadata == {}
    assert runs.answer == "3"  # an int in the file
    assert runs.evidence_session_ids == ("answer_runs_1", "answer_runs_2")
    assert runs.metadata["evidence_turn_ids"] == {"answer_runs_1": [0], "answer_runs_2": [0]}
    assert runs.session_ids == ("answer_runs_1", "answer_runs_2")
    assert runs.question_type == "knowledge-update"


def test_longmemeval_limit():
    bench = load_longmemeval(FIXTURES / "longmemeval_mini.json", limit=2)
    assert bench.counts() == {"users": 2, "sessions": 3, "memory_points": 0, "questions": 2}


def _lme_record(qid, session_id, text):
    return {"question_id": qid, "question_type": "multi-session", "question": "?", "answer": "a",
            "question_date": "d", "haystack_session_ids": [session_id], "haystack_dates": ["d0"],
            "haystack_sessions": [[{"role": "user", "content": text}]], "answer_session_ids": []}


def test_longmemeval_same_id_different_text_kept_apart(tmp_path):
    path = tmp_path / "longmemeval_s_cleaned.json"
    path.write_text(json.dumps([_lme_record("a", "s1", "one"), _lme_record("b", "s1", "two"),
                                _lme_record("c", "s1", "one")]), encoding="utf-8")
    bench = load_longmemeval(path)
    assert bench.name == "longmemeval-s"
    assert [s.session_id for s in bench.sessions] == ["s1", "s1#2"]
    assert [q.session_ids for q in bench.questions] == [("s1",), ("s1#2",), ("s1",)]
    assert bench.session_index()["s1#2"].metadata["haystack_session_id"] == "s1"


def test_longmemeval_length_mismatch(tmp_path):
    record = _lme_record("a", "s1", "one")
    record["haystack_dates"] = []
    path = tmp_path / "longmemeval_oracle.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_longmemeval(path)
    assert err.value.field == "[0].haystack_sessions"


def test_longmemeval_bad_message_names_session(tmp_path):
    record = _lme_record("a", "s1", "one")
    record["haystack_sessions"][0].append({"role": "assistant"})
    path = tmp_path / "longmemeval_oracle.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_longmemeval(path)
    assert err.value.session_id == "s1"
    assert err.value.field == "[0].haystack_sessions[0][1].content"


# ============================================================================================= session limit
def test_halumem_first_sessions():
    bench = load_benchmark("halumem", FIXTURES / "halumem_mini.jsonl", sessions=1)
    assert bench.counts() == {"users": 2, "sessions": 2, "memory_points": 4, "questions": 4}
    assert [s.session_id for s in bench.sessions] == ["u-ada:0", "u-bo:0"]
    # Ada keeps the three points of her first session; Clara (session 1) and the March trip (session 3) go
    assert [(p.session_id, p.index) for p in bench.memory_points] == [
        ("u-ada:0", 1), ("u-ada:0", 2), ("u-ada:0", 3), ("u-bo:0", 1)]
    # the multi-hop question of session 3 needs sessions 1 and 3; Bo's memory-boundary question names no
    # evidence and stays since it is asked in his first session
    assert [q.question_id for q in bench.questions] == ["u-ada:0:q0", "u-ada:0:q1", "u-bo:0:q0", "u-bo:0:q1"]
    assert all(q.session_ids == (q.user_id + ":0",) for q in bench.questions)


def test_halumem_distractor_sessions_count_toward_the_session_limit():
    ada, bo = load_benchmark("halumem", FIXTURES / "halumem_mini.jsonl", sessions=3).users
    assert [s.session_id for s in ada.sessions] == ["u-ada:0", "u-ada:1", "u-ada:2"]
    assert [p.content for p in ada.memory_points][-1] == "Ada Byron's sister Clara lives in Paris."
    assert [q.question_id for q in ada.questions] == ["u-ada:0:q0", "u-ada:0:q1"]  # session 3 is still cut
    assert len(bo.questions) == 2


def test_halumem_question_without_evidence_needs_the_session_it_is_asked_in(tmp_path):
    record = json.loads((FIXTURES / "halumem_mini.jsonl").read_text(encoding="utf-8").splitlines()[0])
    record["sessions"][3]["questions"].append({"question": "What is Ada's blood type?", "answer": "Not mentioned",
                                               "evidence": [], "question_type": "Memory Boundary"})
    path = tmp_path / "halumem.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert [q.question_id for q in load_benchmark("halumem", path, sessions=3).questions if q.abstention] == []
    (kept,) = [q for q in load_benchmark("halumem", path, sessions=4).questions if q.abstention]
    assert kept.question_id == "u-ada:3:q1" and kept.session_ids == ("u-ada:0", "u-ada:1", "u-ada:2", "u-ada:3")


def test_locomo_first_sessions_counts_both_speakers_of_a_session_once():
    bench = load_benchmark("locomo", FIXTURES / "locomo_mini.json", sessions=1)
    assert [s.session_id for s in bench.sessions] == [
        "conv-1:session_1:Ann", "conv-1:session_1:Ben", "conv-2:session_1:Cleo", "conv-2:session_1:Dan"]
    assert bench.counts()["memory_points"] == 4  # session 2 has no annotated events
    # conv-1 keeps the questions whose evidence lies in session 1 only (open-domain D1:1, adversarial D1:2)
    assert [q.question_id for q in bench.questions] == ["conv-1:q2", "conv-1:q4", "conv-2:q0"]
    open_domain = bench.questions[0]
    assert open_domain.session_ids == ("conv-1:session_1:Ann", "conv-1:session_1:Ben")
    assert open_domain.session_dates == ("1:56 pm on 8 May, 2023",) * 2
    assert open_domain.question_time == "10:00 am on 20 May, 2023"  # still asked after the whole conversation


def test_longmemeval_first_sessions():
    bench = load_benchmark("longmemeval", FIXTURES / "longmemeval_mini.json", sessions=1)
    assert [s.session_id for s in bench.sessions] == ["answer_city_1", "filler_pasta", "answer_runs_1"]
    # q-runs needs both of its answer sessions; the abstention question names none, so it needs its whole
    # haystack
    (city,) = bench.questions
    assert city.question_id == "q-city"
    assert (city.session_ids, city.session_dates) == (("answer_city_1",), ("2023/05/20 (Sat) 09:00",))
    whole = load_benchmark("longmemeval", FIXTURES / "longmemeval_mini.json", sessions=2)
    assert [q.question_id for q in whole.questions] == ["q-city", "q-dog_abs", "q-runs"]


@pytest.mark.parametrize("sessions", [-1, 1.5, True])
def test_a_bad_session_limit_is_a_config_error(sessions):
    with pytest.raises(ConfigError, match="sessions must be a non-negative integer"):
        load_benchmark("halumem", FIXTURES / "halumem_mini.jsonl", sessions=sessions)
