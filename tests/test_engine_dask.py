"""--engine dask: the same windows and bursts as the local engine on a LocalCluster and on scheduler and
worker processes (one killed mid-run), and one Error: line for an unreachable scheduler or a bad file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv
import pytest

distributed = pytest.importorskip("distributed", reason="--engine dask needs the dask extra (veotrace[dask])")

import veotrace.engine as engine  # noqa: E402
from tests.conftest import run_cli  # noqa: E402
from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy  # noqa: E402
from veotrace.engine import EngineConfig, run_entropy  # noqa: E402
from veotrace.engine.cluster import run_dask  # noqa: E402
from veotrace.engine.tasks import Job  # noqa: E402
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events  # noqa: E402
from veotrace.sources.split import Piece  # noqa: E402
from veotrace.synth.alloc import regimes_log, write_realistic_log  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dask")
    real = d / "realistic.csv"
    write_realistic_log(real, events=30_000, hours=1.0, chunk=10_000)
    folder = d / "rotated"
    folder.mkdir()
    pacsv.write_csv(regimes_log(seed=5, windows=12, window_s=60.0).table, folder / "alloc.log.1.csv")
    (folder / "alloc.log.2.csv").write_bytes(real.read_bytes())
    return {"real": real, "folder": folder}


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            cwd=Path(__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers, each its own process on loopback (no nanny)."""
    d = tmp_path_factory.mktemp("cluster")
    sched_file = d / "scheduler.json"
    procs = [_spawn(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(sched_file)], d / "scheduler.log")]
    try:
        for _ in range(600):
            if sched_file.exists() and sched_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        workers = [_spawn(["worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{i}"],
                          d / f"worker{i}.log") for i in range(2)]
        procs += workers
        with distributed.Client(address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
        yield {"address": address, "workers": workers}
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 60_000)


def _json(*args) -> dict:
    res = run_cli(*args, "--format", "json", "--no-progress")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.usefixtures("small_pieces")
def test_cluster_gives_the_local_windows_and_bursts(data, cluster):
    on = ["--engine", "dask", "--scheduler", cluster["address"]]
    for cmd in (["entropy", data["folder"], "--window", "60", "--by", "stream"], ["bursts", data["real"], "--by", "stream"]):
        assert _json(*cmd, *on) == _json(*cmd)


def test_convert_on_the_cluster_writes_the_local_parquet(data, cluster, tmp_path):
    import pyarrow.parquet as pq

    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run_cli("convert", data["folder"], "-o", a, "--no-progress").exit_code == 0
    res = run_cli("convert", data["folder"], "-o", b, "--no-progress", "--engine", "dask", "--scheduler", cluster["address"])
    assert res.exit_code == 0, res.stderr
    assert pq.read_table(b).equals(pq.read_table(a))


@pytest.mark.usefixtures("small_pieces")
def test_scheduler_address_from_the_environment(data, cluster, monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster["address"])
    assert _json("entropy", data["real"], "--engine", "dask") == _json("entropy", data["real"])


@pytest.mark.usefixtures("small_pieces")
def test_progress_follows_the_tasks_up_to_the_total(data, cluster):
    seen: list[tuple[int, int]] = []
    run_entropy([data["real"]], EngineConfig("dask", scheduler=cluster["address"]), options=ReadOptions(),
                report=ReadReport(), window_s=60.0, on_progress=lambda d, t: seen.append((d, t)))
    assert len(seen) > 10  # one update per task
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == seen[-1][1] > 0


@pytest.mark.usefixtures("small_pieces")
def test_local_cluster_of_several_workers_gives_the_local_windows(data):
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        on = ["--engine", "dask", "--scheduler", lc.scheduler_address]
        for cmd in (["entropy", data["folder"], "--window", "60"], ["bursts", data["folder"], "--gap", "1"]):
            assert _json(*cmd, *on) == _json(*cmd)


def _heap_state():
    from veotrace.engine import workermem

    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), workermem._done


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_nanny_workers_get_heap_reuse_back(data):
    """distributed's nanny starts workers with MALLOC_TRIM_THRESHOLD_ set; a task undoes it (workermem)."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        assert set(client.run(_heap_state).values()) == {("65536", False)}
        got = run_entropy([data["real"]], EngineConfig("dask", scheduler=lc.scheduler_address), options=ReadOptions(),
                          report=ReadReport(), window_s=60.0)
        assert set(client.run(_heap_state).values()) == {("65536", True)}
    assert got.windows.equals(compute_entropy(iter_alloc_events([data["real"]]), window_s=60.0).windows)


@pytest.mark.slow
@pytest.mark.usefixtures("small_pieces")
def test_cli_starts_a_local_cluster_of_worker_processes(data):
    assert _json("entropy", data["folder"], "--window", "60", "--engine", "dask", "--workers", "2") == \
        _json("entropy", data["folder"], "--window", "60")


def test_a_bad_file_on_one_worker_is_one_error_line_naming_it(data, cluster, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.csv").write_bytes(data["real"].read_bytes())
    (folder / "b.csv").write_text("timestamp,op_type,size_bytes\n1,alloc,4096\n2,alloc,-5\n")
    local = run_cli("entropy", folder, "--no-progress")
    res = run_cli("entropy", folder, "--no-progress", "--engine", "dask", "--scheduler", cluster["address"])
    assert res.exit_code == local.exit_code == 1 and res.stdout == ""
    assert res.stderr == local.stderr and res.stderr.count("\n") == 1
    assert res.stderr.startswith(f"Error: {folder / 'b.csv'}:3: column 'size_bytes'")


def test_a_path_the_workers_cannot_read_names_it(cluster, tmp_path):
    gone = tmp_path / "gone.csv"
    with distributed.Client(cluster["address"], set_as_default=False) as client, \
            pytest.raises(FileNotFoundError) as err:
        run_dask(client, [Piece(str(gone), "alloc-csv")], Job("entropy", {}, ReadOptions(), COLUMNS))
    assert str(gone) in str(err.value)


def test_unreachable_scheduler_is_one_error_line_within_seconds(data):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t0 = time.monotonic()
    res = run_cli("bursts", data["real"], "--no-progress", "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert time.monotonic() - t0 < 15
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.startswith(f"Error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 5 s")
    assert res.stderr.count("\n") == 1


def test_a_worker_killed_mid_run_does_not_change_the_result(data, cluster, monkeypatch):
    """Last in this module: it kills one of the fixture's two workers."""
    monkeypatch.setattr(engine, "SPLIT_BYTES", 25_000)  # ~55 tasks, so the kill lands mid-run
    victim = cluster["workers"][0]
    killed: list[tuple[int, int]] = []

    def kill_once(done: int, total: int) -> None:
        if not killed:
            os.kill(victim.pid, signal.SIGKILL)
            killed.append((done, total))

    want = compute_entropy(iter_alloc_events([data["real"]], columns=COLUMNS), window_s=60.0)
    got = run_entropy([data["real"]], EngineConfig("dask", scheduler=cluster["address"]), options=ReadOptions(),
                      report=ReadReport(), window_s=60.0, on_progress=kill_once)
    assert killed and killed[0][0] < killed[0][1]  # killed with tasks still to run
    assert victim.wait(timeout=10) == -signal.SIGKILL
    assert got.windows.equals(want.windows) and got.summary == want.summary and got.trend == want.trend
