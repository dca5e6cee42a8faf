"""``AsyncMemory``: :class:`~promem_fast.memory.Memory` for asyncio programs (mem0's ``AsyncMemory``).

The same verbs, arguments and result shapes, awaited::

    async with AsyncMemory("memory.db") as memory:
        await memory.add("I moved to Denver.", user_id="tom")
        found = await memory.search("Where does Tom live?", user_id="tom")

Extraction and search are blocking work (a model, an embedder, the store's file), so each call runs on a
thread and the event loop stays free. One thread, the memory's own, runs every call in the order made: the
store's connection and the models belong to the thread that opened them, and a call sees all that the calls
before it wrote. Concurrent awaits therefore queue; a program that needs searches to run side by side with
an extraction serves the store with ``promem serve`` (its reads do not wait on its writer).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from promem_fast.memory import Memory


def _awaited(verb: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``Memory.<verb>`` as a coroutine method run on the memory's thread (its signature and docstring)."""

    @functools.wraps(getattr(Memory, verb))
    async def call(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await self._run(functools.partial(getattr(self._memory, verb), *args, **kwargs))

    return call


class AsyncMemory:
    """A :class:`Memory` whose verbs are awaited; the constructor takes :class:`Memory`'s arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open(Memory, *args, **kwargs)

    @classmethod
    def from_config(cls, config: dict[str, Any] | str, **options: Any) -> AsyncMemory:
        """As :meth:`Memory.from_config`."""
        made = cls.__new__(cls)
        made._open(Memory.from_config, config, **options)
        return made

    def _open(self, make: Callable[..., Memory], *args: Any, **kwargs: Any) -> None:
        """Make the memory on its own thread (the one every later call runs on)."""
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="promem-memory")
        try:
            self._memory: Memory = self._thread.submit(make, *args, **kwargs).result()
        except BaseException:
            self._thread.shutdown(wait=False)
            raise

    async def _run(self, work: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    add = _awaited("add")
    search = _awaited("search")
    answer = _awaited("answer")
    get = _awaited("get")
    get_all = _awaited("get_all")
    update = _awaited("update")
    history = _awaited("history")
    delete = _awaited("delete")
    delete_all = _awaited("delete_all")
    reset = _awaited("reset")

    async def close(self) -> None:
        """Close the store and the models (on their thread), then the thread."""
        try:
            await self._run(self._memory.close)
        finally:
            self._thread.shutdown(wait=True)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
