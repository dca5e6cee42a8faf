"""Input validation (every error names file, line, session and field) and crash-safe output files."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from conftest import make_session, scripted_config
from promem_fast.engine import Engine
from promem_fast.errors import InputError
from promem_fast.io import GraphWriter, RejectWriter, export_graphs, load_sessions, read_sessions, session_from_dict
from promem_fast.types import MemoryGraph

GOOD = {"session_id": "a", "user": "Ann", "turns": [{"turn_id": 0, "role": "user", "text": "I like tea."}]}


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def errors_of(path: Path) -> list[InputError]:
    return [x for x in read_sessions(path) if isinstance(x, InputError)]


@pytest.mark.parametrize("record,field,message", [
    ({"user": "Ann", "turns": GOOD["turns"]}, "session_id", "missing field"),
    ({"session_id": 3.5, "user": "Ann", "turns": GOOD["turns"]}, "session_id", "must be a string"),
    ({"session_id": "x", "turns": GOOD["turns"]}, "user", "missing field"),
    ({"session_id": "x", "user": "Ann", "turns": []}, "turns", "no turns"),
    ({"session_id": "x", "user": "Ann", "turns": "hello"}, "turns", "must be a list"),
    ({"session_id": "x", "user": "Ann"}, "turns", "missing field"),
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "  "}]}, "turns[0].text", "no text"),
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": 7}]}, "turns[0].text", "must be a string"),
    ({"session_id": "x", "user": "Ann", "turns": [{"text": "hi"}]}, "turns[0].role", "missing field"),
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "hi", "turn_id": [1]}]},
     "turns[0].turn_id", "integer or string"),
    ({"session_id": "x", "user": "Ann", "timestamp": "next tuesday-ish", "turns": GOOD["turns"]},
     "timestamp", "is not a date or time"),
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "x" * 300_000}]},
     "turns[0].text", "exceeds max_turn_chars"),
    # the field the user's form calls for, not the other spelling
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user"}]}, "turns[0].text", "missing field"),
    ({"session_id": "x", "user": "Ann", "messages": [{"role": "user"}]}, "messages[0].content", "missing field"),
    # values that pass a type check but would crash the output write or the resume's read
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "hi \ud800 there"}]},
     "turns[0].text", "lone UTF-16 surrogate"),
    ({"session_id": "x", "user": "Ann", "metadata": {"note\udfff": 1}, "turns": GOOD["turns"]},
     "metadata.note\\udfff", "lone UTF-16 surrogate"),
    # decided: turn ids are labels, non-negative, and a turn's messages are consecutive
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "hi", "turn_id": -1}]},
     "turns[0].turn_id", "from 0 to 2**63-1"),
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "hi", "turn_id": 2**64}]},
     "turns[0].turn_id", "from 0 to 2**63-1"),
    ({"session_id": "x", "user": "Ann", "turns": [
        {"role": "user", "text": "a", "turn_id": 0}, {"role": "user", "text": "b", "turn_id": 1},
        {"role": "assistant", "text": "c", "turn_id": 0}]}, "turns[2].turn_id", "comes back after turn 1"),
    # decided: roles are free speaker labels, but not empty, and the owner must speak
    ({"session_id": "x", "user": "Ann", "turns": [{"role": "", "text": "hi"}]}, "turns[0].role", "must not be empty"),
    ({"session_id": "x", "user": "Ann", "owner_role": "", "turns": GOOD["turns"]}, "owner_role", "must not be empty"),
    ({"session_id": "x", "user": "Ann", "owner_role": "Ann", "turns": GOOD["turns"]}, "owner_role",
     "no turn is spoken by 'Ann'"),
    ({"session_id": "x", "user": "Ann", "messages": [{"role": "assistant", "content": "hello"}]}, "owner_role",
     "no turn is spoken by 'user'"),
    # decided: a session id is one line of printable text
    ({"session_id": "x\ny", "user": "Ann", "turns": GOOD["turns"]}, "session_id", "line breaks"),
])
def test_each_bad_field_is_named(tmp_path: Path, record: dict, field: str, message: str) -> None:
    line = json.dumps(record).encode("utf-8", "surrogatepass")  # json escapes a lone surrogate as \\udXXX
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD).encode(), line])
    (error,) = errors_of(path)
    assert error.field == field and message in error.message
    assert error.line == 2 and error.file == str(path)
    assert str(path) + ":2" in str(error)
    if "session_id" in record and isinstance(record["session_id"], str):
        assert error.session_id == record["session_id"]


def test_records_that_crashed_the_reader_become_errors_of_their_line(tmp_path: Path) -> None:
    huge = b'{"session_id": "big", "user": "Ann", "turns": [{"role": "user", "text": "hi", "turn_id": ' + \
        b"9" * 5000 + b"}]}"
    deep = b'{"session_id": "deep", "user": "Ann", "turns": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    good2 = {**GOOD, "session_id": "b"}
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD).encode(), huge, deep, json.dumps(good2).encode()])
    items = list(read_sessions(path))
    assert [getattr(x, "session_id", None) for x in items] == ["a", "big", None, "b"]
    assert (items[1].line, items[1].field) == (2, "turns[0].turn_id") and "5,000 digits" in items[1].message
    assert items[2].line == 3 and "nested too deeply" in items[2].message


def test_a_lone_surrogate_in_the_session_id_is_reported_in_a_writable_form(tmp_path: Path) -> None:
    bad = json.dumps({"session_id": "s\ud800", "user": "Ann", "turns": []}).encode()
    (error,) = errors_of(write_lines(tmp_path / "in.jsonl", [bad]))
    assert error.field == "session_id" and error.session_id == "s\\ud800"
    rejects = RejectWriter(tmp_path / "r.jsonl")
    rejects.input_error(error)
    rejects.close()
    assert json.loads((tmp_path / "r.jsonl").read_text(encoding="utf-8"))["session_id"] == "s\\ud800"


def test_a_very_long_session_id_is_refused_and_named_briefly(tmp_path: Path) -> None:
    (error,) = errors_of(write_lines(tmp_path / "in.jsonl", [json.dumps({**GOOD, "session_id": "x" * 100_000}).encode()]))
    assert error.field == "session_id" and "100,000 characters" in error.message
    assert len(error.session_id or "") < 100


def test_a_utf8_bom_before_the_first_record_is_accepted(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [b"\xef\xbb\xbf" + json.dumps(GOOD).encode()])
    assert [s.session_id for s in load_sessions(path)] == ["a"]


def test_ids_with_punctuation_and_free_roles_are_accepted(tmp_path: Path) -> None:
    record = {"session_id": "team-a:1 (b)", "user": "Ann O'Neil", "owner_role": "Ann",
              "turns": [{"role": "Ann", "text": "I like tea."}, {"role": "Bob", "text": "Me too."}]}
    (session,) = load_sessions(write_lines(tmp_path / "in.jsonl", [json.dumps(record).encode()]))
    assert session.session_id == "team-a:1 (b)" and [t.role for t in session.turns] == ["Ann", "Bob"]


def test_bad_lines_among_good_ones_do_not_stop_the_good_ones(tmp_path: Path) -> None:
    good2 = {**GOOD, "session_id": "b"}
    path = write_lines(tmp_path / "in.jsonl", [
        json.dumps(GOOD).encode(), b"{not json", b'{"session_id": "c", "user": "\xff\xfe", "turns": []}',
        json.dumps(GOOD).encode(), json.dumps(good2).encode()])
    items = list(read_sessions(path))
    kinds = [type(x).__name__ for x in items]
    assert kinds == ["Session", "InputError", "InputError", "InputError", "Session"]
    assert "invalid JSON" in items[1].message and items[1].line == 2
    assert "invalid UTF-8" in items[2].message and items[2].line == 3
    assert "duplicated session id" in items[3].message and items[3].session_id == "a" and items[3].line == 4
    with pytest.raises(InputError, match="line 2|in.jsonl:2"):
        load_sessions(path)


def test_openai_messages_form_assigns_turn_ids_and_skips_system(tmp_path: Path) -> None:
    record = {"session_id": "m", "user": "Ann", "messages": [
        {"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}, {"role": "user", "content": "I like tea."},
        {"role": "assistant", "content": "noted"}, {"role": "assistant", "content": "anything else?"}]}
    (session,) = load_sessions(write_lines(tmp_path / "m.jsonl", [json.dumps(record).encode()]))
    assert [(t.turn_id, t.role) for t in session.turns] == [
        (0, "user"), (0, "assistant"), (1, "user"), (1, "assistant"), (1, "assistant")]
    assert len(session.turn_groups()) == 2


@pytest.mark.parametrize("text,iso", [("Sep 04, 2025, 09:05:32", "2025-09-04T09:05:32"),
                                      ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00"),
                                      ("2023/05/20 (Sat) 02:21", "2023-05-20T02:21:00"),
                                      ("2025-03-14T09:30:00Z", "2025-03-14T09:30:00"),
                                      ("2025-03-14", "2025-03-14T00:00:00")])
def test_dataset_timestamp_formats_are_read_once_into_iso(text: str, iso: str) -> None:
    record = make_session("s", "Ann", [("I like tea.", "ok")], timestamp=text).to_dict()
    session = session_from_dict(record)
    assert session.timestamp == iso and {t.timestamp for t in session.turns} == {iso}


def test_resume_drops_a_torn_last_line_and_reports_done_ids(tmp_path: Path) -> None:
    graphs = Engine(scripted_config()).extract([make_session("a", "Ann", [("I like tea.", "ok")]),
                                                make_session("b", "Ben", [("I like jazz.", "ok")])])
    out = tmp_path / "out.jsonl"
    out.write_text(graphs[0].to_json() + "\n" + graphs[1].to_json()[:40], encoding="utf-8")
    writer = GraphWriter(out, resume=True)
    assert writer.done == {"a"}
    writer.write(graphs[1])
    writer.close()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["session_id"] for line in lines] == ["a", "b"]
    assert MemoryGraph.from_json(lines[1]).to_json() == graphs[1].to_json()


def test_without_resume_the_output_starts_empty(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"session_id": "old"}\n', encoding="utf-8")
    assert GraphWriter(out, resume=False).done == set()
    assert out.read_text() == ""


def test_rejects_are_written_once_across_resumed_runs_however_the_input_is_spelled(tmp_path: Path) -> None:
    for resume, spelled in ((False, "in.jsonl"), (True, "./in.jsonl"), (True, str(tmp_path / "in.jsonl"))):
        rejects = RejectWriter(tmp_path / "r.jsonl", resume=resume)
        rejects.input_error(InputError("invalid JSON", file=spelled, line=3))
        rejects.close()
    (line,) = (tmp_path / "r.jsonl").read_text().splitlines()
    assert json.loads(line) == {"kind": "input", "file": "in.jsonl", "line": 3, "session_id": None, "field": None,
                                "error": "invalid JSON"}


def _two_graphs() -> list[MemoryGraph]:
    return Engine(scripted_config()).extract([make_session("a", "Ann", [("I like tea.", "ok")]),
                                              make_session("b", "Ben", [("I like jazz.", "ok")])])


@pytest.mark.parametrize("damage,line,message", [
    (lambda a, b: [a, a, b], 2, "written twice"),
    (lambda a, b: [a, '{"session_id": "b", "note": "valid JSON, not a graph"}', b], 2, "not a complete record"),
    (lambda a, b: [a, "[1, 2]", b], 2, "not a complete record"),
])
def test_resume_refuses_kept_lines_that_are_not_one_graph_per_session(tmp_path: Path, damage, line: int,  # type: ignore[no-untyped-def]
                                                                       message: str) -> None:
    a, b = (g.to_json() for g in _two_graphs())
    out = tmp_path / "out.jsonl"
    out.write_text("\n".join(damage(a, b)) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        GraphWriter(out, resume=True)
    assert info.value.line == line and info.value.file == str(out) and message in info.value.message


def test_resume_refuses_a_rejects_line_that_is_not_an_object(tmp_path: Path) -> None:
    """Valid JSON of another shape (an edited or foreign file) is named, not a crash reading its fields."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"kind": "input", "line": 1, "session_id": null}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputError) as info:
        RejectWriter(path, resume=True)
    assert info.value.line == 2 and "not a complete record" in info.value.message


def test_exported_file_names_never_collide(tmp_path: Path) -> None:
    a, _ = _two_graphs()
    graphs = []
    for sid in ("team/a", "team_a", "Team_a", "." * 3, "x" * 300):
        a.session_id = sid
        graphs.append(a.to_json())
    out = tmp_path / "g.jsonl"
    out.write_text("\n".join(graphs) + "\n", encoding="utf-8")
    written = export_graphs(out, tmp_path / "nl", "node-link")
    assert len({p.name.lower() for p in written}) == 5 and all(p.exists() for p in written)
    assert all(len(p.name) < 120 and not p.name.startswith(".") for p in written)


def test_export_keeps_a_lone_surrogate_the_graphs_file_holds(tmp_path: Path) -> None:
    """The writer keeps a model reply's lone surrogate as a JSON escape; the export reads and writes it too."""
    a, _ = _two_graphs()
    a.nodes[0].text += "\ud800"
    a.session_id = "odd\udc00id"
    writer = GraphWriter(tmp_path / "g.jsonl")
    writer.write(a)
    writer.close()
    (target,) = export_graphs(tmp_path / "g.jsonl", tmp_path / "nl", "node-link")
    assert json.loads(target.read_text(encoding="utf-8"))["nodes"][0]["text"].endswith("\ud800")


def test_graph_round_trips_and_exports(tmp_path: Path, maya) -> None:  # type: ignore[no-untyped-def]
    (graph,) = Engine(scripted_config()).extract([maya])
    assert MemoryGraph.from_json(graph.to_json()).to_json() == graph.to_json()
    g = graph.to_networkx()
    assert g.number_of_nodes() == len(graph.nodes) and g.number_of_edges() == len(graph.edges)
    node = graph.nodes[0]
    assert g.nodes[node.id]["text"] == node.text
    assert g.nodes[node.id]["details"] == [graph.details[i].text for i in node.details]
    out = tmp_path / "g.jsonl"
    out.write_text(graph.to_json() + "\n", encoding="utf-8")
    (nl,) = export_graphs(out, tmp_path / "nl", "node-link")
    back = nx.node_link_graph(json.loads(nl.read_text()), edges="edges")
    assert back.number_of_nodes() == len(graph.nodes)
    (gml,) = export_graphs(out, tmp_path / "gml", "graphml")
    read = nx.read_graphml(gml)
    assert read.number_of_nodes() == len(graph.nodes) and read.number_of_edges() == len(graph.edges)


def test_records_given_as_dicts_are_screened_too() -> None:
    """The Python API (``Engine.extract`` of dicts) gets the same check as a file's lines."""
    from promem_fast.io import session_from_dict

    record = {"session_id": "x", "user": "Ann", "turns": [{"role": "user", "text": "a\ud800"}]}
    with pytest.raises(InputError) as info:
        session_from_dict(record)
    assert info.value.field == "turns[0].text" and "surrogate" in info.value.message
