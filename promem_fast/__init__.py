"""promem_fast: verified, graph-structured memory extracted from long dialogues, batched across sessions.

The public front is small and batch-first::

    from promem_fast import Engine, EngineConfig
    graphs = Engine(EngineConfig.profile("cpu")).extract(sessions)

and :class:`Memory` for a program that keeps its users' memory (add, search, answer, history, delete),
:class:`AsyncMemory` the same for asyncio programs.
"""

from __future__ import annotations

from promem_fast import native  # noqa: F401  - a broken native build must fail here, with the rebuild command
from promem_fast.async_memory import AsyncMemory
from promem_fast.config import EngineConfig
from promem_fast.engine import Engine
from promem_fast.memory import Memory
from promem_fast.run_summary import RunSummary
from promem_fast.io import load_sessions
from promem_fast.types import MemoryGraph, Session, Turn
from promem_fast.version import __version__

__all__ = ["AsyncMemory", "Engine", "EngineConfig", "Memory", "MemoryGraph", "RunSummary", "Session", "Turn",
           "load_sessions", "__version__"]
