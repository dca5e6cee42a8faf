"""``AsyncMemory``: :class:`~promem_fast.memory.Memory` for asyncio programs (mem0's ``AsyncMemory``).

The same verbs, arguments and result shapes, awaited::

    async with AsyncMemory("memory.db") as memory:
        await memory.add("I moved to Denver.", user_id="tom")
        found = await memory.search("Where does Tom live?", user_id="tom")

Extraction and search are blocking work (a model, an embedder, the store's file), so each call runs on a thread
and the event loop stays free. The calls that write or drive the models (``add``, ``add_many``, ``answer``,
``update``, ``delete``, ``delete_all``, ``reset``) run on the memory's own thread, one at a time in the order
made, so each sees what the writes made before it stored. The reads (``search``, ``get``, ``get_all``,
``history``) run on threads of their own and never wait for a write in progress: an agent that adds a turn in the
background searches at once, and finds the memory as committed (what an awaited ``add`` stored; a session still
being extracted or judged not yet, and never half of it). Await the ``add`` first to search its memories."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from promem_fast.memory import Memory


READ_THREADS = 4
"""Threads that run reads side by side (each search's SQL and vector scoring; query embeddings take turns)."""


def _awaited(verb: str, *, reads: bool = False) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``Memory.<verb>`` as a coroutine method (its signature and docstring), run on the memory's thread, or
    with ``reads`` on the reading threads."""

    @functools.wraps(getattr(Memory, verb))
    async def call(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        work = functools.partial(getattr(self._memory, verb), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._readers if reads else self._thread, work)

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
        self._readers = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="promem-read")

    add = _awaited("add")
    add_many = _awaited("add_many")
    search = _awaited("search", reads=True)
    answer = _awaited("answer")
    get = _awaited("get", reads=True)
    get_all = _awaited("get_all", reads=True)
    update = _awaited("update")
    history = _awaited("history", reads=True)
    delete = _awaited("delete")
    delete_all = _awaited("delete_all")
    reset = _awaited("reset")

    async def close(self) -> None:
        """Close the store and the models once the calls made are done, then the threads."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._readers.shutdown)  # reads in flight finish first
            await loop.run_in_executor(self._thread, self._memory.close)
        finally:
            self._thread.shutdown(wait=True)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
