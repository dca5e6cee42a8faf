"""mem0's side of ``bench_mem0``: add the demo sessions to a fresh mem0 ``Memory`` and print its figures as JSON.

Run by ``benchmarks.runs.bench_mem0`` with the python of a separate environment that has ``mem0ai`` (and
sentence-transformers, faiss-cpu) installed, so nothing of mem0 is imported into promem's environment::

    MEM0_BENCH='{"base_url": ..., "embedder": ..., "sessions": ..., "count": 4, "folder": ..., "batch": 0}' \\
        /path/to/mem0-venv/bin/python benchmarks/runs/mem0_side.py

mem0's LLM is the OpenAI provider pointed at a llama.cpp OpenAI-compatible server the caller started (the
same GGUF promem runs); its embedder the same MiniLM folder, loaded from disk; its vector store FAISS in a
temporary folder. Each session's messages are added for that session's user, ``batch`` messages per ``add``
call (0: the whole session in one call). The printed figures: seconds to build the ``Memory`` and to add the
sessions, the LLM calls with the prompt and completion tokens the server reported, and the memories kept.

mem0's extraction prompt states the current date (its open-source ``add`` takes no timestamp), and a 135M
model's replies change with it: the same four sessions drew 4,162 completion tokens on one day and 834 on the
next. Each session's prompt therefore carries that session's own date, as promem's prompts do, so a rerun on
any day sends mem0 the same prompts.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def session_messages(session: dict[str, Any]) -> list[dict[str, str]]:
    """A demo session's turns as chat messages."""
    return [{"role": turn["role"], "content": turn["text"]} for turn in session["turns"]]


def user_id(session: dict[str, Any]) -> str:
    """The session's user as a mem0 user id (mem0 refuses whitespace in ids)."""
    return "-".join(session["user"].lower().split())


def main() -> int:
    spec = json.loads(os.environ["MEM0_BENCH"])
    folder = Path(spec["folder"])
    os.environ["MEM0_DIR"] = str(folder / "mem0-home")
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from mem0 import Memory  # after the environment above: mem0 reads it on import
    import mem0.memory.main as mem0_main

    session_day = [""]
    extraction_prompt = mem0_main.generate_additive_extraction_prompt

    def dated_prompt(*args: Any, **kwargs: Any) -> Any:  # the session's date where mem0 writes today's
        return extraction_prompt(*args, **{**kwargs, "current_date": session_day[0]})

    mem0_main.generate_additive_extraction_prompt = dated_prompt

    usage: list[tuple[int, int]] = []

    def count(_llm: Any, response: Any, _params: Any) -> None:
        used = response.usage
        usage.append((used.prompt_tokens, used.completion_tokens) if used else (0, 0))

    config = {
        "llm": {"provider": "openai", "config": {
            "model": "smollm2", "api_key": "local", "openai_base_url": spec["base_url"], "response_callback": count}},
        "embedder": {"provider": "huggingface", "config": {"model": spec["embedder"]}},
        "vector_store": {"provider": "faiss", "config": {
            "path": str(folder / "faiss"), "embedding_model_dims": 384, "distance_strategy": "cosine"}},
        "history_db_path": str(folder / "history.db"),
    }
    lines = Path(spec["sessions"]).read_text(encoding="utf-8").splitlines()
    sessions = [json.loads(line) for line in lines[:spec["count"]]]
    started = time.perf_counter()
    memory = Memory.from_config(config)
    init_s = time.perf_counter() - started
    per_session: list[float] = []
    for session in sessions:
        session_day[0] = str(session["timestamp"])[:10]
        messages = session_messages(session)
        step = spec["batch"] or len(messages)
        began = time.perf_counter()
        for i in range(0, len(messages), step):
            memory.add(messages[i:i + step], user_id=user_id(session))
        per_session.append(time.perf_counter() - began)
    users = sorted({user_id(s) for s in sessions})
    kept = {user: [m["memory"] for m in memory.get_all(filters={"user_id": user}, top_k=1000)["results"]]
            for user in users}
    json.dump({"init_s": init_s, "add_s": sum(per_session), "per_session_s": per_session, "calls": len(usage),
               "prompt_tokens": sum(p for p, _ in usage), "completion_tokens": sum(c for _, c in usage),
               "memories": sum(len(v) for v in kept.values()), "kept": kept}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
