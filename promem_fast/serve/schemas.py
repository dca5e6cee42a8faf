"""Typed request and response bodies of the HTTP API, so ``/openapi.json`` (and ``/docs``) describe every field.

The response models declare the shapes :mod:`promem_fast.shapes` builds; FastAPI validates each reply against
them, so a field the shapes stop sending fails the request in tests instead of silently leaving the API.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from promem_fast.shapes import DEFAULT_K, KEEP, metadata_changes
from promem_fast.store.filters import SUMMARY


# ---------------------------------------------------------------------------------------------- requests
class AddSessions(BaseModel):
    """Sessions of one user, in the input format of ``promem extract`` (``user`` may be left out), or one
    conversation as ``messages`` (mem0's form); ``metadata`` is stored with every session given."""

    sessions: list[dict[str, Any]] | None = Field(default=None, min_length=1, max_length=1000)
    messages: list[dict[str, Any]] | str | None = Field(
        default=None, description="one conversation: [{role, content}] or what the user said")
    date: str | None = Field(default=None, max_length=64, description="when the messages were said (ISO 8601)")
    session_id: str | None = Field(default=None, max_length=128, description="the conversation's id (messages "
                                   "only): a request sent again with it stores the conversation once; without it "
                                   "and a date, each request is a new conversation, said when it arrives")
    metadata: dict[str, Any] | None = Field(default=None, description="stored with the sessions; filters search")
    infer: bool = Field(default=True, description="false: keep each message as written, no model called (mem0's "
                        "infer=False; such memories replace no older one)")
    expiration_date: str | None = Field(
        default=None, max_length=64, description="the last day the memories hold (YYYY-MM-DD, mem0's name; kept in "
        "metadata): later searches, lists and answers leave them out unless show_expired, as replaced ones")

    @model_validator(mode="after")
    def _one_form(self) -> AddSessions:
        if (self.sessions is None) == (self.messages is None):
            raise ValueError("give either sessions or messages")
        if self.session_id is not None and self.messages is None:
            raise ValueError("session_id names a conversation of messages; sessions carry their own")
        return self


class TimeScope(BaseModel):
    """When a question is asked: ``as_of`` (what held then) and an optional window of when memories were said.
    Each is ISO 8601 (or a dataset form), read by one rule: unreadable, or outside the years 0001-9999 in
    UTC, or ``since`` after ``until``, is a 422 naming the field."""

    as_of: str | None = Field(default=None, max_length=64, description="what held at this time: replaced memories "
                              "count until replaced (ISO 8601; a bare day means its end; default now)")
    since: str | None = Field(default=None, max_length=64, description="only memories said on or after this time "
                              "(a bare day from its start)")
    until: str | None = Field(default=None, max_length=64, description="only memories said on or before this time "
                              "(a bare day through its end)")


class SearchQuery(TimeScope):
    query: str = Field(min_length=1, max_length=4000)
    k: int = Field(default=DEFAULT_K, ge=1, le=200, description=f"memories to return (default {DEFAULT_K})")
    top_k: int | None = Field(default=None, ge=1, le=200, description="the same as k (mem0's name)")
    limit: int | None = Field(default=None, ge=1, le=200, description="the same as k (mem0's older name)")
    filters: dict[str, Any] | None = Field(default=None, description=SUMMARY)
    threshold: float | None = Field(default=None, ge=-1, le=1, description="only memories whose score (cosine "
                                    "with the query) is at least this (mem0's minimum score); default none")
    show_expired: bool = Field(default=False, description="also memories past their session's expiration_date")
    explain: bool = Field(default=False, description="each memory says how it was ranked (score_details)")

    @model_validator(mode="after")
    def _one_count(self) -> SearchQuery:
        if len(self.model_fields_set & {"k", "top_k", "limit"}) > 1:
            raise ValueError("give one of k, top_k and limit")
        return self

    def count(self) -> int:
        """The number of memories asked for, by whichever name."""
        return self.top_k or self.limit or self.k


class Update(BaseModel):
    """An edit by hand: new text, metadata for this memory alone, an expiration date, or several at once."""

    data: str | None = Field(default=None, min_length=1, max_length=4000, description="the memory's new text")
    text: str | None = Field(default=None, min_length=1, max_length=4000, description="the same as data (mem0's "
                             "name)")
    metadata: dict[str, Any] | None = Field(
        default=None, description="changes to this memory's metadata alone (its session's until now): the keys "
        "given are set, the others kept; user_id, agent_id and run_id stay as they are")
    expiration_date: str | None = Field(
        default=None, max_length=64, description="the last day this memory holds (YYYY-MM-DD); null removes it")

    @model_validator(mode="after")
    def _something(self) -> Update:
        if self.data is not None and self.text is not None:
            raise ValueError("give the new text once, as data or text")
        if self.data is None and self.text is None and self.metadata is None and \
                "expiration_date" not in self.model_fields_set:
            raise ValueError("give new text (data), metadata or an expiration_date")
        if "expiration_date" in self.model_fields_set and "expiration_date" in (self.metadata or {}):
            raise ValueError("give the expiration_date once, in metadata or beside it")
        return self

    def changes(self) -> dict[str, Any] | None:
        """The metadata changes, the expiration date among them when given (null: removed)."""
        return metadata_changes(self.metadata, self.expiration_date if "expiration_date" in self.model_fields_set
                                else KEEP)


class Question(TimeScope):
    question: str = Field(min_length=1, max_length=4000)
    filters: dict[str, Any] | None = Field(default=None, description="answer from the memories whose session's "
                                           "metadata meets these conditions only (as for search)")


# ---------------------------------------------------------------------------------------------- replies
class Link(BaseModel):
    relation: str
    direction: Literal["out", "in"]
    id: int = Field(description="the linked memory's id")
    memory: str = Field(description="the linked memory's text")


class Edit(BaseModel):
    text: str = Field(description="the memory's text before this update")
    at: str = Field(description="when the update was made (ISO 8601, UTC)")
    metadata: dict[str, Any] | None = Field(default=None, description="its metadata before this update, when the "
                                            "update changed it", exclude_if=lambda value: value is None)


class ScoreDetails(BaseModel):
    """How the hybrid ranking placed a memory (mem0's ``explain``)."""

    semantic_score: float = Field(description="cosine with the query (the memory's score)")
    dense_rank: int | None = Field(description="place in the embedder's ranking (1 = best); null: not a candidate")
    lexical_rank: int | None = Field(description="place in the full-text ranking; null: shares no word of the query")
    time_rank: int | None = Field(description="place among the memories said in the days the query names; null "
                                  "when it names none or the memory was not said then")
    window: list[str] | None = Field(description="the first and last day the query names; null when it names none")
    fused_score: float = Field(description="the reciprocal rank fusion score that ordered the results")


class Memory(BaseModel):
    """One memory: a search hit (with ``score``), a listed memory or a node of a history."""

    id: int = Field(description="the memory's id: the one to get, delete or ask the history of")
    memory: str = Field(description="the text")
    user_id: str
    session_ids: list[str] = Field(description="every session that said it, the first sayer first")
    valid_from: str | None = Field(description="when it was said (ISO 8601); null when undated")
    valid_until: str | None = Field(description="when a newer memory replaced it; null while current")
    recorded_at: str | None = Field(description="when the store received it (ISO 8601, UTC)")
    superseded_by: int | None = Field(description="the memory that replaced it; null while current")
    reason: str | None = Field(description="why it was replaced (the update judge's words)")
    score: float | None = Field(description="cosine with the query (search only)")
    details: list[str]
    metadata: dict[str, Any] = Field(default_factory=dict, description="what its session was added with")
    links: list[Link]
    edits: list[Edit] = Field(default_factory=list, description="the texts an update replaced, oldest first")
    score_details: ScoreDetails | None = Field(
        default=None, exclude_if=lambda v: v is None,  # a memory is the same shape on every surface unless explained
        description="how a search asked to explain (explain) ranked it; absent otherwise")


class Hits(BaseModel):
    results: list[Memory]


class Memories(BaseModel):
    memories: list[Memory]


class Replacement(BaseModel):
    old: int
    new: int
    kind: Literal["update", "duplicate"]
    reason: str | None


class History(BaseModel):
    id: int
    nodes: list[Memory] = Field(description="the memories linked to it either way, oldest first")
    edges: list[Replacement] = Field(description="which memory replaced (or absorbed) which")


class Shown(BaseModel):
    id: int | None
    memory: str
    session_id: str
    day: str | None
    score: float | None


class Answer(BaseModel):
    question: str
    answer: str | None = Field(description="null when memory holds nothing on the question (see abstained) or "
                                           "answering failed (see error)")
    abstained: str | None = Field(None, description="why there is no answer: no stored memory bears on the "
                                                    "question (never a guess)")
    as_of: str | None = Field(description="the time the memories were taken at")
    error: str | None
    memories: list[Shown] = Field(description="the memories the answerer was shown, in that order")


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
    source: str | None = Field(default=None, description="what the user said in the memory's turn (none for a "
                                                         "memory stored before sources were kept)")
    valid_from: str | None = Field(default=None, description="when it was said (ISO 8601)")
    valid_until: str | None = Field(default=None, description="when a newer memory replaced it (ISO 8601)")
    superseded_by: int | None
    merged_into: int | None = Field(default=None, description="a later saying of this memory: the one it joined")
    expired: bool = Field(default=False, description="past its session's expiration_date (today, UTC): it no "
                          "longer holds, as a replaced one")


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
