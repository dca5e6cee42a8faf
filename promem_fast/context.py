"""What a session program sees besides the requests it yields: its config, its statistics, token budgets.

Pipeline stages and evaluation programs import this module, never the engine that drives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from promem_fast.requests import Failure
from promem_fast.services import Services
from promem_fast.types import RunStats


class RunContext:
    """What a session program may use besides yielding requests: its config, its own statistics and
    the token budget of each role (tokenizers are local and cheap; models are only reached by requests)."""

    def __init__(self, services: Services, stats: RunStats) -> None:
        self.services = services
        self.config = services.config
        self.stats = stats
        self.date: str | None = None
        """The session's day (``YYYY-MM-DD``) when the program extracts one session; chat templates that
        print a date of their own are given it."""
        self.session: str | None = None
        """The session's id when the program extracts one session, for what it logs."""

    def fail(self, failure: Failure) -> None:
        """Record a step that could not be completed (kept with the session's graph, raw replies included)."""
        self.stats.failures.append(failure)
        self.stats.bump("failed_steps")

    def text_tokens(self, role: str, text: str) -> int:
        return self.services.text_tokens(role, text)

    def prompt_budget(self, role: str, messages: Sequence[Any]) -> int:
        """Tokens still free for variable text in a prompt whose fixed part is ``messages``."""
        cp = self.config.pipeline
        used = self.services.count_tokens(role, messages) + cp.max_tokens[role]
        margin = 16 + self.services.context_length(role) // 50
        return self.services.context_length(role) - used - margin


