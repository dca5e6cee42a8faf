"""The continuous driver: same graphs as the round driver whatever the timing, faults kept to their session,
no request sent twice, and the reorder buffer's memory bound with a slow first session."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

from conftest import make_session, scripted_config, tomas_sessions, write_jsonl
from promem_fast.backends.base import Completion, GenerationRequest
from promem_fast.testing.llm_scripted import ScriptedLLM, parse_rendered
from promem_fast.cli import main
from promem_fast.config import LLMConfig
from promem_fast.engine import Engine
from promem_fast.pipeline import session_program
from promem_fast.types import Session


def copies(n: int, distinct: int = 3) -> list[Session]:
    base = tomas_sessions(distinct)
    return [Session(session_id=f"{base[i % len(base)].session_id}#{i}", user=base[i % len(base)].user,
                    turns=base[i % len(base)].turns, timestamp=base[i % len(base)].timestamp) for i in range(n)]


def _key(messages: Sequence[Any]) -> tuple[tuple[str, str], ...]:
    return tuple((m["role"], m["content"]) for m in messages)


class ThreadedStream:
    """A server-like stream: every request runs on a pool of real threads after a random delay, so answers
    come back out of submission order; ``delay(text)`` adds a fixed wait to chosen prompts."""

    def __init__(self, llm: ThreadedLLM) -> None:
        self._llm = llm
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="test-stream")
        self._futures: dict[Future[Completion], int] = {}

    def _answer(self, request: GenerationRequest, pause: float) -> Completion:
        time.sleep(pause)
        if self._llm.poison is not None and any(self._llm.poison in m["content"] for m in request.messages):
            raise RuntimeError("CUDA out of memory (simulated)")
        return self._llm.generate([request])[0]

    def submit(self, key: int, request: GenerationRequest) -> None:
        with self._llm.lock:
            self._llm.sent.append((_key(request.messages), request.seed))
            pause = self._llm.rng.uniform(0, 0.003) + self._llm.delay(request.messages[-1]["content"])
        self._futures[self._pool.submit(self._answer, request, pause)] = key

    def pending(self) -> int:
        return len(self._futures)

    def complete(self, timeout: float | None) -> list[tuple[int, Completion | BaseException]]:
        done, _ = wait(list(self._futures), timeout=timeout, return_when=FIRST_COMPLETED)
        out: list[tuple[int, Completion | BaseException]] = []
        for future in done:
            exc = future.exception()
            out.append((self._futures.pop(future), exc if exc is not None else future.result()))
        self._llm.finished.extend(key for key, _ in out)
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class ThreadedLLM(ScriptedLLM):
    """The scripted model behind a :class:`ThreadedStream` (the continuous driver takes ``open_stream``)."""

    def __init__(self, config: LLMConfig, seed: int = 0, poison: str | None = None,
                 delay: Callable[[str], float] = lambda text: 0.0) -> None:
        super().__init__(config)
        self.rng = random.Random(seed)
        self.poison = poison
        self.delay = delay
        self.lock = threading.Lock()
        self.sent: list[tuple[Any, int]] = []
        self.finished: list[int] = []
        """Stream keys (numbered in submission order) in the order their answers came back."""

    def open_stream(self) -> ThreadedStream:
        return ThreadedStream(self)


def graphs(sessions: Sequence[Session], llm: ScriptedLLM | None = None, **config: Any) -> list[str]:
    cfg = scripted_config()
    for key, value in config.items():
        setattr(cfg, key, value)
    engine = Engine(cfg, llm=llm or ScriptedLLM(cfg.llm))
    return [g.to_json(timings=False) for g in engine.extract(sessions)]


@pytest.fixture(scope="module")
def reference() -> list[str]:
    return graphs(copies(6), driver="round")


@pytest.mark.parametrize(("window", "reorder", "batch"), [(1, 0, 4096), (2, 1, 3), (4, 0, 1), (6, 2, 7), (64, 0, 4096)])
def test_graphs_are_byte_identical_to_the_round_driver_whatever_window_reorder_or_batch(
        reference: list[str], window: int, reorder: int, batch: int) -> None:
    assert graphs(copies(6), driver="continuous", max_in_flight=window, max_reorder=reorder,
                  max_batch_size=batch) == reference


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_backend_answering_out_of_order_from_real_threads_changes_nothing(reference: list[str], seed: int) -> None:
    cfg = scripted_config()
    llm = ThreadedLLM(cfg.llm, seed=seed)
    assert graphs(copies(6), llm=llm, max_in_flight=4) == reference
    # the threads really did answer out of submission order
    assert llm.finished != sorted(llm.finished)


def garbled_first_attempts(requests: Sequence[GenerationRequest], out: list[Completion]) -> list[Completion]:
    """Every first attempt (seed 0) at a draft request answers prose, so each is sent again (seed 1)."""
    return [Completion("Sorry, no JSON today.", 10, 5)
            if r.seed == 0 and (parse_rendered(r.messages) or ("?",))[0] == "draft" else o
            for r, o in zip(requests, out)]


def test_no_request_is_sent_twice_and_the_same_requests_are_sent_as_in_rounds() -> None:
    sessions = tomas_sessions(3)
    cfg = scripted_config()

    class Garbling(ThreadedLLM):
        def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
            return garbled_first_attempts(requests, super().generate(requests))

    class Counting(ScriptedLLM):
        sent: list[tuple[Any, int]] = []

        def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
            self.sent.extend((_key(r.messages), r.seed) for r in requests)
            return garbled_first_attempts(requests, super().generate(requests))

    threaded = Garbling(cfg.llm, seed=5)
    rounds = Counting(cfg.llm)
    assert graphs(sessions, llm=threaded) == graphs(sessions, llm=rounds, driver="round")
    assert 1 in {seed for _, seed in threaded.sent}  # retries happened
    assert len(threaded.sent) == len(set(threaded.sent))
    assert Counter(threaded.sent) == Counter(rounds.sent)


def test_a_failing_request_fails_only_its_own_session() -> None:
    bad = make_session("bad", "Ann", [("I keep a POISON pill in my drawer.", "Hm.")])
    good = [make_session(f"g{i}", "Ben", [(f"I visited Oslo in {m}.", "Nice.")]) for i, m in enumerate(["May", "June"])]
    cfg = scripted_config()
    engine = Engine(cfg, llm=ThreadedLLM(cfg.llm, seed=9, poison="POISON"))
    out = engine.extract([good[0], bad, good[1]])
    assert [g.session_id for g in out] == ["g0", "bad", "g1"]
    assert [g.to_json(timings=False) for g in (out[0], out[2])] == graphs(good, driver="round")
    failures = out[1].stats.failures
    assert failures and all("out of memory" in f.error for f in failures)
    assert {f.role for f in failures} >= {"draft", "detail"}
    assert not out[0].stats.failures and not out[2].stats.failures


def test_a_slow_first_session_holds_at_most_window_plus_reorder_sessions() -> None:
    slow = make_session("slow", "Ann", [("I keep a SLOWPOKE turtle called Tim.", "Cute.")])
    quick = [make_session(f"q{i}", "Ben", [(f"I visited Oslo on day {i}.", "Nice.")]) for i in range(14)]
    cfg = scripted_config()
    cfg.max_in_flight, cfg.max_reorder = 2, 3
    llm = ThreadedLLM(cfg.llm, delay=lambda text: 0.4 if "SLOWPOKE" in text else 0.0)
    engine = Engine(cfg, llm=llm)
    held = peak = 0

    def source() -> Iterator[tuple[str, Callable[[Any], Any]]]:
        for session in [slow, *quick]:
            def make(ctx: Any, s: Session = session) -> Any:
                nonlocal held, peak
                held += 1
                peak = max(peak, held)
                return session_program(s, ctx)
            yield session.session_id, make

    order = []
    for key, outcome in engine.run(source()):
        assert not isinstance(outcome, BaseException)
        held -= 1
        order.append(key)
    assert order == ["slow", *[f"q{i}" for i in range(14)]]
    # 2 in progress + 3 finished waiting for "slow": never more, although 14 quick sessions were ready
    assert peak <= 5


def test_a_run_killed_anywhere_resumes_byte_identically_under_either_driver(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", tomas_sessions(5))
    flags = ["--profile", "scripted", "--no-progress", "--no-timings"]
    out = tmp_path / "out.jsonl"
    assert main(["extract", str(source), "-o", str(out), *flags, "--set", "driver=round"]) == 0
    full = out.read_bytes()
    lines = full.splitlines(keepends=True)
    for kept in range(len(lines)):
        for driver, window in (("continuous", "1"), ("continuous", "3"), ("round", "2")):
            out.write_bytes(b"".join(lines[:kept]))
            assert main(["extract", str(source), "-o", str(out), "--resume", *flags, "--max-in-flight", window,
                         "--set", f"driver={driver}"]) == 0
            assert out.read_bytes() == full, (kept, driver, window)


@pytest.mark.slow
def test_llamacpp_greedy_graphs_are_byte_identical_under_both_drivers() -> None:
    """The real CPU default model (SmolLM2 on llama.cpp, greedy): the same graphs from the round driver and
    from the continuous one, where requests reach the model in another order and other groupings."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip extra 'cpu')")
    from promem_fast.backends.llm_llamacpp import LlamaCppLLM

    sessions = [make_session("a", "Ann", [("I moved to Lisbon in May for a job at Nordvik.", "Congrats!")]),
                make_session("b", "Ben", [("My dog Rex is three years old.", "Nice."),
                                          ("I run every Sunday morning.", "Good habit.")])]
    llm = LlamaCppLLM(LLMConfig(backend="llamacpp", context_length=2048))
    try:
        cfg = scripted_config()
        cfg.llm = LLMConfig(backend="llamacpp", context_length=2048)
        out = {}
        for driver, window in (("round", 2), ("continuous", 2), ("continuous", 1)):
            cfg.driver, cfg.max_in_flight = driver, window  # type: ignore[assignment]
            out[(driver, window)] = [g.to_json(timings=False) for g in Engine(cfg, llm=llm).extract(sessions)]
    finally:
        llm.close()
    assert out[("continuous", 2)] == out[("round", 2)]
    assert out[("continuous", 1)] == out[("round", 2)]
