"""``promem calibrate tau``: the curve of what the completeness check would recover at each tau, and the pick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from promem_fast.calibration import SessionVectors, choose, curve
from promem_fast.cli import main

MINI = ROOT / "tests" / "fixtures" / "halumem_mini.jsonl"


def unit(*rows: list[float]) -> np.ndarray:
    m = np.array(rows, np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_the_chosen_tau_recovers_the_missed_event_and_not_the_paraphrase() -> None:
    # gold: three points; the draft reaches the first; event 0 paraphrases the draft entry (cos 0.8),
    # event 1 is a point the draft missed (cos 0.45 to the draft), event 2 repeats event 1 (cos 0.45 too)
    gold = unit([1, 0, 0], [0, 1, 0], [0, 0, 1])
    draft = unit([1, 0, 0])
    events = unit([0.8, 0.6, 0], [0.45, 0.893, 0], [0.45, 0.893, 0.0])
    points = curve([SessionVectors(events=events, draft=draft, gold=gold)], taus=(0.3, 0.5, 0.85))
    by_tau = {p.tau: (p.recovered, p.useful, p.redundant, p.gold_reached) for p in points}
    assert by_tau == {0.3: (0, 0, 0, 1), 0.5: (2, 1, 1, 2), 0.85: (3, 1, 2, 2)}
    assert choose(points).tau == 0.3  # 0.5 gains one point and repeats one: no better than recovering nothing

    events = unit([0.8, 0.6, 0], [0.45, 0.893, 0], [0.45, 0, 0.893])  # event 2 now reaches the third point
    points = curve([SessionVectors(events=events, draft=draft, gold=gold)], taus=(0.3, 0.5, 0.85))
    assert choose(points).tau == 0.5


def test_calibrate_tau_prints_the_curve_and_the_pick(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "tau", "--data", str(MINI), "--profile", "scripted", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "tau   recovered  useful  redundant  gold reached" in out
    assert out.count("\n0.") == 14 and out.count("<- chosen") == 1
    assert "tau_comp = " in out.splitlines()[-1]


def test_calibrate_tau_on_a_missing_file_says_so_in_one_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "tau", "--data", str(tmp_path / "none.jsonl"), "--profile", "scripted"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("promem: ") and "none.jsonl" in err and "\n" not in err


def test_a_session_whose_draft_failed_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    from conftest import make_session, scripted_config
    from promem_fast.testing.llm_scripted import ScriptedLLM
    from promem_fast.calibration import candidates_program
    from promem_fast.engine import Engine

    session = make_session("s9", "Maya", [("I adopted a beagle named Biscuit in March.", "Nice!")])
    engine = Engine(scripted_config(), llm=ScriptedLLM(rules={"draft": lambda f: "no JSON here"}))
    with caplog.at_level("WARNING", logger="promem_fast.calibration"):
        ((_, value),) = list(engine.run([("s9", lambda ctx: candidates_program(session, ctx))]))
    assert value[1] == []
    assert any("session s9" in r.getMessage() and "incomplete" in r.getMessage() for r in caplog.records)
