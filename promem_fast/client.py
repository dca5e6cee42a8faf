"""A small Python client of ``promem serve`` with the memory verbs, argument names and result shapes of every
surface (:mod:`promem_fast.shapes`): ``add``, ``search``, ``answer``, ``get_all``, ``get``, ``update``, ``history``,
``delete``, ``delete_all``, ``reset``. ``search`` and ``get_all`` give ``{"results": [...]}`` as
:class:`promem_fast.Memory` does (``Client(..., output_format="list")``: the bare list).

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
from promem_fast.errors import InputError, PromemError
from promem_fast.names import name_problem
from promem_fast.private import open_private
from promem_fast.shapes import DEFAULT_K, KEEP, as_sessions, result_count, user_and_filters, with_scopes
from promem_fast.types import Session


class ServerError(PromemError):
    """The server refused a request; ``status`` is the HTTP code, the message its ``detail``."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class Client:
    """Talks to one server with one API key."""

    def __init__(self, url: str, key: str, *, timeout: float = 60.0, output_format: str = "results") -> None:
        httpx = require("httpx", "serve")
        if output_format not in ("results", "list"):
            raise PromemError(f"output_format must be 'results' or 'list', not {output_format!r}")
        self.output_format = output_format
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
        return "/v1/users/" + _segment(user, "user_id")

    def _m(self, memory_id: int, user: str | None) -> str:
        """A memory's path: under its user when named, else the tenant's (``/v1/memories/{id}``)."""
        return ("/v1" if user is None else self._u(user)) + f"/memories/{int(memory_id)}"

    # ------------------------------------------------------------------------------ verbs
    def add(self, messages: str | Session | dict[str, Any] | Iterable[Session | dict[str, Any]], *, user_id: str,
            agent_id: str | None = None, run_id: str | None = None, metadata: dict[str, Any] | None = None,
            date: str | None = None, expiration_date: str | None = None, infer: bool = True, wait: bool = True,
            timeout: float = 600.0, session_id: str | None = None) -> dict[str, Any]:
        """Queue memory for ``user_id``: what the user said (a string), one session, a list of sessions, or
        one conversation as a list of ``{"role", "content"}`` messages (``date`` its time); ``metadata`` is
        stored with it, ``agent_id``, ``run_id`` and ``expiration_date`` in it under those names (as
        :meth:`promem_fast.Memory.add`); ``infer=False`` keeps each message as written; ``session_id`` (or a
        ``date``) names the conversation, so calling again after a lost reply stores it once (without either,
        each call is a new conversation, said when made). With ``wait`` return
        the finished job's status, else the 202 reply (``job_id``, ``accepted``, ``rejected``)."""
        metadata = with_scopes(metadata, agent_id=agent_id, run_id=run_id, expiration_date=expiration_date) or None
        sessions = as_sessions(messages, date, infer=infer, session_id=session_id)
        body = _drop_none({"sessions": sessions, "metadata": metadata})
        reply = self._call("POST", self._u(user_id) + "/sessions", json=body)
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

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, top_k: int | None = None, limit: int | None = None,
               filters: dict[str, Any] | None = None, threshold: float | None = None, as_of: str | None = None,
               since: str | None = None, until: str | None = None, show_expired: bool = False,
               explain: bool = False) -> Any:
        """The ``top_k`` (or ``limit``; default 10) memories of ``user_id`` nearest ``query``, best first
        (``as_of``: the question's time; ``filters``: metadata conditions, ``agent_id`` and ``run_id`` among
        them, and the user as ``filters={"user_id": ...}`` where ``user_id`` is not given; ``threshold``: the
        least score; ``explain``: each says how it was ranked), as :meth:`promem_fast.Memory.search` reads them."""
        user_id, conditions = user_and_filters(user_id, filters, agent_id=agent_id, run_id=run_id)
        body = _drop_none({"query": query, "top_k": result_count(top_k, limit, None, DEFAULT_K),
                           "filters": conditions or None, "threshold": threshold, "show_expired": show_expired or None,
                           "explain": explain or None, "as_of": as_of, "since": since, "until": until})
        return self._out(self._call("POST", self._u(user_id) + "/search", json=body)["results"])

    def answer(self, question: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, filters: dict[str, Any] | None = None, as_of: str | None = None,
               since: str | None = None, until: str | None = None) -> dict[str, Any]:
        """The answer to ``question`` from the memories of ``user_id`` holding at ``as_of`` (default now) whose
        session's metadata meets ``filters`` (and ``agent_id``, ``run_id``), as :meth:`promem_fast.Memory.answer`."""
        user_id, conditions = user_and_filters(user_id, filters, agent_id=agent_id, run_id=run_id)
        body = _drop_none({"question": question, "filters": conditions or None, "as_of": as_of, "since": since,
                           "until": until})
        return self._call("POST", self._u(user_id) + "/answer", json=body)

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: dict[str, Any] | None = None, top_k: int | None = None, limit: int | None = None,
                history: bool = False, show_expired: bool = False) -> Any:
        """The user's memories, oldest first (replaced ones too with ``history``), those whose metadata meets
        ``filters`` (and ``agent_id``, ``run_id``; the user may be named there); the first ``top_k`` (or
        ``limit``) when given; past their ``expiration_date`` too with ``show_expired``."""
        user_id, conditions = user_and_filters(user_id, filters, agent_id=agent_id, run_id=run_id)
        params = _drop_none({"history": history, "show_expired": show_expired or None,
                             "top_k": result_count(top_k, limit, None, None),
                             "filters": _json(conditions)})
        return self._out(self._call("GET", self._u(user_id) + "/memories", params=params)["memories"])

    def get(self, memory_id: int, *, user_id: str | None = None) -> dict[str, Any]:
        """One memory by id (of ``user_id`` when given: another user's id is then not found)."""
        return self._call("GET", self._m(memory_id, user_id))

    def update(self, memory_id: int, data: str | None = None, metadata: dict[str, Any] | None = None,
               expiration_date: str | None | object = KEEP, *, text: str | None = None,
               user_id: str | None = None) -> dict[str, Any]:
        """Edit a memory (as :meth:`promem_fast.Memory.update`): new text (``data`` or ``text``; same id and
        history, re-embedded), metadata changes for it alone, an ``expiration_date`` (None removes it); returns
        the memory."""
        given = (("data", data), ("text", text), ("metadata", metadata))
        body: dict[str, Any] = {name: value for name, value in given if value is not None}
        if expiration_date is not KEEP:
            body["expiration_date"] = expiration_date
        return self._call("PATCH", self._m(memory_id, user_id), json=body)

    def history(self, memory_id: int, *, user_id: str | None = None) -> dict[str, Any]:
        """The replacement graph through a memory: ``{"id", "nodes" (oldest first), "edges"}``."""
        return self._call("GET", self._m(memory_id, user_id) + "/history")

    def users(self) -> list[str]:
        return self._call("GET", "/v1/users")["users"]

    def sessions(self, *, user_id: str) -> list[str]:
        return self._call("GET", self._u(user_id) + "/sessions")["sessions"]

    def graph(self, *, user_id: str) -> dict[str, Any]:
        return self._call("GET", self._u(user_id) + "/graph")

    def delete(self, memory_id: int | None = None, *, user_id: str | None = None, session_id: str | None = None
               ) -> dict[str, int]:
        """Delete one memory (its user need not be named), one session's memory, or (with neither) all memory
        of ``user_id``."""
        if session_id is not None and memory_id is not None:
            raise PromemError("delete takes a memory or a session, not both")
        if memory_id is not None:
            return self._call("DELETE", self._m(memory_id, user_id))
        if user_id is None:
            raise InputError("give user_id (or the id of a memory)", field="user_id")
        suffix = f"/sessions/{_segment(session_id, 'session_id')}" if session_id is not None else ""
        return self._call("DELETE", self._u(user_id) + suffix)

    def delete_all(self, *, user_id: str, agent_id: str | None = None, run_id: str | None = None,
                   filters: dict[str, Any] | None = None) -> dict[str, int]:
        """All memory of ``user_id``, or with ``agent_id``, ``run_id`` or ``filters`` that of the user's sessions
        added with them (what they had replaced is judged again, once)."""
        scope = with_scopes(filters, agent_id=agent_id, run_id=run_id)
        return self._call("DELETE", self._u(user_id), params=_drop_none({"filters": _json(scope)}))

    def reset(self) -> dict[str, int]:
        """Delete all memory of every user of the key's tenant."""
        return self._call("POST", "/v1/reset")

    def _out(self, memories: list[dict[str, Any]]) -> Any:
        return memories if self.output_format == "list" else {"results": memories}

    def export(self, path: str | Path) -> int:
        """Write the tenant's memory to ``path`` in the store's exchange format; returns the sessions written."""
        sessions, tail = 0, b""
        with self._http.stream("GET", "/v1/export") as response:  # streamed: a whole store need not fit in memory
            if response.status_code >= 400:
                raise ServerError(response.status_code, response.read().decode("utf-8", "replace"))
            with open_private(path, "wb") as out:
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


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if value is not None}


def _json(conditions: dict[str, Any]) -> str | None:
    """Metadata conditions as the JSON the ``filters`` query parameter takes (``None``: no condition)."""
    return json.dumps(conditions) if conditions else None


def _segment(name: str, field: str) -> str:
    """``name`` as one URL path segment. A name the service would refuse is refused here, before the URL is
    sent: "." or ".." would otherwise be resolved away ("/v1/users/./memories" is "/v1/users/memories")."""
    problem = name_problem(name)
    if problem is not None:
        raise InputError(problem, field=field)
    return quote(name, safe="")
