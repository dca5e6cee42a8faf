"""The service beyond one host: 1 API replica + 1 engine worker against 2 + 2 over one PostgreSQL, side by side
in one run, then 2 + 2 with a replica and a worker killed with SIGKILL mid-run.

Run: ``python -m benchmarks.runs.bench_replicas [--rounds 2] [--search-s 15] [--clients 8]`` (writes
``results/bench_replicas.json``). PostgreSQL is the server ``PROMEM_TEST_PG_URL`` names, else one started from the
pgserver wheel; every replica (``promem serve``, real uvicorn on 127.0.0.1) and worker (``promem worker``) is a
process of its own on the ``scripted`` profile's stand-in backends, so the figures are the service's own
work (HTTP, queue, leases, store), not a model's.

Each setup gets a fresh database and the same 288 sessions (the hand-written HaluMem-schema user of the tests,
12 sessions, as 6 users of each of 4 tenants), posted four sessions a request, each user's requests to one
replica in turn. ``sessions/hour``: 288 over the seconds from the first post until the queue is empty.
Then ``--clients`` clients search at once for ``--search-s`` seconds, each search to the next replica (a
client-side balancer): searches/s and their latency (request sent to JSON read). The setups alternate, round
by round (1 + 1 first in even rounds), and each figure is the median over rounds.

The kill round: 2 + 2; the first tenant's sessions are stored, then the clients search that tenant's users
while the other tenants' sessions are posted, and replica a (with its engine process) and one worker (with
its) are killed with SIGKILL once each holds claimed sessions (after a bounded wait, killed all the same: the
replicas' engines, woken by the posts they accept, often claim everything first; the result says which held
sessions). A search whose connection fails goes to the next replica (as a load balancer's retry does); it
counts as failed only when no replica answers it or the answer is not 200. Checked after: every session
answered 202 stored exactly once, the update links of each tenant the same as one ``promem serve`` on an
SQLite file given the same posts, and no tenant's key reaching another tenant's users (their names listed
or searched: 404, as for a user nobody has).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common.paths import ROOT
from benchmarks.tools import figures
from promem_fast.eval.datasets import load_halumem
from promem_fast.testing.pg_server import Server as Postgres
from promem_fast.testing.service_processes import (Post, Server, Worker, children, holders, kill_host, links, new_key,
                                                   single_node_exports, wait_job)

log = logging.getLogger(__name__)

TOMAS = ROOT / "tests" / "fixtures" / "halumem_tomas.jsonl"
TENANTS = [f"tenant{t}" for t in range(4)]
USERS_PER_TENANT = 6
LEASE = "2"
QUERIES = ("Where does he work?", "What is his salary?", "Who is his manager?", "Where does he live?")


def workload() -> list[Post]:
    """Four sessions a post, three posts per user: 4 tenants x 6 users x 12 sessions."""
    base = [s.to_dict() for s in load_halumem(TOMAS).iter_sessions()]
    posts = []
    for tenant in TENANTS:
        for u in range(USERS_PER_TENANT):
            user = f"{tenant} user {u}"
            sessions = [dict(s, user=user) for s in base]
            posts += [(tenant, user, sessions[part:part + 4]) for part in range(0, len(sessions), 4)]
    return posts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


@dataclass
class Cluster:
    """Replicas and workers over one database, with a key per tenant."""

    url: str
    replicas: list[Server]
    workers: list[Worker]
    keys: dict[str, str]

    @classmethod
    def start(cls, url: str, n: int, folder: Path) -> Cluster:
        keys = {tenant: new_key(url, tenant) for tenant in TENANTS}
        options = ("--job-lease", LEASE, "--rate", "0")
        replicas = [Server(url, *options, log=folder / f"replica{i}.log") for i in range(n)]
        workers = [Worker(url, "--job-lease", LEASE, log=folder / f"worker{i}.log") for i in range(n)]
        return cls(url, replicas, workers, keys)

    def stop(self) -> None:
        for process in (*self.workers, *self.replicas):
            process.stop()

    def post(self, posts: list[Post]) -> list[tuple[str, str]]:
        """Every post, each user's to one replica in turn; (tenant, job id) of each, all answered 202."""
        jobs = []
        for i, (tenant, user, sessions) in enumerate(posts):
            replica = self.replicas[i // 3 % len(self.replicas)]
            with replica.client(self.keys[tenant]) as http:
                reply = http.post(f"/v1/users/{user}/sessions", json={"sessions": sessions})
            if reply.status_code != 202:
                raise RuntimeError(f"post answered {reply.status_code}: {reply.text}")
            jobs.append((tenant, reply.json()["job_id"]))
        return jobs

    def live(self) -> list[Server]:
        return [r for r in self.replicas if r.proc.poll() is None]


@dataclass
class Searches:
    """Clients searching at once, each search to the next replica, until stopped."""

    cluster: Cluster
    users: list[tuple[str, str]]
    latencies_ms: list[float] = field(default_factory=list)
    failed: int = 0
    retried: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, clients: int, until: Callable[[], bool]) -> float:
        """Search with ``clients`` threads until ``until()``; the seconds it took."""
        turn = itertools.count()
        started = time.perf_counter()
        threads = [threading.Thread(target=self._client, args=(c, turn, until)) for c in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started

    def _client(self, c: int, turn: itertools.count[int], until: Callable[[], bool]) -> None:
        pools: dict[str, httpx.Client] = {}
        try:
            i = c
            while not until():
                tenant, user = self.users[i % len(self.users)]
                body = {"query": QUERIES[i % len(QUERIES)], "k": 10}
                i += 1
                t0 = time.perf_counter()
                ok = self._search(pools, next(turn), tenant, user, body)
                with self._lock:
                    if ok:
                        self.latencies_ms.append((time.perf_counter() - t0) * 1e3)
                    else:
                        self.failed += 1
        finally:
            for pool in pools.values():
                pool.close()

    def _search(self, pools: dict[str, httpx.Client], turn: int, tenant: str, user: str, body: dict[str, Any]
                ) -> bool:
        replicas = self.cluster.replicas
        for attempt in range(len(replicas)):
            replica = replicas[(turn + attempt) % len(replicas)]
            pool = pools.setdefault(replica.url, httpx.Client(base_url=replica.url, timeout=60.0))
            try:
                reply = pool.post(f"/v1/users/{user}/search", json=body,
                                  headers={"Authorization": f"Bearer {self.cluster.keys[tenant]}"})
            except httpx.TransportError:  # that replica is down: the next one, as a balancer retries
                with self._lock:
                    self.retried += 1
                continue
            if reply.status_code != 200:
                log.warning("search answered %d: %s", reply.status_code, reply.text[:200])
            return reply.status_code == 200
        log.warning("search reached no replica")
        return False


def drain(url: str, timeout: float = 600.0) -> None:
    """Wait until the shared queue at ``url`` holds no session accepted and not finished."""
    from promem_fast.serve import db
    from promem_fast.serve.jobs import JobQueue

    deadline = time.monotonic() + timeout
    with closing(db.connect(url)) as conn:
        queue = JobQueue(conn)
        while queue.depth():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{queue.depth()} sessions still queued after {timeout} s")
            time.sleep(0.05)


def users_of(posts: list[Post]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((tenant, user) for tenant, user, _ in posts))


def measure(url: str, n: int, posts: list[Post], args: argparse.Namespace, folder: Path) -> dict[str, float]:
    """One setup of ``n`` replicas and ``n`` workers: sessions/hour, then searches/s and p50/p99 ms."""
    cluster = Cluster.start(url, n, folder)
    try:
        started = time.perf_counter()
        cluster.post(posts)
        drain(url)
        ingest_s = time.perf_counter() - started
        searches = Searches(cluster, users_of(posts))
        deadline = time.monotonic() + args.search_s
        seconds = searches.run(args.clients, lambda: time.monotonic() >= deadline)
    finally:
        cluster.stop()
    if searches.failed:
        raise RuntimeError(f"{searches.failed} searches failed with every replica up")
    sessions = sum(len(s) for _, _, s in posts)
    return {"sessions_per_hour": round(sessions / ingest_s * 3600), "ingest_s": round(ingest_s, 2),
            "searches_per_s": round(len(searches.latencies_ms) / seconds, 1),
            "search_p50_ms": round(percentile(searches.latencies_ms, 0.5), 1),
            "search_p99_ms": round(percentile(searches.latencies_ms, 0.99), 1),
            "loadavg_1m": round(os.getloadavg()[0], 1)}


def kill_round(url: str, posts: list[Post], args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """2 + 2 with replica a and worker a killed once each holds sessions, under search load; what was kept."""
    cluster = Cluster.start(url, 2, folder)
    victims = {"replica": cluster.replicas[0].proc, "worker": cluster.workers[0].proc}
    engines = {name: set(children(proc.pid)) for name, proc in victims.items()}
    holding: dict[str, bool] = {}
    """Each victim, in the order killed: whether its engine held claimed sessions then."""
    resident = [post for post in posts if post[0] == TENANTS[0]]
    searches = Searches(cluster, users_of(resident))
    done = threading.Event()
    load = threading.Thread(target=searches.run, args=(args.clients, done.is_set))
    try:
        jobs = cluster.post(resident)  # the first tenant's memory, for the searches to find (a user without any is 404)
        drain(url)
        load.start()
        jobs += cluster.post([post for post in posts if post[0] != TENANTS[0]])
        deadline = time.monotonic() + 60  # bounded: what holds nothing by then is killed all the same
        while len(holding) < len(victims) and time.monotonic() < deadline:
            held = holders(url)
            for name, pids in engines.items():
                if name not in holding and held & pids:
                    kill_host(victims[name])
                    holding[name] = True
            time.sleep(0.01)
        for name in victims.keys() - holding.keys():  # the replicas' engines, woken by the posts, claimed first
            kill_host(victims[name])
            holding[name] = False
        survivor = cluster.live()[0]
        states = []
        for tenant, job in jobs:
            with survivor.client(cluster.keys[tenant]) as http:
                states.append(wait_job(http, job, timeout=300))
        done.set()
        load.join()
        shared, apart = tenants_apart(survivor, cluster.keys, users_of(posts))
    finally:
        done.set()
        if load.is_alive():
            load.join()
        cluster.stop()
    alone = single_node_exports(folder, posts)
    return {"killed_holding_sessions": holding, "sessions_accepted": sum(s["total"] for s in states),
            "sessions_stored_once": stored_once(url, posts), "job_errors": sum(len(s["errors"]) for s in states),
            "links": sum(len(links(text)) for text in alone.values()),
            "links_same_as_sqlite": all(links(shared[t]) == links(alone[t]) for t in alone),
            "tenants_apart": apart, "searches": len(searches.latencies_ms) + searches.failed,
            "searches_failed": searches.failed, "searches_retried_on_another_replica": searches.retried}


def tenants_apart(replica: Server, keys: dict[str, str], users: list[tuple[str, str]]) -> tuple[dict[str, str], bool]:
    """Each tenant's export, and whether every key lists its own tenant's users only and finds none of another
    tenant's users."""
    exports, apart = {}, True
    for tenant, key in keys.items():
        with replica.client(key) as http:
            exports[tenant] = http.get("/v1/export").text
            apart &= set(http.get("/v1/users").json()["users"]) == {user for t, user in users if t == tenant}
            for other, user in users:
                if other != tenant:
                    reply = http.post(f"/v1/users/{user}/search", json={"query": QUERIES[0], "k": 10})
                    apart &= reply.status_code == 404  # as for a user nobody has: not found
    return exports, apart


def stored_once(url: str, posts: list[Post]) -> int:
    """How many of the posted sessions the database holds exactly once under their tenant and user."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT t.name, u.name, s.session_id, count(*) FROM sessions s JOIN users u ON "
                            "u.id = s.user_id JOIN tenants t ON t.id = u.tenant_id GROUP BY 1, 2, 3").fetchall()
    copies = {(tenant, user, sid): n for tenant, user, sid, n in rows}
    return sum(copies.get((tenant, user, s["session_id"])) == 1 for tenant, user, batch in posts for s in batch)


def write(runs: dict[str, list[dict[str, float]]], kill: dict[str, Any], rounds: int, command: str) -> None:
    med = {setup: {key: statistics.median(run[key] for run in got) for key in got[0]} for setup, got in runs.items()}
    one, two = med["1+1"], med["2+2"]
    ratio = {key: round(two[key] / one[key], 2)
             for key in ("sessions_per_hour", "searches_per_s", "search_p50_ms", "search_p99_ms")}
    found: dict[str, Any] = {f"{setup}.{key}": value for setup, values in (("one", one), ("two", two))
                             for key, value in values.items()}
    found.update({f"ratio.{key}": value for key, value in ratio.items()})
    found.update({f"kill.{key}": value for key, value in kill.items() if not isinstance(value, dict)})
    found.update({f"kill.{name}_held_sessions": held for name, held in kill["killed_holding_sessions"].items()})
    rows = [[label, f"{m['sessions_per_hour']:,.0f}", f"{m['searches_per_s']:.1f}", f"{m['search_p50_ms']:.1f}",
             f"{m['search_p99_ms']:.1f}", f"{m['loadavg_1m']:.1f}"]
            for label, m in (("1 replica + 1 worker", one), ("2 replicas + 2 workers", two))]
    rows.append(["2 + 2 over 1 + 1", *(f"{ratio[key]:.2f}×" for key in
                                       ("sessions_per_hour", "searches_per_s", "search_p50_ms", "search_p99_ms")), ""])
    kill_row = [f"{kill['sessions_accepted']}", f"{kill['sessions_stored_once']}",
                f"{'same' if kill['links_same_as_sqlite'] else 'DIFFER'} ({kill['links']} links)",
                "yes" if kill["tenants_apart"] else "NO",
                f"{kill['searches']:,} ({kill['searches_retried_on_another_replica']} retried)",
                f"{kill['searches_failed']}"]
    figures.write_result("bench_replicas", found, command, tables={
        "main": {"columns": ["setup", "sessions/hour", "searches/s", "search p50 ms", "search p99 ms",
                             f"load average ({os.cpu_count()} cores)"], "rows": rows},
        "kill": {"columns": ["sessions answered 202", "stored exactly once", "update links against one SQLite server",
                             "tenants apart", "searches during the round", "failed"], "rows": [kill_row]}},
        note=f"PostgreSQL 16 with pgvector (pgserver wheel) on the same host; scripted stand-in backends; medians "
             f"over {rounds} rounds, setups alternating; {os.cpu_count()} CPU cores shared with other work, so every "
             "process of both setups competes for the same cores and the ratios move from run to run.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--search-s", type=float, default=15.0, help="seconds of searching per setup")
    parser.add_argument("--clients", type=int, default=8, help="clients searching at once")
    args = parser.parse_args()
    posts = workload()
    server = Postgres()
    folder = Path(tempfile.mkdtemp(prefix="bench_replicas-"))
    """The processes' logs: removed after a run that ends well, kept for a look after one that does not."""
    runs: dict[str, list[dict[str, float]]] = {"1+1": [], "2+2": []}
    try:
        for r in range(args.rounds):
            for n in ((1, 2) if r % 2 == 0 else (2, 1)):
                url = server.fresh_database()
                runs[f"{n}+{n}"].append(measure(url, n, posts, args, folder))
                server.drop(url)
                print(n, runs[f"{n}+{n}"][-1], flush=True)
        url = server.fresh_database()
        kill = kill_round(url, posts, args, folder)
        server.drop(url)
        print("kill", kill, flush=True)
    except BaseException:
        log.error("the replicas' and workers' logs are kept in %s", folder)
        raise
    else:
        shutil.rmtree(folder)
    finally:
        server.close()
    write(runs, kill, args.rounds, "python -m benchmarks.runs.bench_replicas " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
