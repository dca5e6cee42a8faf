"""Shared fixtures: the scripted configuration, hand-written sessions and the real HaluMem sample.

The real sample (``../shared/data/halumem-dev`` beside the repository, or the file ``PROMEM_HALUMEM_SAMPLE``
names; its licence forbids shipping it) is optional: a test that needs it is skipped when it is absent, with
:data:`SAMPLE_ABSENT` in its reason, and the summary line at the end of the run counts those skips. Tests of
the machinery use :func:`tomas_sessions`, a user written for these tests in HaluMem's schema.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promem_fast.config import EngineConfig
from promem_fast.types import Session, Turn

ROOT = Path(__file__).resolve().parent.parent
HALUMEM = Path(os.environ.get("PROMEM_HALUMEM_SAMPLE")
               or ROOT.parent / "shared" / "data" / "halumem-dev" / "pilot_slice_user0.jsonl")
"""The real HaluMem user (29 sessions); ``PROMEM_HALUMEM_SAMPLE=/nonexistent`` runs the suite as a clone
without it would."""
TOMAS = ROOT / "tests" / "fixtures" / "halumem_tomas.jsonl"
"""A user written for these tests in HaluMem's schema: 12 sessions of 3 turns with 20 gold memory points (5 of
them updates) and 3 questions."""
SAMPLE_ABSENT = "the real HaluMem sample is absent"


class Recording:
    """Wraps a backend and keeps the arguments of every call to ``method``."""

    def __init__(self, inner: Any, method: str) -> None:
        self.inner, self.method, self.calls = inner, method, []
        for name in ("dim", "context_length"):
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    def __getattr__(self, name: str) -> Any:
        if name == self.method:
            def call(*args: Any) -> Any:
                self.calls.append(args)
                return getattr(self.inner, name)(*args)
            return call
        return getattr(self.inner, name)

    @property
    def batches(self) -> list[int]:
        """The size of the first argument (the batch) of every recorded call."""
        return [len(args[0]) for args in self.calls]


def scripted_config(**pipeline: Any) -> EngineConfig:
    config = EngineConfig.profile("scripted")
    for key, value in pipeline.items():
        setattr(config.pipeline, key, value)
    return config


def make_session(sid: str, user: str, exchanges: list[tuple[str, str]], timestamp: str = "2025-03-14T09:30:00"
                 ) -> Session:
    """A session from (user message, assistant reply) pairs; each pair is one turn."""
    turns: list[Turn] = []
    for tid, (said, reply) in enumerate(exchanges):
        turns.append(Turn(turn_id=tid, role="user", text=said, timestamp=timestamp))
        turns.append(Turn(turn_id=tid, role="assistant", text=reply, timestamp=timestamp))
    return Session(session_id=sid, user=user, turns=tuple(turns), timestamp=timestamp)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask (0), restored after: a file written without an explicit mode is 0666."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def maya() -> Session:
    return make_session("maya-1", "Maya", [
        ("I adopted a beagle named Biscuit last Saturday.", "Congratulations on adopting Biscuit!"),
        ("I moved to Lisbon in May for a job at Nordvik Labs.", "Lisbon is lovely; how is the new job?"),
        ("My sister Ana visits me in Lisbon every month.", "It is great that Ana visits so often."),
        ("I started running 5 km every morning with Biscuit.", "Running with a dog is a good habit."),
    ])


def skip_without_sample() -> None:
    """Skip the calling test when the real HaluMem sample is absent (the reason names where it was looked for)."""
    if not HALUMEM.is_file():
        pytest.skip(f"{SAMPLE_ABSENT} ({HALUMEM}; set PROMEM_HALUMEM_SAMPLE to its path)")


def halumem_sessions(limit: int | None = None) -> list[Session]:
    """The sessions of the real HaluMem user (skips the test when the sample is absent)."""
    skip_without_sample()
    return _sessions(HALUMEM, limit)


def tomas_sessions(limit: int | None = None) -> list[Session]:
    """The sessions of the hand-written HaluMem-schema user :data:`TOMAS` (always present)."""
    return _sessions(TOMAS, limit)


def _sessions(path: Path, limit: int | None) -> list[Session]:
    """A HaluMem file's first user's sessions, converted with the plain rules of its README."""
    record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    name = record["persona_info"].split("Name:", 1)[1].split(";", 1)[0].strip()
    out = []
    for index, session in enumerate(record["sessions"][:limit]):
        turns = tuple(Turn(turn_id=m["dialogue_turn"], role=m["role"], text=m["content"], timestamp=m["timestamp"])
                      for m in session["dialogue"])
        out.append(Session(session_id=f"{record['uuid']}:{index}", user=name, turns=turns,
                           timestamp=session["start_time"]))
    return out


def write_jsonl(path: Path, sessions: list[Session]) -> Path:
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in sessions), encoding="utf-8")
    return path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many tests were skipped for want of the real HaluMem sample, so a clone without it knows."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and SAMPLE_ABSENT in str(r.longrepr[2])]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} tests skipped because {SAMPLE_ABSENT} ({HALUMEM}); "
                                    "they run where it is present")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A real PostgreSQL with pgvector (:mod:`promem_fast.testing.pg_server`), started once per run."""
    from promem_fast.testing.pg_server import PG_URL_ENV, Server

    import importlib.util

    missing = [name for name in ("psycopg", *(() if os.environ.get(PG_URL_ENV) else ("pgserver",)))
               if importlib.util.find_spec(name) is None]
    if missing:
        reason = f"PostgreSQL tests need {' and '.join(missing)} (pip install 'promem-fast[dev]') or {PG_URL_ENV}"
        if os.environ.get("CI"):  # CI runs both backends: a missing server is a failure there, not a skip
            pytest.fail(reason)
        pytest.skip(reason)
    server = Server()
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """The URL of a new empty database on the test server, dropped after the test."""
    url = pg_server.fresh_database()
    yield url
    pg_server.drop(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's store lives, once per backend: an SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    return str(request.getfixturevalue("pg_url"))
