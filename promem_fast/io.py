"""Input and output files.

Input: JSONL, one session per line, in either form::

    {"session_id": "s1", "user": "Maya Chen", "timestamp": "2025-03-14T09:30:00",
     "turns": [{"turn_id": 0, "role": "user", "text": "...", "timestamp": "..."},
               {"turn_id": 0, "role": "assistant", "text": "..."}]}
    {"session_id": "s2", "user": "Maya Chen", "messages": [{"role": "user", "content": "..."}, ...]}

``turn_id`` is optional (a user message opens a new turn, the replies after it share its id); ``text``
may be spelled ``content``; every ``timestamp`` (a JSON number: Unix seconds) is read once here into the one
kept form of :mod:`promem_fast.times` (``2023-05-08T13:56:00``), or refused by field; ``owner_role`` names
whose memory it is when the speakers are peers (default ``user``); ``system`` messages of the OpenAI form are
not dialogue and are left out; ``"infer": false`` keeps each message as written, with no model called
(:mod:`promem_fast.verbatim`).
Every problem is reported as an :class:`~promem_fast.errors.InputError` naming file, line, session and field,
including what would only fail later (a lone surrogate cannot be written as UTF-8, a giant integer cannot be
read back), so one bad record never ends a run.

Output: JSONL, one :class:`~promem_fast.types.MemoryGraph` per line, appended and flushed as each session
finishes, so a killed run loses at most the line being written; ``resume`` drops such a torn last line and
reports the ids already done.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from promem_fast.errors import InputError, WriteFailed
from promem_fast.jsonl import BOM, decode_line, printable, unwritable_field
from promem_fast.names import MAX_NAME_CHARS, name_problem
from promem_fast.private import open_private, private_dirs, write_private
from promem_fast.times import EXPIRES, TimeProblem, kept_day, parse_time
from promem_fast.types import MemoryGraph, Session, Turn

log = logging.getLogger(__name__)

MAX_TURN_ID = 2**63 - 1
"""Integer turn ids must fit 64 bits (stores and array code index by them)."""


class _Check:
    """Field checks for one record, raising errors that say exactly where."""

    def __init__(self, file: str | None, line: int | None, session_id: str | None = None) -> None:
        self.file, self.line, self.session_id = file, line, session_id

    def named(self, session_id: str) -> None:
        """Name the session in later errors (spelled so that the error itself can always be written)."""
        self.session_id = printable(session_id)

    def error(self, message: str, field: str | None = None) -> InputError:
        return InputError(message, file=self.file, line=self.line, session_id=self.session_id, field=field)

    def text(self, record: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
        if key not in record or record[key] is None:
            if required:
                raise self.error("missing field", where)
            return None
        value = record[key]
        if not isinstance(value, str):
            raise self.error(f"must be a string, got {type(value).__name__}", where)
        return value

    def day(self, record: dict[str, Any], key: str, where: str) -> str:
        """``record[key]`` as an ISO day (:func:`promem_fast.times.kept_day`), or refused by field."""
        try:
            return kept_day(record[key])
        except TimeProblem as exc:
            raise self.error(str(exc), where) from None

    def timestamp(self, record: dict[str, Any], where: str) -> str | None:
        """The timestamp in the one kept form (:mod:`promem_fast.times`): read here once, for every reader; a
        number is Unix seconds."""
        value: str | float | None = record.get("timestamp")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            value = self.text(record, "timestamp", where, required=False)
        if value is None:
            return None
        try:
            return parse_time(value).isoformat(timespec="seconds")
        except TimeProblem as exc:
            raise self.error(str(exc), where) from None


def session_from_dict(record: Any, *, file: str | None = None, line: int | None = None,
                      max_turn_chars: int = 200_000) -> Session:
    """Validate one input record and build its :class:`Session`."""
    check = _Check(file, line)
    if not isinstance(record, dict):
        raise check.error(f"a session must be a JSON object, got {type(record).__name__}")
    sid = record.get("session_id")
    if isinstance(sid, (str, int)) and not isinstance(sid, bool):
        sid = str(sid)
        check.named(sid if len(sid) <= MAX_NAME_CHARS else sid[:60] + "…")
    bad = unwritable_field(record)
    if bad is not None:
        raise check.error(bad[1], bad[0])
    if sid is None:
        raise check.error("missing field", "session_id")
    if not isinstance(sid, str):
        raise check.error(f"must be a string, got {type(sid).__name__}", "session_id")
    _check_session_id(check, sid)
    user = check.text(record, "user", "user")
    assert user is not None
    problem = name_problem(user)
    if problem is not None:
        raise check.error(problem, "user")
    owner = check.text(record, "owner_role", "owner_role", required=False)
    if owner is not None and not owner.strip():
        raise check.error("must not be empty (leave it out for 'user')", "owner_role")
    owner = owner or "user"
    timestamp = check.timestamp(record, "timestamp")
    metadata = record.get("metadata", {})
    if not isinstance(metadata, dict):
        raise check.error("must be an object", "metadata")
    if metadata.get(EXPIRES) is not None:  # the last day its memories hold, compared as text by the store
        metadata = {**metadata, EXPIRES: check.day(metadata, EXPIRES, f"metadata.{EXPIRES}")}
    infer = record.get("infer", True)
    if not isinstance(infer, bool):
        raise check.error(f"must be true or false, got {type(infer).__name__}", "infer")
    if "turns" in record:
        key, raw_turns = "turns", record["turns"]
    elif "messages" in record:
        key, raw_turns = "messages", record["messages"]
    else:
        raise check.error("missing field (give 'turns' or 'messages')", "turns")
    if not isinstance(raw_turns, list):
        raise check.error(f"must be a list, got {type(raw_turns).__name__}", key)
    turns: list[Turn] = []
    used: set[int | str] = set()
    next_id = -1
    for i, raw in enumerate(raw_turns):
        where = f"{key}[{i}]"
        if not isinstance(raw, dict):
            raise check.error(f"must be an object, got {type(raw).__name__}", where)
        role = check.text(raw, "role", f"{where}.role")
        assert role is not None
        if not role.strip():
            raise check.error("must not be empty", f"{where}.role")
        if key == "messages" and role == "system":
            continue
        text_key = _text_key(raw, key)
        text = check.text(raw, text_key, f"{where}.{text_key}")
        assert text is not None
        if not text.strip():
            raise check.error("turn has no text", f"{where}.{text_key}")
        if len(text) > max_turn_chars:
            raise check.error(f"turn of {len(text):,} characters exceeds max_turn_chars={max_turn_chars:,}",
                              f"{where}.{text_key}")
        if "turn_id" in raw and raw["turn_id"] is not None:
            tid = _turn_id(check, raw["turn_id"], f"{where}.turn_id")
        else:
            if role == owner or next_id < 0:
                next_id += 1
            tid = next_id
        if turns and tid != turns[-1].turn_id and tid in used:
            raise check.error(f"turn id {tid!r} comes back after turn {turns[-1].turn_id!r}; the messages of "
                              f"one turn must be consecutive", f"{where}.turn_id")
        used.add(tid)
        turns.append(Turn(turn_id=tid, role=role, text=text, timestamp=check.timestamp(raw, f"{where}.timestamp")))
    if not turns:
        raise check.error("session has no turns", key)
    if not any(t.role == owner for t in turns):
        raise check.error(f"no turn is spoken by {owner!r}, whose memory this is (set owner_role to one of "
                          f"{sorted({t.role for t in turns})[:5]})", "owner_role")
    return Session(session_id=str(sid), user=user, turns=tuple(turns), timestamp=timestamp or turns[0].timestamp,
                   metadata=metadata, owner_role=owner, infer=infer)


def _check_session_id(check: _Check, sid: str) -> None:
    """Session ids follow the rule of :mod:`promem_fast.names` (they are URL path segments of the service)."""
    problem = name_problem(sid)
    if problem is not None:
        raise check.error(problem, "session_id")


def _text_key(raw: dict[str, Any], form: str) -> str:
    """The text field of a message as the user spelled it, else the one their form calls for."""
    for key in ("text", "content"):
        if key in raw:
            return key
    return "content" if form == "messages" else "text"


def _turn_id(check: _Check, tid: Any, where: str) -> int | str:
    """An explicit turn id: a label, either a non-negative 64-bit integer or a non-empty string."""
    if isinstance(tid, bool) or not isinstance(tid, (int, str)):
        raise check.error(f"must be an integer or string, got {type(tid).__name__}", where)
    if isinstance(tid, int) and not 0 <= tid <= MAX_TURN_ID:
        raise check.error("must be an integer from 0 to 2**63-1", where)
    if isinstance(tid, str) and not tid.strip():
        raise check.error("must not be empty", where)
    return tid


def read_sessions(path: str | Path, *, max_turn_chars: int = 200_000) -> Iterator[Session | InputError]:
    """Each line's session, or the error that line has; a duplicated session id is an error of the later line."""
    with open(path, "rb") as handle:
        yield from parse_lines(enumerate(handle, start=1), str(path), max_turn_chars=max_turn_chars)


def parse_lines(lines: Iterable[tuple[int, bytes]], name: str, *,
                max_turn_chars: int = 200_000) -> Iterator[Session | InputError]:
    """:func:`read_sessions` over numbered raw lines (a whole file, or a part of one)."""
    seen: set[str] = set()
    for number, raw in lines:
        if number == 1:
            raw = raw.removeprefix(BOM)  # editors on Windows start UTF-8 files with one
        if not raw.strip():
            continue
        record = decode_line(raw, name, number)
        if isinstance(record, InputError):
            yield record
            continue
        try:
            session = session_from_dict(record, file=name, line=number, max_turn_chars=max_turn_chars)
        except InputError as exc:
            yield exc
            continue
        except Exception as exc:  # a record the checks missed still loses only its own line
            log.debug("validation crashed", exc_info=True)
            yield InputError(f"could not be read ({type(exc).__name__}: {exc})", file=name, line=number)
            continue
        if session.session_id in seen:
            yield InputError("duplicated session id (first occurrence kept)", file=name, line=number,
                             session_id=session.session_id, field="session_id")
            continue
        seen.add(session.session_id)
        yield session


def load_sessions(path: str | Path, *, max_turn_chars: int = 200_000) -> list[Session]:
    """All sessions of a JSONL file; raises the first :class:`InputError`."""
    out: list[Session] = []
    for item in read_sessions(path, max_turn_chars=max_turn_chars):
        if isinstance(item, InputError):
            raise item
        out.append(item)
    return out


NOT_A_GRAPH = (ValueError, KeyError, TypeError, AttributeError, RecursionError)
"""What reading a line that is JSON of another shape (or no JSON) as a graph raises."""


class _Appender:
    """An append-only JSONL file that survives ``kill -9``: whole lines, flushed one by one."""

    def __init__(self, path: str | Path, *, resume: bool, fsync: bool) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.records: list[Any] = []
        """The JSON of every line kept on resume, parsed once by :meth:`_recover`."""
        if resume and self.path.exists():
            self.records = self._recover()
        elif self.path.exists():
            self.path.unlink()
        private_dirs(self.path.parent)
        # 0600, and a resumed file is narrowed: graphs hold memory text, rejects the raw input lines.
        # A model reply can still hold a lone surrogate (a JSON escape it wrote); spelled as an escape
        # inside the JSON string it reads back as the same text instead of failing the write.
        self._handle: IO[str] = open_private(self.path, "a", encoding="utf-8", errors="backslashreplace")

    def _recover(self) -> list[Any]:
        """The records of the kept lines, after dropping a torn last line; a kept line that is not a
        complete record is an :class:`InputError` naming it."""
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            log.warning("%s: dropping a torn last line of %d bytes left by an interrupted run",
                        self.path, len(data) - end)
            with open(self.path, "r+b") as handle:
                handle.truncate(end)
        good = []
        for number, raw in enumerate(data[:end].splitlines(), start=1):
            try:
                record = json.loads(raw)
                self._check(record)
            except NOT_A_GRAPH as exc:
                raise InputError(f"not a complete record ({type(exc).__name__}: {exc}); remove it or start "
                                 f"again with --overwrite", file=str(self.path), line=number) from exc
            good.append(record)
        return good

    def _check(self, record: Any) -> None:
        """Raise if a kept line is not what this file holds (a JSON object by default)."""
        if not isinstance(record, dict):
            raise TypeError(f"expected a JSON object, got {type(record).__name__}")

    def append(self, line: str) -> None:
        try:
            self._handle.write(line + "\n")
            self._handle.flush()
            if self.fsync:
                os.fsync(self._handle.fileno())
        except OSError as exc:
            raise WriteFailed(self.path, exc) from exc

    def close(self) -> None:
        """Close; a flush that fails now (disk full) was already reported by the write that failed first."""
        try:
            self._handle.close()
        except OSError as exc:
            log.warning("%s: closing: %s", self.path, exc)


class GraphWriter(_Appender):
    """The output file; ``kept`` lists the session ids already written, in file order (for ``--resume``).

    On resume every kept line must be a complete memory graph and no session may appear twice.
    """

    def __init__(self, path: str | Path, *, resume: bool = False, fsync: bool = False, timings: bool = True) -> None:
        super().__init__(path, resume=resume, fsync=fsync)
        self.timings = timings
        self.kept: list[str] = [record["session_id"] for record in self.records]
        self.done: set[str] = set()
        for number, sid in enumerate(self.kept, start=1):
            if sid in self.done:
                self.close()  # the caller never gets this writer, so nothing else would close its file
                raise InputError("session written twice; remove the repeated line or start again with --overwrite",
                                 file=str(self.path), line=number, session_id=sid)
            self.done.add(sid)

    def _check(self, record: Any) -> None:
        """A kept line must read back as a whole graph, or the resumed output would not load."""
        MemoryGraph.from_dict(record)

    def write(self, graph: MemoryGraph) -> None:
        self.append(graph.to_json(timings=self.timings))
        self.done.add(graph.session_id)


class RejectWriter(_Appender):
    """``OUT.rejects.jsonl``: each skipped input and why, written once even across resumed runs.

    A reject is known by kind, line and session, not by the file name: a resumed run may spell the input
    path differently, and the manifest already ensures it is the same input.
    """

    def __init__(self, path: str | Path, *, resume: bool = False) -> None:
        super().__init__(path, resume=resume, fsync=False)
        self._seen = {self._key(record) for record in self.records}

    @property
    def failed(self) -> set[str]:
        """Ids of the sessions whose program failed (the gaps a resume may find in the output)."""
        return {sid for kind, _, sid in self._seen if kind == "session"}

    @staticmethod
    def _key(record: dict[str, Any]) -> tuple[Any, ...]:
        return (record.get("kind"), record.get("line"), record.get("session_id"))

    def write(self, record: dict[str, Any]) -> None:
        if self._key(record) in self._seen:
            return
        self._seen.add(self._key(record))
        self.append(json.dumps(record, ensure_ascii=False))

    def input_error(self, error: InputError) -> None:
        self.write(input_reject(error))

    def session_error(self, session: Session, error: BaseException) -> None:
        self.write(session_reject(session, error))


def input_reject(error: InputError) -> dict[str, Any]:
    """The rejects-file record of a bad input line."""
    return {"kind": "input", **error.to_dict()}


def session_reject(session: Session, error: BaseException) -> dict[str, Any]:
    """The rejects-file record of a session whose program crashed."""
    return {"kind": "session", "file": None, "line": None, "session_id": session.session_id,
            "field": None, "error": f"{type(error).__name__}: {error}"}


def read_graphs(path: str | Path) -> Iterator[MemoryGraph]:
    """Each graph of an output file; a line that is not one is an :class:`InputError` naming file and line."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                graph = MemoryGraph.from_json(raw.decode("utf-8"))
            except NOT_A_GRAPH as exc:
                raise InputError(f"not a memory graph ({type(exc).__name__}: {exc})", file=str(path),
                                 line=number) from exc
            yield graph


def file_stem(session_id: str, taken: set[str]) -> str:
    """A file name for a session id: ASCII letters, digits and ``-_.`` kept, the rest ``_``.

    A name that had to change, runs over 100 characters or is already taken (``a/b`` and ``a_b``, or ``A``
    and ``a`` on a case-insensitive disk) is cut to 100 characters and gets a short hash of the id, so no
    export overwrites another and none is too long for a file system.
    """
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in session_id).lstrip(".")
    if safe != session_id or len(safe) > 100 or safe.lower() in taken:
        safe = f"{safe[:100]}-{hashlib.sha256(session_id.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
    taken.add(safe.lower())
    return safe


def export_graphs(path: str | Path, out_dir: str | Path, fmt: str) -> list[Path]:
    """One file per session: ``node-link`` JSON (networkx) or ``graphml``, named by :func:`file_stem`."""
    out = private_dirs(out_dir)
    written = []
    taken: set[str] = set()
    for graph in read_graphs(path):
        safe = file_stem(graph.session_id, taken)
        if fmt == "graphml":
            target = out / f"{safe}.graphml"
            with open_private(target, "wb") as handle:
                graph.write_graphml(handle)
        else:
            target = out / f"{safe}.json"
            # as in the graphs file, a lone surrogate of a model reply is kept as a JSON escape
            write_private(target, json.dumps(graph.node_link_data(), ensure_ascii=False, indent=1),
                          errors="backslashreplace")
        written.append(target)
    return written
