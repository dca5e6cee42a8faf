"""How SmolLM2-135M answers the detail prompt on every turn of the demo sessions, under a few wordings.

    python -m benchmarks.runs.detail_prompt_probe            # writes benchmarks/results/smollm2_detail_probe.json

The demo config (``promem_fast/data/demo.yaml``: no dialogue in the session block) asks the details of one
turn per request with a flat list, so each request here is the pipeline's request for one turn: same session
block, grammar (the detail schema, ``max_list_items`` of the demo), greedy decoding and 96-token budget. The
wordings compared:

* ``current``: the pipeline's detail prompt as rendered now (task after the session block, the owner rule
  inside the task sentence, ``Turns: N`` then the turn).
* ``old``: the detail prompt of 6fb4e48, where the demo kept 11 details on the first session (task, owner and
  date in the system message, no session block, the turn in the user message, no owner rule).
* ``restructured``: the current prompt with the owner rule as its own sentence after the task and the turn
  shown under ``Dialogue turn:`` (no ``Turns:`` line).

Per wording: turns whose reply lists something, items, items that occur word for word in the owner's lines of
that turn (a name copied back counts, so this is an upper bound on real details), items only the assistant
said, items the pipeline's detail check keeps (``pipeline/detail_check.py``: no bare pronouns, speaker
names, turn labels or instruction words), and replies cut by the budget (the pipeline asks those again with a
larger one). ``before_demo.*`` applies the same check to the 11 details the demo kept on its first session at
6fb4e48 (recorded in ``results/smollm2_demo.json``). A 135M model shows
format, not quality: a count here says whether the model lists anything, not whether memory gets better.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

from benchmarks.common.paths import RESULTS, ROOT
from benchmarks.tools.figures import write_result
from promem_fast import prompts as P
from promem_fast.pipeline.common import PLACEHOLDERS
from promem_fast.pipeline.detail_check import DetailCheck, instruction_text
from promem_fast.types import Message

SESSIONS = ROOT / "promem_fast" / "data" / "demo_sessions.jsonl"
BEFORE = RESULTS / "smollm2_demo.json"
DEMO = ROOT / "promem_fast" / "data" / "demo.yaml"
KINDS = ("names of people and organisations, dates and times, places, quantities and prices, named objects, "
         "preferences. Each detail is a short fragment, not a sentence about the whole conversation.")
REPLY = 'Reply with a JSON object whose "details" list holds one short fragment per detail.'
log = logging.getLogger("detail_prompt_probe")


def wordings(user: str, when: str, turn: str) -> Iterator[tuple[str, tuple[Message, ...]]]:
    """The detail request for one turn under each wording compared."""
    block = P.session_block(user, when, None)
    current = P.render("detail", block, user=user, source=P.OWNER_WORDS.format(user=user), turns="0",
                       text=P.shown_part("The turn", turn), reply=P.DETAILS_ONE)
    yield "current", current
    who, date = P.WHO.format(user=user), P.WHEN.format(when=when)
    old_task = (f"Task: list the small concrete details stated in one dialogue turn: {KINDS} Skip greetings and "
                f"anything that carries no concrete fact. {who} {date}")
    yield "old", ({"role": "system", "content": f"{P.PREAMBLE}\n\n{old_task}"},
                  {"role": "user", "content": f"Dialogue turn:\n{turn}\n\n{REPLY}"})
    task = (f"Task: list the small concrete details in the turn below: {KINDS} Skip greetings and anything that "
            f"carries no concrete fact. Take them from what {user} says; the other speaker's lines are only context.")
    yield "restructured", (current[0], {"role": "user", "content": f"{task}\n\nDialogue turn:\n{turn}\n\n{REPLY}"})


def turns_of(session: dict[str, Any]) -> Iterator[tuple[int, str, str, str]]:
    """Each turn as the pipeline shows it, with the owner's and the assistant's words (lower case)."""
    user = session["user"]
    for tid in sorted({t["turn_id"] for t in session["turns"]}):
        said = [m for m in session["turns"] if m["turn_id"] == tid]
        shown = "\n".join(f"[turn {tid}] {user if m['role'] == 'user' else m['role']}: {m['text']}" for m in said)
        own = " ".join(m["text"] for m in said if m["role"] == "user").lower()
        other = " ".join(m["text"] for m in said if m["role"] != "user").lower()
        yield tid, shown, own, other


def detail_check(user: str) -> DetailCheck:
    """The pipeline's check of a detail list, for a session of ``user`` with the default source rule."""
    return DetailCheck(instruction_text("detail", user, P.OWNER_WORDS.format(user=user)), {user, "user", "assistant"})


def before_demo(session: dict[str, Any]) -> list[str]:
    """Of the details the demo kept on its first session at 6fb4e48, those the detail check keeps now."""
    check = detail_check(session["user"])
    own = {tid: o for tid, _, o, _ in turns_of(session)}
    kept = []
    for entry in json.loads(BEFORE.read_text(encoding="utf-8"))["before"]["details_kept"]:
        label, item = entry.split(": ", 1)
        if check.informative(item, own[int(label.removeprefix("turn "))]):
            kept.append(entry)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=0, help="only the first N demo sessions (0: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from promem_fast.backends.base import GenerationRequest
    from promem_fast.backends.llm_llamacpp import LlamaCppLLM
    from promem_fast.config import EngineConfig

    config = EngineConfig.resolve(file=DEMO)
    llm = LlamaCppLLM(config.llm)
    schema = P.schema_for("detail", max_items=config.pipeline.max_list_items)
    budget = config.pipeline.max_tokens["detail"]
    table: dict[str, dict[str, int]] = {}
    first: dict[str, list[str]] = {}
    lines = SESSIONS.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines[:args.sessions or None]):
        session = json.loads(line)
        day = dt.date.fromisoformat(session["timestamp"][:10])
        when = f"{day.isoformat()} ({day.strftime('%A')})"
        check = detail_check(session["user"])
        for tid, shown, own, other in turns_of(session):
            for name, messages in wordings(session["user"], when, shown):
                reply = llm.generate([GenerationRequest(messages=messages, schema=schema, max_tokens=budget)])[0]
                row = table.setdefault(name, dict.fromkeys(
                    ("turns", "listing_turns", "items", "in_owner_words", "assistant_only", "kept_by_check", "cut"),
                    0))
                row["turns"] += 1
                log.info("%s turn %s %s: %s", session["session_id"], tid, name, reply.text.strip()[:160])
                if reply.finish_reason == "length":
                    row["cut"] += 1
                    continue
                items = [t.strip() for t in json.loads(reply.text)["details"]
                         if t.strip() and t.strip().lower() not in PLACEHOLDERS]
                row["listing_turns"] += bool(items)
                row["items"] += len(items)
                row["in_owner_words"] += sum(t.lower() in own for t in items)
                row["assistant_only"] += sum(t.lower() in other and t.lower() not in own for t in items)
                kept = check.keep(items, own)
                row["kept_by_check"] += len(kept)
                if number == 0:
                    first.setdefault(name, []).extend(f"turn {tid}: {t}" for t in items)
                    first.setdefault(f"{name}_kept", []).extend(f"turn {tid}: {t}" for t in kept)
    figures = {f"{name}.{key}": value for name, row in table.items() for key, value in row.items()}
    figures.update({f"{name}.first_session_items": len(items) for name, items in first.items()
                    if not name.endswith("_kept")})
    figures.update({f"{name[:-5]}.first_session_kept": len(items) for name, items in first.items()
                    if name.endswith("_kept")})
    before = json.loads(BEFORE.read_text(encoding="utf-8"))["before"]
    kept_before = before_demo(json.loads(lines[0]))
    figures.update({"before_demo.details": before["details"], "before_demo.kept_by_check": len(kept_before)})
    tables = {name: {"first_session": items} for name, items in first.items()}
    tables["before_demo"] = {"kept_by_check": kept_before}
    write_result("smollm2_detail_probe", figures, "python -m benchmarks.runs.detail_prompt_probe",
                 tables=tables,
                 note="SmolLM2-135M, one detail request per turn of the demo sessions, greedy; format, not quality")
    return 0


if __name__ == "__main__":
    sys.exit(main())
