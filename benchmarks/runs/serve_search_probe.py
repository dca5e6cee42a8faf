"""One measurement of search latency on a running ``promem serve``, idle and under extraction load.

Run by :mod:`bench_serve_search` in a subprocess (``PYTHONPATH`` chooses which source tree is measured);
prints one JSON line. A real ``promem serve --profile scripted`` process on 127.0.0.1 (its own SQLite file,
no rate limit) first stores a probe user's sessions; then 16 other users submit ``--load`` sessions in all,
and while the server extracts them a client searches the probe user's memories over HTTP on a fixed
schedule, one search every ``--every-ms`` (50: 20 searches a second), as it did for ``--idle-s`` before the
load. Latency is the client's: request sent to JSON read. The server process's own CPU time per idle search
(all its threads, from ``/proc``; the engine process apart) is the figure a loaded machine disturbs least.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from promem_fast.eval.datasets import load_halumem
from promem_fast.serve import db
from promem_fast.serve.keys import KeyRing

HALUMEM = Path(os.environ.get("PROMEM_HALUMEM_SAMPLE")
               or Path(__file__).resolve().parents[3] / "shared" / "data" / "halumem-dev" / "pilot_slice_user0.jsonl")
"""The real HaluMem user. This probe imports only ``promem_fast`` (the tree measured, which may be an older
commit exported to a temporary folder), so it names the sample itself rather than through ``benchmarks.common``."""

QUERIES = ("Where does she work?", "What pet does she have?", "Who is her friend?", "What did she buy?")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_key(path: Path, tenant: str) -> str:
    """A new API key of ``tenant`` in the store at ``path``, before the server opens it."""
    with contextlib.closing(db.connect(path)) as conn:
        return KeyRing(conn).create(tenant, "bench")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def searches(http: httpx.Client, seconds: float | None, every_s: float, until: Any = None) -> list[float]:
    """Latencies (ms) of searches every ``every_s`` for ``seconds``, or while ``until()`` is true."""
    out: list[float] = []
    started = time.monotonic()
    i = 0
    while until() if until is not None else time.monotonic() - started < (seconds or 0.0):
        t0 = time.perf_counter()
        reply = http.post("/v1/users/probe/search", json={"query": QUERIES[i % len(QUERIES)], "k": 10})
        reply.raise_for_status()
        reply.json()
        out.append((time.perf_counter() - t0) * 1e3)
        i += 1
        # a fixed schedule, not a pause after each answer: both trees get the same search load
        time.sleep(max(0.0, started + i * every_s - time.monotonic()))
    return out


def clients(make: Any, n: int, seconds: float | None, every_s: float, until: Any = None) -> list[float]:
    """:func:`searches` by ``n`` clients at once, each on its own connection (``make()``) and schedule."""
    if n == 1:
        return searches(make(), seconds, every_s, until)
    import threading

    out: list[list[float]] = [[] for _ in range(n)]

    def one(i: int) -> None:
        time.sleep(i * every_s / n)  # spread over the period, as independent clients would be
        with make() as http:
            out[i] = searches(http, seconds, every_s, until)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [ms for got in out for ms in got]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process ``pid`` has used, all its threads, not its children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def depth(http: httpx.Client, jobs: list[str]) -> bool:
    """Whether any of ``jobs`` is still being extracted."""
    return any(http.get(f"/v1/jobs/{job}").json()["state"] != "finished" for job in jobs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load", type=int, default=160)
    parser.add_argument("--every-ms", type=float, default=50.0)
    parser.add_argument("--idle-s", type=float, default=5.0, help="seconds of searches before the load")
    parser.add_argument("--serve-args", default="", help="more options of promem serve, as one string")
    parser.add_argument("--clients", type=int, default=1, help="clients searching at once, each every --every-ms")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    base = [s.to_dict() for s in load_halumem(HALUMEM).iter_sessions()]
    users = 16
    per_user = max(1, args.load // users)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "memory.db"
        key = api_key(path, "bench")
        port = free_port()
        log = open(Path(folder) / "serve.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "promem_fast.cli", "serve", "--db", str(path), "--port",
                                 str(port), "--profile", "scripted", "--rate", "0", *shlex.split(args.serve_args)],
                                stdout=log, stderr=log,
                                env=dict(os.environ))
        try:
            def make() -> httpx.Client:
                return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"},
                                    timeout=120)

            http = make()
            deadline = time.monotonic() + 60
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)
            probe = http.post("/v1/users/probe/sessions", json={"sessions": [
                dict(s, session_id=f"p{j}", user="probe") for j, s in enumerate(base[:4])]}).json()["job_id"]
            while depth(http, [probe]):
                time.sleep(0.05)
            cpu_before = cpu_seconds(proc.pid)
            idle = clients(make, args.clients, args.idle_s, args.every_ms / 1e3)
            idle_cpu_ms = (cpu_seconds(proc.pid) - cpu_before) * 1e3 / len(idle)
            started = time.monotonic()
            jobs = [http.post(f"/v1/users/user{u}/sessions", json={"sessions": [
                dict(base[(u + j) % len(base)], session_id=f"u{u}-{j}", user=f"user{u}") for j in range(per_user)]}
            ).json()["job_id"] for u in range(users)]
            last_check = [0.0, True]

            def busy() -> bool:
                if time.monotonic() - last_check[0] > 0.25:
                    last_check[:] = [time.monotonic(), depth(http, jobs)]
                return bool(last_check[1])

            lock = __import__("threading").Lock()

            def busy_shared() -> bool:
                with lock:  # one status client, asked by every searching client
                    return busy()

            loaded = clients(make, args.clients, None, args.every_ms / 1e3, until=busy_shared)
            drain_s = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    print(json.dumps({
        "idle_p50_ms": statistics.median(idle), "idle_p99_ms": percentile(idle, 0.99),
        "idle_server_cpu_ms_per_search": idle_cpu_ms,
        "load_p50_ms": statistics.median(loaded), "load_p99_ms": percentile(loaded, 0.99),
        "load_max_ms": max(loaded), "load_searches": len(loaded), "sessions": users * per_user,
        "drain_s": drain_s, "sessions_per_s": users * per_user / drain_s,
        "clients": args.clients, "loadavg_1m_start": load_start, "loadavg_1m_end": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
