"""``promem mcp``: add, search and answer as Model Context Protocol tools (the official ``mcp`` SDK).

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

ADD_TIMEOUT_S = 600.0
"""How long the add tool waits for its sessions to be extracted before it reports the job as still running."""


def build_server(service: Service, tenant: str) -> Any:
    """An ``MCPServer`` whose tools act on ``tenant``'s memory through ``service``."""
    require("mcp", "serve")
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("promem", instructions="Long-term memory of users: add dialogue sessions, search the "
                       "memory of a user, answer questions from it.")

    def guarded(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except NotFound:
            raise ToolError(f"no memory for user {args[0]!r}") from None
        except PromemError as exc:
            raise ToolError(str(exc)) from exc

    def add_and_wait(user: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        job, rejected = service.submit(tenant, user, sessions)
        if job is None:
            raise ToolError(f"no session was accepted: {rejected}")
        deadline = time.monotonic() + ADD_TIMEOUT_S
        status = service.job(tenant, job)
        while status["state"] != "finished" and time.monotonic() < deadline:
            time.sleep(0.1)
            status = service.job(tenant, job)
        return {**status, "rejected": rejected}

    @server.tool()
    async def add(user: str, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        """Extract and store the memory of dialogue sessions of a user. Each session is an object with
        session_id, optional timestamp and turns: [{"role": "user"|"assistant", "text": "..."}]."""
        return await anyio.to_thread.run_sync(add_and_wait, user, sessions)

    @server.tool()
    async def search(user: str, query: str, k: int = 10) -> list[dict[str, Any]]:
        """The memories of a user nearest to a query, with their details, links and dates."""
        return await anyio.to_thread.run_sync(guarded, lambda u, q: service.search(tenant, u, q, k), user, query)

    @server.tool()
    async def answer(user: str, questions: list[str]) -> list[dict[str, Any]]:
        """Answers to questions from the memory of a user."""
        return await anyio.to_thread.run_sync(guarded, lambda u, q: service.answer(tenant, u, q), user, questions)

    return server
