"""Reads while a write is in progress: they do not wait for it, and they never see half of it.

An agent adds each turn in the background and searches for the next one; a web server's request threads share
one ``Memory``. The chat model here is the scripted one, held at a chosen step (extraction, or the update
judge) until the test lets it go, so "in progress" is a state the test controls, not a race it hopes for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promem_fast import AsyncMemory, EngineConfig, Memory
from promem_fast.backends import BackendSpec, register
from promem_fast.testing.llm_scripted import ScriptedLLM

LISBON = "I live in a small flat in Lisbon near the river."
PORTO = "I live in a small flat in Porto near the river."
WHERE = "Where does ana live?"


class HeldLLM(ScriptedLLM):
    """The scripted model, whose replies for the roles in :attr:`held` (and, when :attr:`words` names some, only
    to prompts holding one of them) wait until :attr:`gate` is set."""

    held: set[str] = set()
    words: set[str] = set()
    gate = threading.Event()
    waiting = threading.Event()
    """Set once a held reply has started waiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rules = {role: self._holding(role, rule) for role, rule in self.rules.items()}

    @classmethod
    def _holding(cls, role: str, rule: Any) -> Any:
        def reply(fields: dict[str, str]) -> Any:
            if role in cls.held and (not cls.words or any(w in v for w in cls.words for v in fields.values())):
                cls.waiting.set()
                assert cls.gate.wait(60), "the test never let the model go"
            return rule(fields)

        return reply


@pytest.fixture
def held() -> Iterator[type[HeldLLM]]:
    register([BackendSpec("llm", "held", f"{__name__}:HeldLLM", None, "the scripted model, held on demand")])
    HeldLLM.held, HeldLLM.words, HeldLLM.gate, HeldLLM.waiting = set(), set(), threading.Event(), threading.Event()
    yield HeldLLM
    HeldLLM.gate.set()  # a failed test leaves no thread waiting


def config() -> EngineConfig:
    return EngineConfig.profile("scripted").with_overrides(["llm.backend=held"])


def texts(found: Any) -> list[str]:
    return sorted(m["memory"] for m in found["results"])


def test_an_async_search_does_not_wait_for_an_add_being_extracted(tmp_path: Path, held: type[HeldLLM]) -> None:
    async def program() -> dict[str, Any]:
        async with AsyncMemory(tmp_path / "m.db", config=config()) as memory:
            await memory.add(LISBON, user_id="ana", date="2024-01-05")
            held.held = {"draft"}  # the next session's extraction stops at its first step
            adding = asyncio.create_task(memory.add(PORTO, user_id="ana", date="2024-03-02"))
            assert await asyncio.to_thread(held.waiting.wait, 30)
            during = await asyncio.wait_for(memory.search(WHERE, user_id="ana"), timeout=10)
            listed = await asyncio.wait_for(memory.get_all(user_id="ana"), timeout=10)
            still_running = not adding.done()
            held.gate.set()
            added = await adding
            after = await memory.search(WHERE, user_id="ana")
        return locals()

    out = asyncio.run(program())
    assert out["still_running"]
    assert texts(out["during"]) == texts(out["listed"]) == ["Ana live in a small flat in Lisbon near the river."]
    assert [e["event"] for e in out["added"]["results"]] == ["update"]
    assert texts(out["after"]) == ["Ana live in a small flat in Porto near the river."]


def test_a_session_being_judged_is_not_shown_beside_the_memory_it_replaces(store_at: str,
                                                                           held: type[HeldLLM]) -> None:
    """The Porto session is stored and waits for the update judge: a reader on another thread finds Lisbon alone
    (not Lisbon and Porto, both current), then Porto alone once the verdict is written."""
    with Memory(store_at, config=config()) as memory:
        memory.add(LISBON, user_id="ana", date="2024-01-05")
        held.held = {"store_update"}
        adding = threading.Thread(target=memory.add, args=(PORTO,), kwargs={"user_id": "ana", "date": "2024-03-02"})
        adding.start()
        assert held.waiting.wait(30)
        assert memory.store.sessions("ana") and len(memory.store.sessions("ana")) == 2  # Porto is stored
        during = texts(memory.search(WHERE, user_id="ana"))
        during_all = texts(memory.get_all(user_id="ana"))
        during_history = texts(memory.get_all(user_id="ana", history=True))
        held.gate.set()
        adding.join(30)
        assert not adding.is_alive()
        after = texts(memory.search(WHERE, user_id="ana"))
    lisbon = "Ana live in a small flat in Lisbon near the river."
    porto = "Ana live in a small flat in Porto near the river."
    assert during == during_all == during_history == [lisbon]
    assert after == [porto]


def test_sessions_judged_one_after_another_each_show_with_their_own_verdicts(tmp_path: Path,
                                                                          held: type[HeldLLM]) -> None:
    """Two sessions stored together (as the service's worker stores a batch) are judged one after the other: while
    the second waits for the judge, a reader on another connection finds the first in place of what it replaced
    (not the replaced memory gone with nothing in its place, nor both sessions' memories at once)."""
    from promem_fast.engine import Engine
    from promem_fast.io import session_from_dict
    from promem_fast.store import MemoryStore

    faro = PORTO.replace("Porto", "Faro")
    said = [("s1", "2024-01-05", LISBON), ("s2", "2024-03-02", PORTO), ("s3", "2024-05-09", faro)]
    sessions = [session_from_dict({"session_id": sid, "user": "ana", "timestamp": day,
                                   "messages": [{"role": "user", "content": text}]}) for sid, day, text in said]
    with MemoryStore(tmp_path / "m.db", config()) as writer, Engine(writer.config) as engine:
        lisbon, porto, faro = engine.extract(sessions)
        writer.add([lisbon], engine=engine)
        held.held, held.words = {"store_update"}, {"Faro"}
        adding = threading.Thread(target=writer.add, args=([porto, faro],), kwargs={"engine": engine})
        adding.start()
        assert held.waiting.wait(30)
        with MemoryStore(tmp_path / "m.db", writer.config) as reader:
            during = [h.text for h in reader.hits("ana")]
            held.gate.set()
            adding.join(30)
            after = [h.text for h in reader.hits("ana")]
    assert during == ["Ana live in a small flat in Porto near the river."]
    assert after == ["Ana live in a small flat in Faro near the river."]


def test_memory_judged_again_is_read_as_it_was_while_it_is(store_at: str, held: type[HeldLLM]) -> None:
    """Porto replaced Faro; then a session dated before both arrives (Lisbon), which reopens them: Porto's link
    to Faro is taken away while they are judged again. A reader meanwhile finds the memory as it was, Porto
    alone: not Faro back as current, nor Lisbon beside Porto. Once judged, Porto replaced Faro, which replaced
    Lisbon."""
    faro = PORTO.replace("Porto", "Faro")
    with Memory(store_at, config=config()) as memory:
        memory.add(faro, user_id="ana", date="2024-02-01")
        memory.add(PORTO, user_id="ana", date="2024-03-02")
        before = texts(memory.get_all(user_id="ana"))
        held.held = {"store_update"}
        adding = threading.Thread(target=memory.add, args=(LISBON,), kwargs={"user_id": "ana", "date": "2024-01-05"})
        adding.start()
        assert held.waiting.wait(30)
        during = texts(memory.get_all(user_id="ana"))
        during_search = texts(memory.search(WHERE, user_id="ana"))
        held.gate.set()
        adding.join(30)
        after = texts(memory.get_all(user_id="ana", history=True))
        current = texts(memory.get_all(user_id="ana"))
    porto = "Ana live in a small flat in Porto near the river."
    assert before == during == during_search == current == [porto]
    assert after == sorted(f"Ana live in a small flat in {c} near the river." for c in ("Faro", "Lisbon", "Porto"))


def test_one_memory_serves_request_threads_adding_and_searching_at_once(tmp_path: Path) -> None:
    """Eight threads each add two sessions for their own user and search after each; all arrive, each user's
    later session replaces the earlier one, and no call fails."""
    errors: list[BaseException] = []
    with Memory(tmp_path / "m.db", profile="scripted") as memory:

        def user(i: int) -> None:
            try:
                for place, day in (("Lisbon", "2024-01-05"), ("Porto", "2024-03-02")):
                    memory.add(f"I live in a small flat in {place} near the river.", user_id=f"u{i}", date=day)
                    memory.search("Where does u live?", user_id=f"u{i}")
            except BaseException as exc:  # noqa: BLE001 - the assertion below names it
                errors.append(exc)

        threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        for i in range(8):
            assert [m["memory"] for m in memory.get_all(user_id=f"u{i}")["results"]] == [
                f"U{i} live in a small flat in Porto near the river."]


def test_deleting_the_latest_session_shows_what_it_had_replaced_again(store_at: str) -> None:
    """Porto replaced Faro; deleting Porto's session (the last one: nothing after it is judged again) leaves Faro
    current and shown, in lists and searches, as if Porto had never been said."""
    faro = PORTO.replace("Porto", "Faro")
    with Memory(store_at, profile="scripted") as memory:
        memory.add(faro, user_id="ana", date="2024-02-01")
        porto = memory.add(PORTO, user_id="ana", date="2024-03-02")["session_id"]
        assert texts(memory.get_all(user_id="ana")) == ["Ana live in a small flat in Porto near the river."]
        memory.delete(user_id="ana", session_id=porto)
        listed = texts(memory.get_all(user_id="ana"))
        found = texts(memory.search(WHERE, user_id="ana"))
    assert listed == found == ["Ana live in a small flat in Faro near the river."]
