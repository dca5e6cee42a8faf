"""Typed request and response bodies of the HTTP API, so ``/openapi.json`` (and ``/docs``) describe every field.

The response models declare the shapes :mod:`promem_fast.shapes` builds; FastAPI validates each reply against
them, so a field the shapes stop sending fails the request in tests instead of silently leaving the API.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from promem_fast.shapes import DEFAULT_K


# ---------------------------------------------------------------------------------------------- requests
class AddSessions(BaseModel):
    """Sessions of one user, in the input format of ``promem extract`` (``user`` may be left out)."""

    sessions: list[dict[str, Any]] = Field(min_length=1, max_length=1000)


class TimeScope(BaseModel):
    """When a question is asked: ``as_of`` (ISO 8601; default now) and an optional window of days."""

    as_of: str | None = Field(default=None, max_length=64, description="the question's time (ISO 8601)")
    since: str | None = Field(default=None, max_length=64, description="only memories said on or after this day")
    until: str | None = Field(default=None, max_length=64, description="only memories said on or before this day")


class SearchQuery(TimeScope):
    query: str = Field(min_length=1, max_length=4000)
    k: int = Field(default=DEFAULT_K, ge=1, le=200, description=f"memories to return (default {DEFAULT_K})")


class Questions(TimeScope):
    questions: list[str] = Field(min_length=1, max_length=64)


# ---------------------------------------------------------------------------------------------- replies
class Edge(BaseModel):
    relation: str
    direction: Literal["out", "in"]
    node_id: int = Field(description="the linked memory's id")
    text: str = Field(description="the linked memory's text")


class Memory(BaseModel):
    """One memory: a search hit (with ``score``), a listed memory or a step of a history."""

    id: int = Field(description="the memory's id: the one to get, delete or ask the history of")
    user_id: str
    session_id: str
    text: str
    date: str | None = Field(description="the day it was said (ISO 8601), when known")
    turn_id: int | str | None = Field(description="the turn of its session that grounds it")
    score: float | None = Field(description="cosine with the query (search only)")
    details: list[str]
    edges: list[Edge]
    superseded_by: int | None = Field(description="the newer memory that replaced it; null while current")
    valid_from: str | None = Field(default=None, description="the day it became true (sent when the store keeps it)")
    valid_until: str | None = Field(default=None, description="the day a newer memory replaced it")
    recorded_at: str | None = Field(default=None, description="when it was stored (ISO 8601, UTC)")


class MemoryWithHistory(Memory):
    history: list[Memory] = Field(description="every version it replaced or that replaced it, oldest first")


class Hits(BaseModel):
    hits: list[Memory]


class Memories(BaseModel):
    memories: list[Memory]


class Shown(BaseModel):
    session_id: str
    date: str | None
    score: float | None
    text: str


class Answer(BaseModel):
    question: str
    answer: str | None = Field(description="null when answering failed (see error)")
    error: str | None
    memories: list[Shown] = Field(description="the memories the answer was drawn from, best first")


class Answers(BaseModel):
    answers: list[Answer]


class Rejected(BaseModel):
    index: int
    session_id: str | None
    field: str
    error: str


class Accepted(BaseModel):
    job_id: str
    accepted: int
    rejected: list[Rejected]


class JobError(BaseModel):
    session_id: str
    error: str | None


class Job(BaseModel):
    job_id: str
    user_id: str
    state: Literal["queued", "running", "finished"]
    created: str = Field(description="when the job was accepted (ISO 8601, UTC)")
    total: int
    pending: int
    running: int
    done: int
    failed: int
    errors: list[JobError]


class Users(BaseModel):
    users: list[str]


class Sessions(BaseModel):
    sessions: list[str]


class Deleted(BaseModel):
    deleted: int = Field(description="rows removed")


class GraphNode(BaseModel):
    id: int
    session_id: str
    text: str
    date: str | None
    turn_id: int | str | None
    superseded_by: int | None


class GraphEdge(BaseModel):
    source: int
    target: int
    relation: str


class GraphDetail(BaseModel):
    node: int
    text: str


class Graph(BaseModel):
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    details: list[GraphDetail]
