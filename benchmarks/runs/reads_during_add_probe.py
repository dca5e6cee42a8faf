"""One side of :mod:`bench_reads_during_add`: an asyncio agent's searches while its ``add`` runs, on one tree.

Run by the benchmark with ``PYTHONPATH`` set to the tree measured; prints one JSON line. The CPU default
(SmolLM2-135M on llama.cpp, MiniLM) extracts the demo's first session, then a client searches it 20 times
(idle), then the second session is added while the client searches every 250 ms until the add returns.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from promem_fast import AsyncMemory

DEMO = Path("promem_fast/data/demo_sessions.jsonl")
QUESTION = "What is Maya switching careers to?"
EVERY_S = 0.25


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"p50": round(statistics.median(ordered), 1), "p99": round(ordered[min(len(ordered) - 1,
            int(0.99 * len(ordered)))], 1), "max": round(ordered[-1], 1), "n": len(ordered)}


async def timed(memory: AsyncMemory, user: str) -> float:
    """Milliseconds one search takes, seen from the caller."""
    started = time.perf_counter()
    await memory.search(QUESTION, user_id=user, top_k=5)
    return (time.perf_counter() - started) * 1000


async def finished(call: Awaitable[Any]) -> float:
    """When ``call`` came back (the event loop's clock, as the searches' are)."""
    await call
    return time.perf_counter()


async def run(folder: Path) -> dict[str, Any]:
    first, second = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines()[:2]]
    async with AsyncMemory(folder / "m.db", profile="cpu") as memory:
        await memory.add(first, user_id=first["user"])
        idle = [await timed(memory, first["user"]) for _ in range(20)]
        adding = asyncio.create_task(finished(memory.add(second, user_id=second["user"])))
        await asyncio.sleep(0)  # the add is handed to its thread before the first search is
        begun = time.perf_counter()
        during: list[float] = []
        came_back: list[float] = []
        while not adding.done():
            during.append(await timed(memory, first["user"]))
            came_back.append(time.perf_counter())
            await asyncio.sleep(EVERY_S)
        add_end = await adding
    answered = sum(1 for t in came_back if t < add_end)  # came back while the add was still running
    add_s = add_end - begun
    return {"add_s": round(add_s, 1), "idle_ms": summary(idle), "during_add_ms": summary(during),
            "searches_answered_while_adding": answered}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(asyncio.run(run(Path(folder)))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
