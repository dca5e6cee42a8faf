"""The service's engine in a process of its own, so requests never wait on the engine's Python.

In one process, every search had to win the interpreter lock back from the engine's threads each time it
let go of it (a SQLite call, a socket read), several times per request: under extraction load a search
that takes milliseconds idle waited hundreds. Here the worker (:mod:`.job_worker`: the engine, its writer
thread, the durable queue's consumer) runs in a child process started with ``spawn``; the HTTP process
keeps the store's readers, the queue's producers and the API. They share only the SQLite file (WAL:
readers never block the writer) and a pipe that carries the few things that need the engine: answering
questions, deletions (what a removed memory had replaced is judged again), the engine's counters for
``/metrics``, a wake-up when sessions are queued, and stop.

The child exits as soon as the pipe closes, so a killed server (``kill -9``) leaves no engine writing
behind it; sessions it had claimed go back in line at the next start, as before.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from promem_fast.config import EngineConfig
from promem_fast.errors import InputError, PromemError

log = logging.getLogger(__name__)

EnginePriority = int | Literal["idle"]
"""How the engine process yields the CPU to the server's requests: a nice increment (0-19), or ``"idle"``."""

ENGINE_PRIORITY: EnginePriority = 0
"""Default of ``promem serve --engine-priority``: the server's own priority. The trade-off, when the cores are
contended:

* ``0`` (default): the engine competes for the cores with the same weight as any other program, so accepted
  work always gets its share and jobs finish; a search may wait for a scheduler slice (milliseconds) while
  the engine extracts. On a shared host a lower priority starves the queue: at nice 10 among busy programs
  on 2 cores the engine got about 4% of the CPU and a 54-session job sat at 53 running for minutes
  (``tests/test_serve_priority.py`` loads the cores and bounds a job's time).
* ``N`` (a nice increment 1-19): the kernel runs a request's few milliseconds first and extraction takes the
  rest; among other busy programs the engine gets about 1/1.25^N of the share one of them gets, so this is
  for a machine given to the service, where nothing else competes.
* ``idle`` (Linux ``SCHED_IDLE``): the engine runs only on a core that nothing else wants, and a request
  preempts it at once. Among other busy programs extraction all but stops, and while the engine waits for a
  core it may hold the store's write lock, so writes from the server (queueing sessions) wait with it.
  It showed no steady gain in search latency over nice 10 on this machine's 2 shared cores
  (``benchmarks/bench_serve_search.py``, the ``after_idle`` side)."""

IDLE_FALLBACK_NICE = 19
"""Used where ``SCHED_IDLE`` is not available (not Linux) or not permitted: the weakest nice."""

CALL_TIMEOUT_S = 300.0
"""How long a request waits for the engine process to answer (questions take a few engine steps)."""


class EngineProcess:
    """Parent side: starts the child, forwards calls to it, and knows whether it is up."""

    def __init__(self, path: str | Path, config: EngineConfig, update_judge: str, *,
                 key_file: str | Path | None = None, job_retention_s: float | None = None,
                 priority: EnginePriority = ENGINE_PRIORITY, job_lease_s: float | None = None) -> None:
        self._args = (str(path), config, update_judge, key_file, job_retention_s, priority, job_lease_s)
        self._proc: Any = None
        self._conn: Any = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._ready = threading.Event()
        self._gone = threading.Event()
        self._fatal: str | None = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(*self._args, child), name="promem-engine", daemon=True)
        self._proc.start()
        child.close()
        threading.Thread(target=self._receive, name="promem-engine-replies", daemon=True).start()

    def wait_ready(self) -> None:
        """Block until the engine's backends are loaded; PromemError with the child's reason (the pip command
        for a missing library or model) when it could not start."""
        while not self._ready.wait(0.2):
            if self._gone.is_set() or (self._proc is not None and not self._proc.is_alive()):
                break
        if self._fatal is not None or not self._ready.is_set():
            raise PromemError(self._fatal or "the engine process stopped before it was ready")

    @property
    def alive(self) -> bool:
        return self._ready.is_set() and not self._gone.is_set() and self._proc is not None and self._proc.is_alive()

    @property
    def exited(self) -> bool:
        """Whether the child was started and is gone (crashed, killed, or failed before it was ready)."""
        return self._proc is not None and not self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    def wake(self) -> None:
        """Sessions were queued: the worker claims them now instead of at its next poll."""
        self._send((0, "wake", ()))

    def call(self, method: str, *args: Any) -> Any:
        """Run ``method`` in the child (``answer``, ``delete``, ``update``, ``metrics``) and return its result; the
        child's :class:`InputError` (a request's own fault) is raised here as one."""
        if self._gone.is_set():
            raise PromemError("the engine process is not running")
        ident = next(self._ids)
        event, box = threading.Event(), []
        self._waiting[ident] = (event, box)
        try:
            self._send((ident, method, args))
            if not event.wait(CALL_TIMEOUT_S):
                raise PromemError(f"no answer from the engine process within {CALL_TIMEOUT_S:g} s")
        finally:
            self._waiting.pop(ident, None)
        status, value = box[0]
        if status == "invalid":
            raise InputError(value["error"], session_id=value["session_id"], field=value["field"])
        if status != "ok":
            raise PromemError(value)
        return value

    def stop(self, timeout: float = 15.0) -> None:
        if self._proc is None:
            return
        try:
            self._send((0, "stop", ()))
        except PromemError:
            pass
        self._proc.join(timeout)
        if self._proc.is_alive():
            log.warning("the engine process did not stop in %.0f s; terminating it", timeout)
            self._proc.terminate()
            self._proc.join(5)
        self._conn.close()

    def _send(self, message: tuple[int, str, tuple[Any, ...]]) -> None:
        if self._conn is None:
            raise PromemError("the engine process is not started")
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError) as exc:
            raise PromemError(f"the engine process is not running: {exc}") from exc

    def _receive(self) -> None:
        while True:
            try:
                ident, status, value = self._conn.recv()
            except (EOFError, OSError):
                break
            if status in ("ready", "fatal"):
                self._fatal = value
                self._ready.set()
                continue
            waiting = self._waiting.get(ident)
            if waiting is not None:
                waiting[1].append((status, value))
                waiting[0].set()
        self._gone.set()
        for event, box in list(self._waiting.values()):
            box.append(("error", "the engine process stopped"))
            event.set()


def parse_priority(text: str) -> EnginePriority:
    """``idle`` or a nice increment 0-19, as ``--engine-priority`` takes it; ValueError naming the choices."""
    if text.strip().lower() == "idle":
        return "idle"
    try:
        nice = int(text)
    except ValueError:
        nice = -1
    if not 0 <= nice <= 19:
        raise ValueError(f"engine priority must be 'idle' or a nice increment 0-19, not {text!r}")
    return nice


def lower_priority(priority: EnginePriority) -> None:
    """Lower the scheduling priority of every thread of this process; threads started later inherit it.

    Every thread, not only the calling one: on Linux nice and policy belong to a thread, and a library may
    already have started some when this runs (OpenBLAS starts its pool when numpy is imported, while the
    child unpickles its arguments), which would otherwise do the engine's matrix work at the server's
    priority."""
    tasks = Path("/proc/self/task")
    threads = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    if priority == "idle":
        try:
            for tid in threads:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            return
        except (AttributeError, OSError):  # not Linux, or refused: the weakest nice instead
            log.info("SCHED_IDLE not available for the engine process; running it at nice %d", IDLE_FALLBACK_NICE)
            priority = IDLE_FALLBACK_NICE
    if not priority:
        return
    try:
        target = min(19, os.getpriority(os.PRIO_PROCESS, 0) + int(priority))
        for tid in threads:
            os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError:  # not permitted here: run at the server's priority
        log.info("could not lower the engine process's priority")


def _child_main(path: str, config: EngineConfig, update_judge: Any, key_file: str | Path | None,
                retention_s: float | None, priority: EnginePriority, lease_s: float | None, conn: Any) -> None:
    """The engine process: the worker as it ran in one process, plus the pipe's requests."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lower_priority(priority)  # first: the threads the engine starts inherit it
    from promem_fast.engine import Engine
    from promem_fast.serve import db
    from promem_fast.serve.jobs import DEFAULT_RETENTION_S, LEASE_S, JobQueue, still_wanted
    from promem_fast.serve.metrics import Metrics
    from promem_fast.serve.job_worker import EngineGate, Worker
    from promem_fast.services import Services
    from promem_fast.store import MemoryStore
    from promem_fast.store.editing import edit

    embedder = Services(config).embedder  # shared by the engine's lane and both stores (it serves threads)
    engine = Engine(config, embedder=embedder)
    try:
        engine.services.preload()  # a missing library or model: the server refuses to start, naming the fix
    except PromemError as exc:
        conn.send((0, "fatal", str(exc)))
        return
    writer = MemoryStore(path, config, embedder=embedder, update_judge=update_judge, key_file=key_file)
    writer.write_guard = still_wanted  # a session whose user was deleted while it ran is not stored
    reader = MemoryStore(path, config, embedder=embedder, update_judge=update_judge, key_file=key_file)
    jobs_conn = db.connect(path, key_file=key_file)
    jobs = JobQueue(jobs_conn, retention_s=retention_s or DEFAULT_RETENTION_S,
                    lease_s=lease_s or LEASE_S)
    metrics = Metrics(jobs.depth, lambda: (engine.summary.rounds, dict(engine.summary.backend_calls)))
    holder: list[EngineGate] = []
    worker = Worker(engine, jobs, metrics,
                    lambda tenant, graphs: writer.add(graphs, tenant=tenant, engine=holder[0]))  # type: ignore[arg-type]
    gate = EngineGate(worker)
    holder.append(gate)
    send_lock = threading.Lock()

    def reply(ident: int, status: str, value: Any) -> None:
        with send_lock:
            conn.send((ident, status, value))

    def handle(ident: int, method: str, args: tuple[Any, ...]) -> None:
        try:
            if method == "answer":
                tenant, user, questions, when, filters = args
                value: Any = list(reader.answer(user, questions, engine=gate, tenant=tenant,  # type: ignore[arg-type]
                                                filters=filters, **when))
            elif method == "delete":
                tenant, user, session, node, filters = args
                value = int(reader.delete(tenant=tenant, user=user, session=session, node=node, filters=filters,
                                          engine=gate))  # type: ignore[arg-type]
            elif method == "update":
                tenant, node, text, changes = args
                hit = edit(reader, node, tenant, text=text, metadata=changes)
                value = None if hit is None else hit.memory()
            elif method == "metrics":
                value = metrics.state()
            else:
                raise PromemError(f"unknown engine call {method!r}")
        except InputError as exc:  # the request's own fault: the caller's 422, not the engine's 503
            reply(ident, "invalid", exc.to_dict())
            return
        except Exception as exc:
            reply(ident, "error", f"{type(exc).__name__}: {exc}" if not isinstance(exc, PromemError) else str(exc))
            return
        reply(ident, "ok", value)

    worker.start()
    reply(0, "ready", None)
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="promem-engine-call")
    while True:
        try:
            ident, method, args = conn.recv()
        except (EOFError, OSError):  # the server is gone (killed): stop now, as one process would have
            os._exit(0)
        if method == "wake":
            jobs.wakeup.set()
        elif method == "stop":
            worker.stop()
            jobs.close()
            pool.shutdown(wait=False, cancel_futures=True)
            for closing in (reader, writer, engine, jobs_conn):
                closing.close()
            return
        else:
            pool.submit(handle, ident, method, args)
