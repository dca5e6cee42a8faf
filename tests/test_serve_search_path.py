"""The search path of ``promem serve`` and how its engine process gives way: a reader that caches each user's
vectors still sees, at its very next search, what another connection (the engine process) wrote or deleted;
two tenants' users of one name never share a cache; the engine process and every thread it starts run at the
scheduling priority asked for, the server's own process at its own; the server's query embedder keeps to the
thread count it is given; each response is counted by its status. Latency itself is measured in
``benchmarks/bench_serve_search.py``, not here."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import ROOT, scripted_config
from promem_fast.serve.engine_process import parse_priority
from promem_fast.store import MemoryStore
from promem_fast.testing.service_processes import Server, children, new_key, wait_job
from store_helpers import TopicEmbedder, graph

SCHED_OTHER, SCHED_IDLE = 0, 5
"""Linux's numbers for the two policies, as ``/proc/PID/stat`` (field 41) shows them."""

PAINTS = "Maya paints watercolor landscapes."
CELLO = "Maya plays the cello in an orchestra."


def open_store(path: Path) -> MemoryStore:
    return MemoryStore(path, scripted_config(), embedder=TopicEmbedder(), update_judge="off")


def texts(store: MemoryStore, query: str, tenant: str = "default", k: int = 5) -> list[str]:
    return [hit.text for hit in store.search("Maya", query, k, tenant=tenant)]


def test_a_cached_reader_sees_the_other_connections_writes_and_deletes_at_its_next_search(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db") as engine, open_store(tmp_path / "m.db") as server:
        engine.add([graph("s1", "Maya", [PAINTS])])
        assert texts(server, "watercolor") == [PAINTS]  # the server's reader now holds Maya's vectors
        engine.add([graph("s2", "Maya", [CELLO])])
        assert texts(server, "cello orchestra", k=1) == [CELLO]
        cello = next(h.node_id for h in engine.hits("Maya") if h.text == CELLO)
        engine.delete(user="Maya", node=cello)
        assert texts(server, "cello orchestra") == [PAINTS]
        engine.add([graph("s3", "Maya", ["Maya owns a cat named Miso."])])
        engine.delete(user="Maya", session="s1")
        assert texts(server, "watercolor") == ["Maya owns a cat named Miso."]
        engine.delete(user="Maya")
        assert texts(server, "watercolor cat") == []


def test_two_tenants_users_of_one_name_never_share_a_cached_index(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db") as engine, open_store(tmp_path / "m.db") as server:
        engine.add([graph("a1", "Maya", [PAINTS])], tenant="acme")
        engine.add([graph("g1", "Maya", [CELLO])], tenant="globex")
        for _ in range(2):  # the second round is answered from the cached indexes
            assert texts(server, "watercolor cello orchestra", tenant="acme") == [PAINTS]
            assert texts(server, "watercolor cello orchestra", tenant="globex") == [CELLO]
        engine.add([graph("a2", "Maya", ["Maya owns a cat named Miso."])], tenant="acme")
        assert texts(server, "cat cello", tenant="globex") == [CELLO]
        assert texts(server, "cat cello", tenant="acme", k=1) == ["Maya owns a cat named Miso."]


def test_the_k_best_are_taken_among_the_memories_the_question_sees(tmp_path: Path) -> None:
    """The nearest memories of a fetch are replaced ones; the search still gives k current ones."""
    old = [f"Maya works as a cook at diner {i}." for i in range(30)]
    with open_store(tmp_path / "m.db") as store:
        store.add([graph("s1", "Maya", old, timestamp="2024-01-01T09:00:00")])
        store.add([graph("s2", "Maya", ["Maya paints watercolor at dawn.", "Maya paints watercolor at dusk."],
                         timestamp="2024-02-01T09:00:00")])
        ids = {h.text: h.node_id for h in store.hits("Maya")}
        with store.db.transaction() as db:  # the 30 job facts replaced, as an update judge would mark them
            for text in old:
                db.execute("UPDATE nodes SET superseded_by = ?, valid_until = '2024-02-01T09:00:00' WHERE id = ?",
                           (ids["Maya paints watercolor at dawn."], ids[text]))
        assert sorted(texts(store, "works job cook diner", k=2)) == ["Maya paints watercolor at dawn.",
                                                                     "Maya paints watercolor at dusk."]
        then = [
            h.text for h in store.search("Maya", "works job cook diner", 3, as_of="2024-01-15")]
        assert len(then) == 3 and all(t.startswith("Maya works as a cook") for t in then)


def test_engine_priority_takes_idle_or_a_nice_increment() -> None:
    assert [parse_priority(t) for t in ("idle", "IDLE", "0", "19")] == ["idle", "idle", 0, 19]
    for bad in ("20", "-1", "fast", ""):
        with pytest.raises(ValueError, match="'idle' or a nice increment 0-19"):
            parse_priority(bad)


def scheduling(pid: int) -> set[tuple[int, int]]:
    """(policy, nice) of every thread of ``pid``, from /proc."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        found.add((int(fields[38]), int(fields[16])))  # fields 41 and 19 of stat(5), counted from field 3
    return found


def engine_pid(server: Server) -> int:
    """The server's engine process (its other children, such as multiprocessing's resource tracker, aside)."""
    for pid in children(server.proc.pid):
        if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "):
            return pid
    raise AssertionError("no engine process")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads scheduling from Linux's /proc")
@pytest.mark.parametrize(("option", "engine"), [((), (SCHED_OTHER, 0)), (("--engine-priority", "7"), (SCHED_OTHER, 7)),
                                                (("--engine-priority", "idle"), (SCHED_IDLE, 0))])
def test_the_engine_process_and_all_its_threads_run_at_the_priority_asked(tmp_path: Path, option: tuple[str, ...],
                                                                           engine: tuple[int, int]) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    new_key(tmp_path / "m.db", "acme")
    server = Server(tmp_path / "m.db", *option)
    try:
        pid = engine_pid(server)
        assert len(list(Path(f"/proc/{pid}/task").iterdir())) > 1  # its worker threads are there too
        assert scheduling(pid) == {(engine[0], min(19, base + engine[1]))}
        assert scheduling(server.proc.pid) == {(SCHED_OTHER, base)}  # the requests' side is not lowered
    finally:
        server.stop()


@pytest.mark.parametrize(("asked", "given"), [(0, 1), (3, 3)])
def test_the_servers_query_embedder_gets_one_thread_unless_the_config_says(tmp_path: Path, asked: int,
                                                                           given: int) -> None:
    from promem_fast.serve.service import Service

    config = scripted_config()
    config.embedder = dataclasses.replace(config.embedder, n_threads=asked)
    service = Service(tmp_path / "m.db", config)  # not started: no engine process
    try:
        assert service.store.embedder.config.n_threads == given  # type: ignore[attr-defined]
        assert config.embedder.n_threads == asked  # the engine process's copy is the configuration as given
    finally:
        service.close()


@pytest.mark.slow
def test_an_onnx_embedder_keeps_to_its_thread_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from promem_fast.backends import create
    from promem_fast.config import EmbedderConfig

    monkeypatch.setenv("PROMEM_MODELS_DIR", str(tmp_path))  # its ONNX export goes here, not to the checkout
    one: Any = create("embedder", "onnx", EmbedderConfig(backend="onnx", device="cpu", n_threads=1))
    assert one.session.get_session_options().intra_op_num_threads == 1
    default: Any = create("embedder", "onnx", EmbedderConfig(backend="onnx", device="cpu"))
    assert default.session.get_session_options().intra_op_num_threads == 0


@pytest.mark.slow
def test_a_sentence_transformers_embedder_keeps_to_its_thread_count() -> None:
    """In a process of its own: torch's thread count is per process."""
    pytest.importorskip("sentence_transformers")
    code = ("from promem_fast.backends import create; from promem_fast.config import EmbedderConfig; import torch; "
            "create('embedder', 'sentence-transformers', EmbedderConfig(device='cpu', n_threads=1)); "
            "print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1"


def test_a_search_over_http_never_returns_a_memory_deleted_just_before(tmp_path: Path) -> None:
    """The server's reader caches the user's vectors, the engine process deletes: each next search over HTTP
    has lost exactly the memory deleted before it."""
    key = new_key(tmp_path / "m.db", "acme")
    server = Server(tmp_path / "m.db", "--rate", "0")
    try:
        http = server.client(key)
        session = {"session_id": "s1", "timestamp": "2025-01-01T10:00:00", "turns": [
            {"role": "user", "text": "I paint watercolor landscapes on weekends and I work as a nurse."},
            {"role": "assistant", "text": "Lovely, which places do you paint?"}]}
        wait_job(http, http.post("/v1/users/maya/sessions", json={"sessions": [session]}).json()["job_id"])
        left = {m["id"] for m in http.get("/v1/users/maya/memories").json()["memories"]}
        assert left, "the session gave no memory to search"

        def found() -> set[int]:
            return {h["id"] for h in http.post("/v1/users/maya/search", json={"query": "watercolor nurse",
                                                                               "k": 200}).json()["results"]}

        assert found() == left
        for node in sorted(left):
            assert http.delete(f"/v1/users/maya/memories/{node}").status_code == 200
            left.discard(node)
            assert found() == left
    finally:
        server.stop()


def test_metrics_count_each_response_by_status(tmp_path: Path) -> None:
    key = new_key(tmp_path / "m.db", "acme")
    server = Server(tmp_path / "m.db", "--rate", "0")
    try:
        http = server.client(key)
        for _ in range(2):
            assert http.post("/v1/users/nobody/search", json={"query": "cello"}).status_code == 404
        assert server.client("pmk_000000000000_" + "x" * 30).get("/v1/users").status_code == 401
        assert http.get("/v1/users").status_code == 200
        text = httpx.get(server.url + "/metrics").text
        counts = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                  if line.startswith("promem_http_responses_total{")}
        assert counts['promem_http_responses_total{code="404"}'] == 2
        assert counts['promem_http_responses_total{code="401"}'] == 1
        assert counts['promem_http_responses_total{code="200"}'] >= 2  # /v1/users, and /healthz once ready
    finally:
        server.stop()
