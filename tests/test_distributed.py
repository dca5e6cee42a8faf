"""Bulk extraction on a real local Ray cluster (2 CPUs, scripted profile): the same records as a single-node
run, per-shard files, resume from manifests, and no loss or duplication when a worker or the driver is killed."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import ROOT, halumem_sessions, scripted_config, tomas_sessions, write_jsonl
from promem_fast import Engine, EngineConfig
from promem_fast.cli import main
from promem_fast.distributed import extract
from promem_fast.errors import InputError, MissingDependency, PromemError
from promem_fast.io import session_from_dict
from promem_fast.types import Session

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'promem-fast[ray]'")

SCRIPTED = ["--profile", "scripted", "--no-progress", "--no-timings"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A real local Ray cluster for the module; yields its address for drivers in other processes."""
    ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def config() -> EngineConfig:
    c = scripted_config()
    c.record_timings = False
    return c


def many(copies: int) -> list[Session]:
    """The HaluMem user's 29 sessions ``copies`` times over, with fresh ids."""
    base = halumem_sessions()
    return [dataclasses.replace(s, session_id=f"{s.session_id}#{k}") for k in range(copies) for s in base]


def single_node(sessions: list[Session]) -> list[str]:
    return sorted(g.to_json(timings=False) for g in Engine(config()).extract(sessions))


def shard_dir(path: Path, sessions: list[Session], files: int) -> Path:
    path.mkdir()
    size = -(-len(sessions) // files)
    for i in range(files):
        write_jsonl(path / f"part{i}.jsonl", sessions[i * size:(i + 1) * size])
    return path


def records(out: Path) -> list[str]:
    return sorted(line for f in sorted(out.glob("*.jsonl")) if not f.name.endswith(".rejects.jsonl")
                  for line in f.read_text(encoding="utf-8").splitlines())


def manifests(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.manifest.json"))]


@pytest.mark.parametrize("actors", [1, 2])
def test_actors_give_the_single_node_records_and_summed_accounting(cluster: str, tmp_path: Path,
                                                                   actors: int) -> None:
    sessions = halumem_sessions()
    inputs = shard_dir(tmp_path / "in", sessions, 3)
    summary = extract(inputs, tmp_path / "out", config=config(), actors=actors, shard_sessions=4)
    assert records(tmp_path / "out") == single_node(sessions)
    assert summary.shards == 9 and summary.skipped == 0 and summary.engine.sessions == 29
    engine = Engine(config())
    engine.extract(sessions)
    ours, theirs = summary.engine.stats.to_dict(timings=False), engine.summary.stats.to_dict(timings=False)
    assert ours["stages"] == theirs["stages"] and ours["counts"] == theirs["counts"]
    assert sum(t.sessions for t in summary.actors.values()) == 29
    assert 1 <= len(summary.actors) <= actors
    assert {m["report"]["worker"]["pid"] for m in manifests(tmp_path / "out")} != {os.getpid()}


def test_bad_lines_and_ids_repeated_across_shards_are_rejected_as_on_one_node(cluster: str, tmp_path: Path) -> None:
    sessions = halumem_sessions(6)
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(s.to_dict()) for s in sessions]
    lines.insert(4, "{broken")  # line 5, opening the third shard of two lines
    lines.append(lines[1])  # line 8 repeats the id of line 2, three shards earlier
    path.write_text("\n".join(lines) + "\n")
    single = tmp_path / "single.jsonl"
    assert main(["extract", str(path), "-o", str(single), *SCRIPTED]) == 0
    out = tmp_path / "out"
    summary = extract(path, out, config=config(), actors=2, shard_sessions=2)
    assert records(out) == sorted(single.read_text().splitlines())
    rejects = [json.loads(x) for f in sorted(out.glob("*.rejects.jsonl")) for x in f.read_text().splitlines()]
    assert rejects == [json.loads(x) for x in (tmp_path / "single.rejects.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"], r["field"]) for r in rejects] == [(str(path), 5, None), (str(path), 8, "session_id")]
    assert (out / "in-00002.rejects.jsonl").read_text().strip() and (out / "in-00003.rejects.jsonl").read_text()
    assert summary.input_rejects == 2
    stop = scripted_config()
    stop.on_error = "stop"
    with pytest.raises(InputError, match=r"in\.jsonl:5"):
        extract(path, tmp_path / "out2", config=stop, actors=1, shard_sessions=2)


def test_rerun_redoes_only_missing_or_torn_shards(cluster: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = halumem_sessions()
    inputs = shard_dir(tmp_path / "in", sessions, 2)
    out = tmp_path / "out"
    first = extract(inputs, out, config=config(), actors=2, shard_sessions=5)
    (out / "part0-00001.manifest.json").unlink()
    torn = out / "part1-00000.jsonl"
    torn.write_bytes(torn.read_bytes()[:-40])
    again = extract(inputs, out, config=config(), actors=2, shard_sessions=5)
    assert again.skipped == first.shards - 2 and again.new_sessions == 10
    assert records(out) == single_node(sessions)
    assert again.engine.sessions == 29  # totals count every shard once, kept ones from their manifests
    other = config()
    other.pipeline.tau_comp = 0.5
    with pytest.raises(PromemError, match="other settings"):
        extract(inputs, out, config=other, actors=1, shard_sessions=5)
    with pytest.raises(PromemError, match="another cut"):
        extract(inputs, out, config=config(), actors=1, shard_sessions=7)
    monkeypatch.setattr("promem_fast.config.__version__", "0.0.1")  # shards of another version are not mixed in
    with pytest.raises(PromemError, match="other settings"):
        extract(inputs, out, config=config(), actors=1, shard_sessions=5)


def test_parquet_in_and_out(cluster: str, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sessions = halumem_sessions(12)
    # both input forms in one file: the columns a record lacks (turns or messages) read back as nulls;
    # Parquet cannot hold the empty metadata struct, so it is left out as a Parquet export would
    rows = [{k: v for k, v in s.to_dict().items() if k != "metadata"} for s in sessions]
    rows[4] = {"session_id": "chat", "user": "Ana", "messages": [{"role": "user", "content": "I moved to Oslo."},
                                                                  {"role": "assistant", "content": "Welcome!"}]}
    pq.write_table(pa.Table.from_struct_array(pa.array(rows)), tmp_path / "in.parquet", row_group_size=3)
    out = tmp_path / "out"
    summary = extract(tmp_path / "in.parquet", out, config=config(), actors=2, shard_sessions=5, parquet=True)
    assert summary.shards == 2  # row groups of 3 rows gathered into shards of >= 5 rows, none split
    assert summary.input_rejects == 0
    assert records(out) == single_node([session_from_dict(r) for r in rows])
    written = sorted(line for f in out.glob("*.parquet") for line in pq.read_table(f).column("graph").to_pylist())
    assert written == records(out)


def test_cli_runs_on_ray_and_a_rerun_continues(cluster: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    sessions = halumem_sessions()
    inputs = shard_dir(tmp_path / "in", sessions, 2)
    out = tmp_path / "out"
    cmd = ["extract", str(inputs), "-o", str(out), "--ray", "--actors", "2", "--shard-sessions", "8", *SCRIPTED]
    assert main(cmd) == 0
    text = capsys.readouterr().out
    assert "sessions 29" in text and "shards 4 (0 done by an earlier run)" in text
    per_actor = re.findall(r"^\w+ pid \d+ +(\d+) +(\d+) +[\d.]+ +[\d,]+$", text, re.MULTILINE)
    assert 1 <= len(per_actor) <= 2 and sum(int(sessions) for _, sessions in per_actor) == 29
    assert re.search(r"^overall: 29 sessions in [\d.]+ s on this run \([\d,]+ sessions/hour", text, re.MULTILINE)
    assert records(out) == single_node(sessions)
    assert main(cmd) == 0
    text = capsys.readouterr().out
    assert "shards 4 (4 done by an earlier run)" in text and "overall: 0 sessions" in text and "over 0 actors" in text
    (tmp_path / "file").write_text("")
    with pytest.raises(PromemError, match="not a directory"):
        extract(inputs, tmp_path / "file", config=config())


def test_every_actor_gets_a_shard_and_the_output_goes_into_a_store(cluster: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from promem_fast.store import MemoryStore

    sessions = halumem_sessions()
    inputs = tmp_path / "in.jsonl"  # one file of 29 sessions, well under the default 1,000-session shard
    write_jsonl(inputs, sessions)
    with inputs.open("a") as handle:
        handle.write("{not json\n")
    out, db = tmp_path / "out", tmp_path / "memory.db"
    assert main(["extract", str(inputs), "-o", str(out), "--ray", "--actors", "2", "--db", str(db), *SCRIPTED]) == 0
    text = capsys.readouterr().out
    assert "shards 2 (0 done by an earlier run)" in text  # 15 + 14 sessions: one shard for each actor
    glob = re.search(r"^graphs: (\S+)", text, re.MULTILINE).group(1)
    assert sorted(p.name for p in Path(glob).parent.glob(Path(glob).name)) == ["in-00000.jsonl", "in-00001.jsonl"]
    assert (out / "in-00001.rejects.jsonl").read_text()  # the bad line is there, and ingest must not read it
    assert "added 29 sessions from 2 files" in text
    with MemoryStore(db, read_only=True) as store:
        assert sorted(store.sessions(sessions[0].user)) == sorted(s.session_id for s in sessions)
    again = ["ingest", str(out), "--db", str(tmp_path / "again.db"), "--update-judge", "off", "--profile", "scripted"]
    assert main(again) == 0
    said = capsys.readouterr().out
    assert "added 29 sessions from 2 files" in said and "skipped" not in said


def test_a_shard_size_that_leaves_actors_idle_is_named(cluster: str, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    inputs = tmp_path / "in.jsonl"
    write_jsonl(inputs, halumem_sessions())
    with caplog.at_level("WARNING", logger="promem_fast.distributed.driver"):
        extract(inputs, tmp_path / "out", config=config(), actors=2, shard_sessions=100)
    (warning,) = [r.getMessage() for r in caplog.records if "get no work" in r.getMessage()]
    assert warning == ("2 actors asked for, 1 shards to run: 1 actors get no work (--shard-sessions 100 cuts 29 "
                       "sessions into 1 shards; leave it out, or pass 15, to give each actor one)")


def _wait(condition: Callable[[], object], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.slow
def test_a_killed_worker_actor_is_restarted_and_loses_or_duplicates_nothing(cluster: str, tmp_path: Path) -> None:
    sessions = many(4)
    inputs = shard_dir(tmp_path / "in", sessions, 2)
    out = tmp_path / "out"
    result: dict[str, object] = {}

    def drive() -> None:
        try:
            result["summary"] = extract(inputs, out, config=config(), actors=1, shard_sessions=4)
        except BaseException as exc:  # handed to the test thread
            result["error"] = exc

    driver = threading.Thread(target=drive)
    driver.start()
    assert _wait(lambda: manifests(out), 120), "no shard finished"
    victim = manifests(out)[0]["report"]["worker"]["pid"]
    os.kill(victim, signal.SIGKILL)
    killed_at = len(manifests(out))
    driver.join(300)
    assert not driver.is_alive() and "error" not in result, result.get("error")
    assert killed_at < 30  # the kill landed mid-run (2 files of 58 sessions, 15 shards each)
    assert records(out) == single_node(sessions)
    assert len(records(out)) == len(set(records(out))) == len(sessions)
    pids = {m["report"]["worker"]["pid"] for m in manifests(out)}
    assert victim in pids and len(pids) >= 2  # the lone actor was restarted in a new process


@pytest.mark.slow
def test_a_killed_driver_is_rerun_with_the_same_command(cluster: str, tmp_path: Path) -> None:
    sessions = many(4)
    inputs = shard_dir(tmp_path / "in", sessions, 2)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "promem_fast.cli", "extract", str(inputs), "-o", str(out), "--ray", cluster,
           "--actors", "2", "--shard-sessions", "4", *SCRIPTED]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait(lambda: manifests(out), 120), "no shard finished"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    done_before = len(manifests(out))
    assert 0 < done_before < 30
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"({done_before} done by an earlier run)" in rerun.stdout
    assert records(out) == single_node(sessions)
    assert len(set(records(out))) == len(sessions)


def test_without_ray_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does where the extra is not installed
    path = write_jsonl(tmp_path / "in.jsonl", tomas_sessions(2))
    with pytest.raises(MissingDependency, match=r"promem-fast\[ray\]"):
        extract(path, tmp_path / "out", config=config())


def test_a_pool_the_cluster_cannot_hold_is_refused(cluster: str, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", tomas_sessions(2))
    with pytest.raises(PromemError, match="3 actors x 1 CPUs each need 3 CPUs; the Ray cluster has 2"):
        extract(path, tmp_path / "out", config=config(), actors=3)
    on_vllm = config()
    on_vllm.llm.backend = "vllm"  # one vLLM per GPU: a GPU per actor unless told otherwise
    with pytest.raises(PromemError, match="1 GPUs each need 1 GPUs; the Ray cluster has 0"):
        extract(path, tmp_path / "out", config=on_vllm, actors=1)
    assert not list((tmp_path / "out").glob("*.manifest.json"))


def _busy_shard_worker_pids() -> list[int]:
    """ShardWorker actors running a shard: Ray titles the process ``ray::MapWorker(MapBatches(ShardWorker)).submit``
    while a task runs in it."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"MapBatches(ShardWorker)).submit" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_shard_whose_worker_always_dies_stops_the_run_after_bounded_retries(cluster: str, tmp_path: Path) -> None:
    inputs = write_jsonl(tmp_path / "in.jsonl", halumem_sessions(8))
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:  # every ShardWorker dies as soon as it works on a shard, as a crashing backend would
        while not stop.is_set():
            for pid in _busy_shard_worker_pids():
                if pid not in kills:
                    kills.append(pid)
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    result: dict[str, BaseException] = {}

    def drive() -> None:
        try:
            extract(inputs, tmp_path / "out", config=config(), actors=1, shard_sessions=4)
        except BaseException as exc:  # handed to the test thread
            result["error"] = exc

    threads = [threading.Thread(target=killer, daemon=True), threading.Thread(target=drive, daemon=True)]
    for thread in threads:
        thread.start()
    threads[1].join(120)
    stop.set()
    assert not threads[1].is_alive(), "the run kept retrying"
    assert isinstance(result.get("error"), PromemError), result
    assert "run the same command again" in str(result["error"])
    assert len(kills) >= 2 and not manifests(tmp_path / "out")


def test_shard_files_and_the_summary_are_private_whatever_the_umask(cluster: str, open_umask: None,
                                                                    tmp_path: Path) -> None:
    """Graphs, rejected lines, manifests and Parquet of every shard 0600, the folders the run made 0700."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in tomas_sessions()) + "{broken\n")
    extract(source, tmp_path / "out" / "ray", config=config(), actors=1, shard_sessions=7, parquet=True)
    found = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777 for p in sorted((tmp_path / "out").rglob("*"))}
    assert found == {"out/ray": 0o700, "out/ray/summary.json": 0o600,
                     **{f"out/ray/in-{n}{suffix}": 0o600 for n in ("00000", "00001")
                        for suffix in (".jsonl", ".rejects.jsonl", ".manifest.json", ".parquet")}}
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o700
