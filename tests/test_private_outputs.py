"""Every file the ``promem`` commands write from a user's data is its owner's alone whatever the umask: files
0600, the folders they create 0700, a folder the user already had left as they set it. Run through the real
commands on the hand-written HaluMem-schema user: extraction (graphs, rejected input lines, manifest), a
resumed run over files an older version left world-readable, evaluation (graphs, result, report, chart,
store), evidence recall, aggregates, a converted benchmark, a tau record, exports and the graph page."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from conftest import ROOT, tomas_sessions, write_jsonl
from locomo_fixture import write_locomo
from promem_fast.cli import main

SCRIPTED = ["--profile", "scripted", "--no-progress"]
MINI = ROOT / "tests" / "fixtures" / "halumem_mini.jsonl"
FILE, FOLDER = 0o600, 0o700


def modes(root: Path) -> dict[str, int]:
    """The permission bits of ``root`` (as ``"."``) and of everything under it, by relative path."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def with_a_bad_line(path: Path) -> Path:
    """Two of the user's sessions with a broken line between them (it goes to the rejects file)."""
    first, second = (json.dumps(s.to_dict()) for s in tomas_sessions(2))
    path.write_text(f"{first}\n{{broken\n{second}\n", encoding="utf-8")
    return path


def test_extraction_graphs_rejects_and_manifest_are_private_in_new_folders(open_umask: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["extract", str(with_a_bad_line(tmp_path / "in.jsonl")), "-o", str(out / "run" / "graphs.jsonl"),
                 *SCRIPTED]) == 0
    assert modes(out) == {".": FOLDER, "run": FOLDER, "run/graphs.jsonl": FILE, "run/graphs.rejects.jsonl": FILE,
                          "run/graphs.manifest.json": FILE}
    assert len((out / "run" / "graphs.rejects.jsonl").read_text().splitlines()) == 1


def test_a_resumed_run_narrows_the_files_it_continues_and_leaves_the_users_folder(open_umask: None,
                                                                                  tmp_path: Path) -> None:
    source = with_a_bad_line(tmp_path / "in.jsonl")
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o755)
    graphs = mine / "graphs.jsonl"
    assert main(["extract", str(source), "-o", str(graphs), *SCRIPTED]) == 0
    # as an interrupted run of an older version left them: the second graph missing, everything 0644
    first = graphs.read_text(encoding="utf-8").splitlines()[0]
    graphs.write_text(first + "\n", encoding="utf-8")
    for path in mine.iterdir():
        path.chmod(0o644)
    assert main(["extract", str(source), "-o", str(graphs), "--resume", *SCRIPTED]) == 0
    assert [json.loads(line)["session_id"] for line in graphs.read_text().splitlines()] == [
        s.session_id for s in tomas_sessions(2)]
    assert modes(mine) == {".": 0o755, "graphs.jsonl": FILE, "graphs.rejects.jsonl": FILE,
                           "graphs.manifest.json": FILE}


def test_exports_and_the_graph_page_are_private(open_umask: None, tmp_path: Path) -> None:
    graphs = tmp_path / "graphs.jsonl"
    sessions = tomas_sessions(2)
    assert main(["extract", str(write_jsonl(tmp_path / "in.jsonl", sessions)), "-o", str(graphs), *SCRIPTED]) == 0
    out = tmp_path / "out"
    assert main(["export", str(graphs), str(out / "json")]) == 0
    assert main(["export", str(graphs), str(out / "graphml"), "--format", "graphml"]) == 0
    assert main(["view", str(graphs), "--session", sessions[0].session_id, "-o", str(out / "page.html")]) == 0
    a, b = "u-tomas_0-3d5c55e1fe", "u-tomas_1-d663d9bfb3"  # the files of sessions u-tomas:0 and u-tomas:1
    assert modes(out) == {".": FOLDER, "json": FOLDER, f"json/{a}.json": FILE, f"json/{b}.json": FILE,
                          "graphml": FOLDER, f"graphml/{a}.graphml": FILE, f"graphml/{b}.graphml": FILE,
                          "page.html": FILE}
    assert "<graphml" in (out / "graphml" / f"{a}.graphml").read_text()  # written whole through the handle


def test_evaluation_outputs_are_private(open_umask: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["eval", "halumem", "--data", str(MINI), *SCRIPTED, "-o", str(out / "ev")]) == 0
    result = out / "ev" / "result-halumem-full.json"
    assert main(["eval", "aggregate", str(result), "-o", str(out / "agg.json"), "--report", str(out / "agg.md")]) == 0
    assert main(["convert", "halumem", "--data", str(MINI), "-o", str(out / "input" / "sessions.jsonl")]) == 0
    assert main(["calibrate", "tau", "--data", str(MINI), *SCRIPTED, "-o", str(out / "tau.json")]) == 0
    assert modes(out) == {".": FOLDER, "ev": FOLDER, "ev/graphs-halumem-full.jsonl": FILE,
                          "ev/result-halumem-full.json": FILE, "ev/report-halumem.md": FILE,
                          "ev/variants-halumem.png": FILE, "ev/store-halumem-full.db": FILE,
                          "agg.json": FILE, "agg.md": FILE, "input": FOLDER, "input/sessions.jsonl": FILE,
                          "tau.json": FILE}


def test_evidence_recall_outputs_are_private(open_umask: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["eval", "locomo", "--data", str(write_locomo(tmp_path)), "--retrieval", "--k", "1", *SCRIPTED,
                 "-o", str(out)]) == 0
    assert modes(out) == {".": FOLDER, "graphs-locomo-full.jsonl": FILE, "store-locomo-retrieval.db": FILE,
                          "retrieval-locomo.json": FILE, "retrieval-locomo.md": FILE}


def test_a_secret_engine_argument_is_written_to_no_file_of_a_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["extract", str(with_a_bad_line(tmp_path / "in.jsonl")), "-o", str(out / "graphs.jsonl"), *SCRIPTED,
                 "--set", "llm.options.hf_token=hf_s3cr3t"]) == 0
    written = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    assert set(written) == {"graphs.jsonl", "graphs.rejects.jsonl", "graphs.manifest.json"}
    assert not [name for name, text in written.items() if "hf_s3cr3t" in text]
    # the manifest still says the run had one, so a resume with another token is the same run
    assert json.loads(written["graphs.manifest.json"])["config"]["llm"]["options"] == {"hf_token": "[redacted]"}
