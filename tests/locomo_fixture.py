"""A small conversation in LoCoMo's schema (``locomo10.json``), written for the retrieval and answer-prompt
tests: two speakers, three dated sessions, questions of four categories whose evidence turns are known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _turns(session: int, lines: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"speaker": who, "dia_id": f"D{session}:{k + 1}", "text": text} for k, (who, text) in enumerate(lines)]


CONVERSATION: dict[str, Any] = {
    "sample_id": "conv-t",
    "conversation": {
        "speaker_a": "Nora", "speaker_b": "Omar",
        "session_1_date_time": "10:00 am on 3 March, 2023",
        "session_1": _turns(1, [
            ("Nora", "I adopted a grey cat named Pebble yesterday."),
            ("Omar", "I started learning the cello this winter."),
            ("Nora", "I work as a nurse at the city hospital."),
            ("Omar", "I live in a small flat near the harbour."),
        ]),
        "session_2_date_time": "4:00 pm on 20 April, 2023",
        "session_2": _turns(2, [
            ("Omar", "I ran the Rotterdam marathon last Sunday."),
            ("Nora", "I painted a mural of Pebble on my kitchen wall."),
            ("Omar", "I bought a red bicycle for the summer."),
            ("Nora", "I visited my aunt in Porto."),
        ]),
        "session_3_date_time": "9:00 am on 2 June, 2023",
        "session_3": _turns(3, [
            ("Nora", "I moved to a new flat with a garden."),
            ("Omar", "I played the cello at a wedding."),
        ]),
    },
    "qa": [
        {"question": "What is the name of Nora's cat?", "answer": "Pebble", "evidence": ["D1:1"], "category": 4},
        {"question": "What instrument did Omar play at the wedding?", "answer": "cello",
         "evidence": ["D1:2", "D3:2"], "category": 1},
        {"question": "When did Omar run the Rotterdam marathon?", "answer": "16 April 2023", "evidence": ["D2:1"],
         "category": 2},
        {"question": "What did Nora paint on her kitchen wall?", "answer": "a mural of Pebble",
         "evidence": ["D2:2"], "category": 4},
        {"question": "Which of them keeps a pet, Nora or Omar?", "answer": "Nora", "evidence": ["D1:1"],
         "category": 3},
        {"question": "What colour is Omar's car?", "evidence": [], "category": 5,
         "adversarial_answer": "red"},
    ],
    "event_summary": {},
}


def write_locomo(folder: Path) -> Path:
    path = folder / "locomo-t.json"
    path.write_text(json.dumps([CONVERSATION]), encoding="utf-8")
    return path
