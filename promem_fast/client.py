"""A small Python client of ``promem serve`` with the verbs of :class:`~promem_fast.store.MemoryStore`.

``Client(url, key)`` speaks HTTP to a server; the tenant is the key's, so no verb takes one. ``add`` queues
sessions and, by default, waits for their job to finish, so code written against a local store reads the
same against a server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from promem_fast.deps import require
from promem_fast.errors import PromemError
from promem_fast.types import Session


class ServerError(PromemError):
    """The server refused a request; ``status`` is the HTTP code, the message its ``detail``."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class Client:
    """Talks to one server with one API key."""

    def __init__(self, url: str, key: str, *, timeout: float = 60.0) -> None:
        httpx = require("httpx", "serve")
        self._http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout,
                                  headers={"Authorization": f"Bearer {key}"})

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text
            raise ServerError(response.status_code, detail)
        return response.json()

    @staticmethod
    def _u(user: str) -> str:
        return "/v1/users/" + quote(user, safe="")

    # ------------------------------------------------------------------------------ verbs
    def add(self, user: str, sessions: Iterable[Session | dict[str, Any]], *, wait: bool = True,
            timeout: float = 600.0) -> dict[str, Any]:
        """Queue sessions of ``user``; with ``wait`` return the finished job's status, else the 202 reply."""
        payload = [s.to_dict() if isinstance(s, Session) else dict(s) for s in sessions]
        reply = self._call("POST", self._u(user) + "/sessions", json={"sessions": payload})
        return self.wait(reply["job_id"], timeout=timeout) if wait else reply

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{quote(job_id, safe='')}")

    def wait(self, job_id: str, *, timeout: float = 600.0, poll: float = 0.2) -> dict[str, Any]:
        """Poll a job until it is finished (bounded by ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.job(job_id)
            if status["state"] == "finished":
                return status
            if time.monotonic() > deadline:
                raise PromemError(f"job {job_id} not finished after {timeout:g} s: {status}")
            time.sleep(poll)

    def search(self, user: str, query: str, k: int = 20) -> list[dict[str, Any]]:
        return self._call("POST", self._u(user) + "/search", json={"query": query, "k": k})["hits"]

    def answer(self, user: str, questions: list[str]) -> list[dict[str, Any]]:
        return self._call("POST", self._u(user) + "/answer", json={"questions": questions})["answers"]

    def get_all(self, user: str, *, history: bool = False) -> list[dict[str, Any]]:
        return self._call("GET", self._u(user) + "/memories", params={"history": history})["memories"]

    def get(self, user: str, node_id: int) -> dict[str, Any]:
        return self._call("GET", self._u(user) + f"/memories/{int(node_id)}")

    def history(self, user: str, node_id: int) -> list[dict[str, Any]]:
        """The supersede chain through a memory, oldest first."""
        return self.get(user, node_id)["history"]

    def users(self) -> list[str]:
        return self._call("GET", "/v1/users")["users"]

    def sessions(self, user: str) -> list[str]:
        return self._call("GET", self._u(user) + "/sessions")["sessions"]

    def graph(self, user: str) -> dict[str, Any]:
        return self._call("GET", self._u(user) + "/graph")

    def delete(self, *, user: str, session: str | None = None, node: int | None = None) -> int:
        if session is not None and node is not None:
            raise PromemError("delete takes a session or a node, not both")
        path = self._u(user) + (f"/sessions/{quote(session, safe='')}" if session is not None else
                                f"/memories/{int(node)}" if node is not None else "")
        return int(self._call("DELETE", path)["deleted"])

    def export(self, path: str | Path) -> int:
        """Write the tenant's memory to ``path`` in the store's exchange format; returns the sessions written."""
        sessions, tail = 0, b""
        with self._http.stream("GET", "/v1/export") as response:  # streamed: a whole store need not fit in memory
            if response.status_code >= 400:
                raise ServerError(response.status_code, response.read().decode("utf-8", "replace"))
            with open(path, "wb") as out:
                for chunk in response.iter_bytes():
                    out.write(chunk)
                    # split on b"\n" only: iter_lines would also split at U+2028 inside a memory's text
                    *lines, tail = (tail + chunk).split(b"\n")
                    sessions += sum(json.loads(line).get("kind") == "session" for line in lines if line.strip())
        if tail.strip():
            sessions += json.loads(tail).get("kind") == "session"
        return sessions

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
