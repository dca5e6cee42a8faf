"""``Memory``: the front door for a program that keeps a memory of its users (extract, store, search, answer).

One object over one store file, with the verbs and result shapes that the HTTP API, the Python client, the
CLI and MCP use as well. The verbs are mem0's (``add``, ``search``, ``get``, ``get_all``, ``update``,
``history``, ``delete``, ``delete_all``, ``reset``), so a program written for mem0 runs with its import changed::

    from promem_fast import Memory

    memory = Memory()            # the store under the user's data folder (see private.data_home)
    memory.add("I moved to Denver last week.", user_id="tom", metadata={"topic": "home"})
    memory.add([{"role": "user", "content": "I adopted a beagle."},
                {"role": "assistant", "content": "Congratulations!"}], user_id="tom", date="2024-03-02")
    memory.search("Where does Tom live?", user_id="tom", top_k=3)["results"]
    memory.search("Where does Tom live?", filters={"user_id": "tom", "topic": "home"})
    memory.search("Where did Tom live?", user_id="tom", as_of="2024-02-01")
    memory.add("My locker code is 4411.", user_id="tom", agent_id="gym-bot", infer=False)  # kept as written
    memory.search("locker", filters={"user_id": "tom", "agent_id": "gym-bot"}, threshold=0.3)
    memory.answer("Where did Tom live in January?", user_id="tom", as_of="2024-01-31")

``search`` and ``get_all`` give ``{"results": [memory...]}``; ``Memory(output_format="list")`` gives the bare
list instead (what this class returned before it took mem0's shape).

Result shapes (every time ISO 8601, every memory named by one ``id``):

*memory* (``search``, ``get``, ``get_all``, ``history``'s nodes)::

    {"id": 17,                             # the memory's id; get, update, history and delete take it
     "memory": "Tom lives in Denver.",      # the text
     "user_id": "tom",
     "session_ids": ["s2", "s3"],           # every session that said it, first the one that said it first
     "valid_from": "2024-03-02T10:00:00",   # when it was said (null: undated)
     "valid_until": null,                   # when a newer memory replaced it (the newer one's valid_from)
     "recorded_at": "2026-12-03T13:40:00Z", # when the store received it
     "superseded_by": null,                 # id of the memory that replaced it
     "reason": null,                        # why it was replaced (the update judge's words)
     "score": 0.81,                         # cosine with the query (search only, else null)
     "details": ["Denver"],                 # details anchored to it
     "metadata": {"topic": "home"},         # what add() was given with its session (or update() with it)
     "links": [{"relation": "temporal", "direction": "out", "id": 18, "memory": "..."}],
     "edits": [{"text": "Tom lives in Denver", "at": "2026-12-04T09:00:00Z"}]}  # texts update() replaced

*add*: ``{"user_id", "session_id", "added": bool (false: the store had the session), "results": [event],
"failed_steps": [{"stage", "item", "error"}]}`` (the extraction steps that failed, so a session that gave few
memories or none says why: a small model's reply that looped, a judge that could not decide) with one event
per memory the session gave::

    {"id": 21, "memory": "...", "event": "add" | "update" | "duplicate",
     "replaces": [17],      # "update": the memories it superseded
     "duplicate_of": null,  # "duplicate": the memory it was merged into (which now lists this session)
     "reason": "..."}

*add_many*: a list of *add*'s results, one per item in order, each with ``"error"`` (why it was refused or not
stored; None when it was).

*answer*: ``{"question", "answer" (null when the model failed), "as_of", "error", "memories": [{"id",
"memory", "session_id", "day", "score"}]}`` (the memories the answerer was shown, in the order shown).

*history*: ``{"id", "nodes": [memory...] (oldest first), "edges": [{"old", "new", "kind": "update" |
"duplicate", "reason"}]}``: the replacement graph through the memory (two facts replaced by one are two
edges into one node, not a chain).

*update*: the memory with its new text or metadata of its own (which filters and expiry then read for it); what
it replaced is kept in its ``edits``, oldest first (``{"text", "at"}``, ``"metadata"`` when that changed), shown
wherever the memory is: deleting the memory removes them with it.

*delete*, *delete_all*, *reset*: ``{"deleted": n}`` memories removed; what they had replaced or merged is
judged again, so the memory is exactly as if they had never been added.

Threads: one ``Memory`` may serve several threads (a web server's request threads). The verbs that write or drive
the models (``add``, ``add_many``, ``answer``, ``update``, ``delete``, ``delete_all``, ``reset``) take turns; the
reads (``search``, ``get``, ``get_all``, ``history``) never wait for them: a read during a write reads the store
as committed, the memory before that write, never half of it (a session's memories appear with the verdicts on
what they replace)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from promem_fast import shapes
from promem_fast.adding import as_session, not_stored, store_sessions, stored, when
from promem_fast.config import EngineConfig
from promem_fast.errors import InputError

if TYPE_CHECKING:
    from promem_fast.engine import Engine
    from promem_fast.store.store import MemoryStore, UpdateJudge
    from promem_fast.types import Session

log = logging.getLogger(__name__)

SMALL_MODEL_NOTE = (
    "Memory extracts with SmolLM2-135M-Instruct on the CPU (the cpu profile's default model): it runs anywhere, "
    "but a 135M model writes few, shallow or wrong memories, and for a short message often none (each add's "
    "failed_steps says why). For real memories give it a real model: Memory(profile=\"gpu\") on a GPU, or any "
    "OpenAI-compatible server (llama-server, vllm serve, python -m llama_cpp.server): "
    "Memory.from_config({\"profile\": \"cpu\", \"llm\": {\"backend\": \"openai\", "
    "\"base_url\": \"http://127.0.0.1:8080/v1\", \"model\": \"MODEL\"}})")
"""Logged once per ``Memory`` when its engine loads the shipped 135M model, which a program's author may not
know they chose by leaving the profile out."""

_MEM0_KEYS = frozenset({"vector_store", "graph_store", "history_db_path", "reranker", "version",
                        "custom_fact_extraction_prompt", "custom_update_memory_prompt"})
"""Top-level keys of a mem0 configuration that promem's has no section for."""

PROFILE_ENV = "PROMEM_PROFILE"
"""The profile ``Memory()`` uses when none is given (default ``cpu``)."""

OutputFormat = Literal["results", "list"]

_Verb = TypeVar("_Verb", bound=Callable[..., Any])


def _writes(verb: _Verb) -> _Verb:
    """A verb that writes or drives the engine: such calls take turns (see the module's threads)."""

    @functools.wraps(verb)
    def call(self: Memory, *args: Any, **kwargs: Any) -> Any:
        with self._writing:
            return verb(self, *args, **kwargs)

    return call  # type: ignore[return-value]


def _default_location() -> str | Path:
    """``$PROMEM_DB_URL`` when set, else ``memory.db`` in the user's data folder."""
    from promem_fast.persistence.api import DB_URL_ENV
    from promem_fast.private import data_home

    return os.environ.get(DB_URL_ENV) or data_home() / "memory.db"


class Memory:
    """``Memory(path=None, profile=None)``: a memory store at ``path`` (an SQLite file or a ``postgresql://``
    URL; default ``$PROMEM_DB_URL`` when set, else ``memory.db`` under the user's data folder,
    :func:`~promem_fast.private.data_home`) with the engine of ``profile`` (default
    ``$PROMEM_PROFILE``, else ``cpu``) or ``config`` that extracts sessions, judges updates and answers; a
    context manager."""

    def __init__(self, path: str | Path | None = None, *, profile: str | None = None,
                 config: EngineConfig | None = None, tenant: str = "default", update_judge: UpdateJudge = "llm",
                 key_file: str | Path | None = None, output_format: OutputFormat = "results") -> None:
        """``key_file``: the store is encrypted with that key (see the README's data lifecycle section).
        ``output_format``: ``results`` (``{"results": [...]}``, mem0's shape) or ``list``."""
        from promem_fast.store import MemoryStore

        if output_format not in ("results", "list"):
            raise InputError(f"output_format must be 'results' or 'list', not {output_format!r}", field="output_format")
        profile = profile or os.environ.get(PROFILE_ENV) or "cpu"
        self.config = (config or EngineConfig.profile(profile)).validate()
        self.tenant = tenant
        self.output_format = output_format
        self._profile = None if config is not None else profile
        self._location = _default_location() if path is None else path
        self._key_file = key_file
        self.store: MemoryStore = MemoryStore(self._location, self.config, update_judge=update_judge,
                                              profile=self._profile, key_file=key_file)
        self._engine: Engine | None = None
        self._writing = threading.RLock()
        """Held by a verb that writes or drives the engine: the engine and the store's connection serve one such
        call at a time. Reads do not wait for it (:meth:`_reading`)."""
        self._reader: MemoryStore | None = None
        self._reader_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: dict[str, Any] | str | Path, **options: Any) -> Memory:
        """A memory whose engine ``config`` sets: promem's sections as nested dicts (those ``promem config``
        prints; a ``profile`` key picks the preset they go on) or a config file (``.yaml``, ``.toml``,
        ``.json``); ``options`` are the constructor's (``path``, ``tenant``, ...). A mem0 configuration
        (providers of ``llm``, ``vector_store``, ...) is refused, naming the key to translate."""
        from promem_fast.errors import ConfigError

        if not isinstance(config, dict):
            return cls(config=EngineConfig.load(config), **options)
        foreign = [key for key, value in config.items() if key in _MEM0_KEYS
                   or isinstance(value, dict) and "provider" in value]
        if foreign:
            raise ConfigError(f"{foreign[0]!r} is mem0's configuration, not promem's: promem's sections are those "
                              "`promem config` prints (llm.backend, llm.model, llm.base_url for an OpenAI-compatible "
                              "server, embedder...), and the store is Memory's path")
        return cls(config=EngineConfig.from_dict(config, source="Memory.from_config"), **options)

    # ------------------------------------------------------------------------------------ lifecycle
    @property
    def engine(self) -> Engine:
        """The engine (loaded on first use: searching needs only the embedder)."""
        if self._engine is None:
            from promem_fast.engine import Engine

            engine = Engine(self.config, embedder=self.store.embedder)
            if self.config.llm.backend == "llamacpp" and self.config.llm.model is None:
                log.warning(SMALL_MODEL_NOTE)
            try:
                engine.services.preload()  # a missing library or model: the first add says so, with the fix
            except BaseException:
                engine.close()
                raise
            self._engine = engine
        return self._engine

    def close(self) -> None:
        with self._writing:
            if self._engine is not None:
                self._engine.close()
                self._engine = None
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self.store.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[MemoryStore]:
        """The store a read uses: the memory's own when no write is in progress (one connection and one vector
        index for a program that never overlaps them), else a second connection to the same store, opened the
        first time a read overlaps a write. It reads what is committed (SQLite's WAL, PostgreSQL's snapshots):
        the memory before the write in progress, never half of it, without waiting for it."""
        if self._writing.acquire(blocking=False):
            try:
                yield self.store
            finally:
                self._writing.release()
            return
        with self._reader_lock:
            if self._reader is None:
                from promem_fast.store import MemoryStore

                self._reader = MemoryStore(self._location, self.store.config, embedder=self.store.embedder,
                                           update_judge=self.store.update_judge, key_file=self._key_file)
            reader = self._reader
        yield reader

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ verbs
    @_writes
    def add(self, messages: str | Sequence[dict[str, Any]] | dict[str, Any] | Session, *,
            user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
            metadata: dict[str, Any] | None = None, date: str | None = None, timestamp: str | float | None = None,
            expiration_date: str | datetime.date | None = None, session_id: str | None = None,
            infer: bool = True) -> dict[str, Any]:
        """Extract one session's memory and store it; ``messages`` is what the user said (a string), a list
        of ``{"role", "content"}`` (roles ``user``/``assistant``; ``system`` messages are left out), a
        session record (``promem extract``'s input) or a ``Session``. ``metadata`` (a JSON object) is stored
        with it and filters searches; ``agent_id`` and ``run_id`` go into it under those names (mem0's scopes,
        which ``filters`` and ``delete_all`` then take). ``date`` (or ``timestamp``: ISO 8601, or Unix
        seconds) is when it was said; ``expiration_date`` the last day its memories hold (later searches and lists
        leave them out unless asked for ``show_expired``, as a replaced memory). ``infer=False`` keeps each message
        as written, with no model called (:mod:`promem_fast.verbatim`)."""
        if user_id is None:
            raise InputError("promem keeps memory per user: give user_id (agent_id and run_id go into the "
                             "session's metadata, where filters and delete_all find them)", field="user_id")
        session = as_session(messages, user_id, when(date, timestamp), session_id, shapes.with_scopes(
            metadata, agent_id=agent_id, run_id=run_id, expiration_date=shapes.day_given(expiration_date)))
        if not infer:
            session = dataclasses.replace(session, infer=False)
        if self.store.has_session(self.tenant, user_id, session.session_id):
            return {"user_id": user_id, "session_id": session.session_id, "added": False, "results": [],
                    "failed_steps": []}
        failed = store_sessions(self.store, self.tenant, self._engine_if, [session], progress=False)
        if failed:  # a model server that does not answer, a backend that crashed: stored nothing, and says so
            from promem_fast.errors import SessionFailed

            (cause,) = failed.values()
            if isinstance(cause, InputError):  # the caller's own fault, named by field
                raise cause
            raise SessionFailed(not_stored(session, cause)) from cause
        return stored(self.store, self.tenant, session)

    @_writes
    def add_many(self, conversations: Iterable[Any], *, user_id: str | None = None,
                 metadata: dict[str, Any] | None = None, infer: bool = True,
                 progress: bool | None = None) -> list[dict[str, Any]]:
        """Add many conversations in one run of the engine (:mod:`promem_fast.adding`): they extract side by side,
        as ``promem extract`` runs them, the same memory as one ``add`` after another. Each is what ``add`` takes
        as ``messages`` (a record or ``Session`` may name its own user, else ``user_id``); one result per item,
        in order, ``add``'s with ``"error"``: why an item was refused or not stored (None: stored or known);
        ``progress``: count them on stderr (default: the configuration's ``progress``)."""
        from promem_fast.adding import add_many

        return add_many(self.store, self.tenant, self._engine_if, conversations, user_id=user_id,
                        metadata=metadata, infer=infer, progress=progress)

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, top_k: int | None = None, limit: int | None = None, k: int | None = None,
               filters: dict[str, Any] | None = None, threshold: float | None = None, as_of: str | None = None,
               since: str | None = None, until: str | None = None, show_expired: bool = False,
               explain: bool = False, rerank: bool = False) -> Any:
        """The ``top_k`` (or ``limit``, ``k``; default 10) memories closest to ``query``, best first: those
        current at ``as_of`` (default: now, the latest of each), said between ``since`` and ``until`` when
        given, whose metadata meets ``filters`` (:mod:`promem_fast.store.filters`; a ``user_id`` there
        names the user, ``agent_id`` and ``run_id`` there or here the session's scope) and whose ``score``
        (cosine with the query) is at least ``threshold`` when given; with ``show_expired`` also memories past
        their session's ``expiration_date``; with ``explain`` each says how it was ranked (``score_details``: its
        place in the dense, lexical and time rankings, the window the query names, the fused score). ``rerank``
        (mem0's switch for its reranker models) is refused when true: there is no reranker stage to run."""
        if rerank:
            raise InputError("promem has no reranker stage: its hybrid ranking (dense, lexical and time ranks "
                             "fused) orders the results; leave rerank out", field="rerank")
        user, conditions = shapes.user_and_filters(user_id, filters, agent_id=agent_id, run_id=run_id)
        count = shapes.result_count(top_k, limit, k, shapes.DEFAULT_K)
        with self._reading() as store:
            hits = store.search(user, query, count, tenant=self.tenant, as_of=as_of, since=since, until=until,
                                filters=conditions, threshold=threshold, show_expired=show_expired, explain=explain)
        return self._out([hit.memory() for hit in hits])

    @_writes
    def answer(self, question: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, filters: dict[str, Any] | None = None, as_of: str | None = None,
               since: str | None = None, until: str | None = None) -> dict[str, Any]:
        """Answer ``question`` from the memories current at ``as_of`` (the question's own time; default
        now) whose session's metadata meets ``filters`` (and ``agent_id``, ``run_id``; as for :meth:`search`),
        each shown with its day (``2024-03-02 (Saturday)``)."""
        user, conditions = shapes.user_and_filters(user_id, filters, agent_id=agent_id, run_id=run_id)
        (reply,) = self.store.answer(user, [question], engine=self.engine, tenant=self.tenant, as_of=as_of,
                                     since=since, until=until, filters=conditions)
        return shapes.answer(reply)  # the shape every surface gives

    def get(self, memory_id: int) -> dict[str, Any] | None:
        """One memory by id (``None`` when there is none)."""
        from promem_fast.store.editing import one

        with self._reading() as store:
            hit = one(store, memory_id, self.tenant)
        return None if hit is None else hit.memory()

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: dict[str, Any] | None = None, top_k: int | None = None, limit: int | None = None,
                history: bool = False, show_expired: bool = False) -> Any:
        """Every current memory of the user, oldest first (replaced and merged ones too with ``history``),
        those whose metadata meets ``filters`` (and ``agent_id``, ``run_id``); the first ``top_k`` (or
        ``limit``) of them when given; with ``show_expired`` also those past their ``expiration_date``."""
        user, conditions = shapes.user_and_filters(user_id, filters, agent_id=agent_id, run_id=run_id)
        with self._reading() as store:
            hits = store.hits(user, tenant=self.tenant, history=history, filters=conditions, show_expired=show_expired)
        return self._out([hit.memory() for hit in hits[:shapes.result_count(top_k, limit, None, len(hits))]])

    @_writes
    def update(self, memory_id: int, data: str | None = None, metadata: dict[str, Any] | None = None,
               expiration_date: str | datetime.date | None | object = shapes.KEEP, *, text: str | None = None
               ) -> dict[str, Any]:
        """Edit a memory by hand, in one step (mem0's arguments and order; :mod:`promem_fast.store.editing`): new
        text (``data``, or ``text``; re-embedded), ``metadata`` changes for it alone (given keys set, the others
        kept) and ``expiration_date`` (None removes it); the same id, links and history."""
        from promem_fast.store.editing import edit

        if data is not None and text is not None:
            raise InputError("give the new text once, as data or text", field="data")
        hit = edit(self.store, memory_id, self.tenant, text=data if text is None else text,
                   metadata=shapes.metadata_changes(metadata, expiration_date))
        if hit is None:
            raise InputError(f"there is no memory {memory_id}", field="memory_id")
        return hit.memory()

    def history(self, memory_id: int) -> dict[str, Any]:
        """The replacement graph through ``memory_id`` (see the module's shapes)."""
        with self._reading() as store:
            return store.history_graph(memory_id, tenant=self.tenant)

    @_writes
    def delete(self, memory_id: int | None = None, *, user_id: str | None = None,
               session_id: str | None = None) -> dict[str, int]:
        """Remove one memory (its user need not be named), one session, or (neither) the whole user."""
        if memory_id is not None and session_id is not None:
            raise InputError("give memory_id or session_id, not both", field="memory_id")
        if user_id is None:
            if memory_id is None:
                raise InputError("give user_id (or the id of a memory)", field="user_id")
            found = self.get(memory_id)
            if found is None:
                raise InputError(f"there is no memory {memory_id}", field="memory_id")
            user_id = str(found["user_id"])
        engine = self._rejudging(memory_id is not None or session_id is not None)
        return {"deleted": self.store.delete(tenant=self.tenant, user=user_id, session=session_id,
                                             node=memory_id, engine=engine)}

    @_writes
    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, int]:
        """Remove all memory of the user (gone from disk); with ``agent_id`` or ``run_id``, that of the user's
        sessions added with them, at once (what those sessions had replaced is judged again, once)."""
        if user_id is None:
            raise InputError("give user_id: promem keeps memory per user (agent_id and run_id narrow it)",
                             field="user_id")
        scope = shapes.with_scopes(None, agent_id=agent_id, run_id=run_id)
        return {"deleted": self.store.delete(tenant=self.tenant, user=user_id, filters=scope,
                                             engine=self._rejudging(bool(scope)))}

    @_writes
    def reset(self) -> dict[str, int]:
        """Remove all memory of every user of this tenant (other tenants of the store keep theirs)."""
        from promem_fast.store.editing import reset

        return {"deleted": reset(self.store, self.tenant)}

    def _rejudging(self, narrow: bool) -> Engine | None:
        """The engine that judges again what a narrow delete (a memory, some sessions) reopened; none for a whole
        user, or a store that does not judge updates (no model is loaded for it)."""
        return self.engine if narrow and self.store.update_judge != "off" else None

    def _engine_if(self, load: bool) -> Engine | None:
        """The engine, loaded on demand (``load``), else the one loaded, if any (a verbatim add needs none)."""
        return self.engine if load else self._engine

    def _out(self, memories: list[dict[str, Any]]) -> Any:
        return memories if self.output_format == "list" else {"results": memories}

