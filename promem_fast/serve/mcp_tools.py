"""``promem mcp``: the memory verbs as Model Context Protocol tools (the official ``mcp`` SDK): add, search,
get, update, answer, list, history and delete (:data:`TOOLS`), with the arguments and result shapes of the HTTP API (:mod:`promem_fast.shapes`).

The server runs over stdio for one local agent, so the tenant is the operator's choice on the command line;
it shares :class:`~promem_fast.serve.service.Service` with the HTTP API (same queue, same worker, same
store), so a session added here is extracted, batched and stored exactly as one added over HTTP.
"""

from __future__ import annotations

import time
from typing import Any

from promem_fast.deps import require
from promem_fast.errors import PromemError
from promem_fast.serve.service import NotFound, Service
from promem_fast.shapes import DEFAULT_K, as_sessions, with_scopes

TOOLS = ("add", "search", "get", "update", "answer", "list", "history", "delete")
"""Every tool the server offers (``promem mcp --help`` names them)."""

ADD_TIMEOUT_S = 600.0
"""How long the add tool waits for its sessions to be extracted before it reports the job as still running."""


def build_server(service: Service, tenant: str) -> Any:
    """An ``MCPServer`` whose tools act on ``tenant``'s memory through ``service``."""
    require("mcp", "serve")
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("promem", instructions="Long-term memory of users: add dialogue sessions, search the "
                       "memory of a user, answer questions from it, list, trace or delete memories.")

    calls = _Calls(service, tenant, ToolError)
    guarded = calls.guarded

    @server.tool()
    async def add(user_id: str, messages: list[dict[str, Any]] | str, date: str | None = None,
                  metadata: dict[str, Any] | None = None, infer: bool = True,
                  expiration_date: str | None = None) -> dict[str, Any]:
        """Extract and store the memory of a user's dialogue: what the user said (a string), one conversation
        as messages [{"role": "user" | "assistant", "content": "..."}] said on ``date`` (ISO 8601), or a list
        of sessions (each with session_id, optional timestamp and turns: [{"role", "text"}]). metadata (an
        object) is stored with it and can filter searches; infer=false keeps each message as written (no model
        called); expiration_date (YYYY-MM-DD) is the last day its memories hold."""
        try:
            metadata = with_scopes(metadata, expiration_date=expiration_date) or None
        except PromemError as exc:
            raise ToolError(str(exc)) from None
        sessions = as_sessions(messages, date, metadata=metadata, infer=infer)
        return await anyio.to_thread.run_sync(calls.add_and_wait, user_id, sessions)

    @server.tool()
    async def search(user_id: str, query: str, top_k: int = DEFAULT_K, filters: dict[str, Any] | None = None,
                     as_of: str | None = None, since: str | None = None, until: str | None = None,
                     threshold: float | None = None, show_expired: bool = False,
                     explain: bool = False) -> dict[str, list[dict[str, Any]]]:
        """The memories of a user nearest to a query, best first, with their details, links and dates, as
        {"results": [...]}. filters: metadata conditions in mem0's language ({"key": value}, {"key": {"gte": 3}},
        {"key": {"in": [..]}}, {"OR": [filter, ..]}, ...);
        threshold: only memories whose score (cosine with the query) is at least this;
        as_of: what held at this time (ISO 8601; replaced memories count until replaced; default now);
        since/until: only memories said on or after / said on or before these times (a bare day is all of it);
        show_expired: also memories past their expiration_date; explain: each says how it was ranked."""
        when = _given(as_of=as_of, since=since, until=until)
        found = await anyio.to_thread.run_sync(
            guarded, lambda u: service.search(tenant, u, query, top_k, filters=filters, threshold=threshold,
                                         show_expired=show_expired, explain=explain, **when),
            user_id)
        return {"results": found}

    @server.tool()
    async def get(user_id: str, memory_id: int) -> dict[str, Any]:
        """One memory of a user by id."""
        return await anyio.to_thread.run_sync(guarded, lambda u: service.memory(tenant, u, memory_id), user_id)

    @server.tool()
    async def update(user_id: str, memory_id: int, data: str | None = None,
                     metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Edit a memory: new text (same id and history; searched by its new words at once) and/or metadata
        changes for it alone (keys given are set, the others kept; expiration_date: its last day, null removes
        it)."""
        return await anyio.to_thread.run_sync(
            guarded, lambda u: service.update(tenant, u, memory_id, data, metadata), user_id)

    @server.tool()
    async def answer(user_id: str, question: str, as_of: str | None = None, since: str | None = None,
                     until: str | None = None, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """The answer to a question from the memory of a user, with the memories it was drawn from.
        as_of: what held at this time (ISO 8601; default now); since/until and filters as for search."""
        when = _given(as_of=as_of, since=since, until=until)
        return await anyio.to_thread.run_sync(
            guarded, lambda u: service.answer(tenant, u, question, filters=filters, **when), user_id)

    @server.tool(name="list")
    async def list_memories(user_id: str, history: bool = False, filters: dict[str, Any] | None = None,
                            top_k: int | None = None, show_expired: bool = False) -> list[dict[str, Any]]:
        """All current memories of a user, oldest first (with history: replaced versions too); filters: metadata
        conditions as for search; top_k: only the first this many; show_expired: also those past their
        expiration_date."""
        return await anyio.to_thread.run_sync(
            guarded, lambda u: service.memories(tenant, u, history=history, filters=filters, top_k=top_k,
                                                   show_expired=show_expired), user_id)

    @server.tool()
    async def history(user_id: str, memory_id: int) -> dict[str, Any]:
        """What a memory replaced and what replaced it: {"id", "nodes" (oldest first), "edges"}."""
        return await anyio.to_thread.run_sync(guarded, lambda u: service.history(tenant, u, memory_id), user_id)

    @server.tool()
    async def delete(user_id: str, memory_id: int | None = None, session_id: str | None = None,
                     filters: dict[str, Any] | None = None) -> dict[str, int]:
        """Delete one memory, one session's memory, the memory of the sessions whose metadata meets filters
        (conditions as for search), or (given none of these) all memory of a user."""
        if sum(given is not None for given in (memory_id, session_id, filters)) > 1:
            raise ToolError("delete takes one of memory_id, session_id and filters")
        return {"deleted": await anyio.to_thread.run_sync(
            guarded, lambda u: service.delete(tenant, u, session=session_id, node=memory_id, filters=filters),
            user_id)}

    return server


class _Calls:
    """What the tools run on worker threads: a service call with its errors as the agent reads them, and an
    add that waits for its job."""

    def __init__(self, service: Service, tenant: str, tool_error: type[Exception]) -> None:
        self.service, self.tenant, self.tool_error = service, tenant, tool_error

    def guarded(self, fn: Any, user_id: str) -> Any:
        try:
            return fn(user_id)
        except NotFound as exc:
            what = f"no memory for user {user_id!r}" if str(exc) == "user" else f"{user_id!r} has no such {exc}"
            raise self.tool_error(what) from None
        except PromemError as exc:
            raise self.tool_error(str(exc)) from exc

    def add_and_wait(self, user: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        """Submit the sessions and wait (up to :data:`ADD_TIMEOUT_S`) for their job to finish."""
        job, rejected = self.service.submit(self.tenant, user, sessions)
        if job is None:
            raise self.tool_error(f"no session was accepted: {rejected}")
        deadline = time.monotonic() + ADD_TIMEOUT_S
        status = self.service.job(self.tenant, job)
        while status["state"] != "finished" and time.monotonic() < deadline:
            time.sleep(0.1)
            status = self.service.job(self.tenant, job)
        return {**status, "rejected": rejected}


def _given(**when: str | None) -> dict[str, str]:
    return {name: value for name, value in when.items() if value is not None}
