"""Inputs given as URLs (sources.remote): the same events and windows as the local files, on the readers,
the local engine, a LocalCluster whose workers open the URLs themselves, HTTP and S3; one Error: line
for a missing fsspec, an unknown protocol, a missing object and a refused read."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

fsspec = pytest.importorskip("fsspec", reason="URL inputs need fsspec (veotrace[remote])")

from tests.conftest import run_cli
from veotrace import engine
from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
from veotrace.engine import EngineConfig, run_bursts, run_entropy
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events
from veotrace.sources.base import expand_paths
from veotrace.sources.remote import UrlPath, as_path
from veotrace.sources.split import plan_pieces
from veotrace.synth.alloc import regimes_log, write_realistic_log

READ = ["ts_ns", "op", "size_bytes", "address", "stream", "device"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("remote")
    real = d / "realistic.csv"
    write_realistic_log(real, events=20_000, hours=1.0, chunk=10_000)
    table = regimes_log(seed=3, windows=12, window_s=60.0).table
    pacsv.write_csv(table, d / "regimes.csv")
    (d / "regimes.csv.gz").write_bytes(gzip.compress((d / "regimes.csv").read_bytes()))
    with pa.CompressedOutputStream(str(d / "regimes.csv.zst"), "zstd") as out:
        out.write((d / "regimes.csv").read_bytes())
    with (d / "regimes.jsonl").open("w") as fh:
        for row in table.to_pylist():
            fh.write(json.dumps(row) + "\n")
    assert run_cli("convert", real, "-o", d / "realistic.parquet", "--no-progress").exit_code == 0
    pq.write_table(pq.read_table(d / "realistic.parquet"), d / "groups.parquet", row_group_size=4_000)
    folder = d / "rotated"
    folder.mkdir()
    (folder / "alloc.log.2.csv").write_bytes((d / "regimes.csv").read_bytes())
    (folder / "alloc.log.10.csv").write_bytes(real.read_bytes())
    (folder / ".partial").write_bytes(b"not read")
    return {"dir": d, "real": real, "folder": folder, "table": table}


@pytest.fixture
def mem(files):
    """The test files under memory://t/ (fsspec's in-process store)."""
    fs = fsspec.filesystem("memory")
    for p in files["dir"].rglob("*"):
        if p.is_file():
            fs.pipe(f"/t/{p.relative_to(files['dir'])}", p.read_bytes())
    yield "memory://t"
    fs.rm("/t", recursive=True)


def _events(paths) -> pa.Table:
    return pa.Table.from_batches(list(iter_alloc_events(paths, columns=READ)))


@pytest.mark.parametrize("name", ["regimes.csv", "regimes.csv.gz", "regimes.csv.zst", "regimes.jsonl",
                                  "groups.parquet"])
def test_memory_url_reads_the_same_events_as_the_local_file(files, mem, name):
    remote = _events([f"{mem}/{name}"])
    assert remote.equals(_events([files["dir"] / name]))
    if name.startswith("regimes"):  # ground truth: the generator's own events
        assert remote.column("size_bytes").to_pylist() == files["table"].column("size_bytes").to_pylist()


def test_url_folder_lists_like_a_local_folder(files, mem):
    listed = expand_paths([as_path(f"{mem}/rotated/")])
    assert [p.name for p in listed] == ["alloc.log.2.csv", "alloc.log.10.csv"]  # natural order, no dotfiles
    assert all(isinstance(p, UrlPath) for p in listed)
    assert _events([f"{mem}/rotated"]).equals(_events([files["folder"]]))


def test_local_engine_over_url_pieces_gives_the_local_windows(files, mem, monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 100_000)
    options, columns = ReadOptions(), COLUMNS
    csv_pieces = plan_pieces([as_path(f"{mem}/realistic.csv")], options=options, report=ReadReport(),
                             split_bytes=100_000, columns=columns)
    pq_pieces = plan_pieces([as_path(f"{mem}/groups.parquet")], options=options, report=ReadReport(),
                            split_bytes=100_000, columns=columns)
    assert [p.kind for p in csv_pieces].count("range") >= 5 and all(p.path.startswith("memory://") for p in csv_pieces)
    assert [p.kind for p in pq_pieces].count("row_groups") >= 2
    for name in ("realistic.csv", "groups.parquet", "rotated"):
        local = compute_entropy(iter_alloc_events([files["dir"] / name], columns=columns), window_s=60.0)
        remote = run_entropy([f"{mem}/{name}"], EngineConfig("local", 1), options=options, report=ReadReport(),
                             window_s=60.0)
        assert remote.to_dict() == local.to_dict(), name
    bursts = [run_bursts([p], EngineConfig("local", 1), options=options, report=ReadReport(), gap_ms=50.0,
                         min_events=3, ops=["alloc"]).to_dict() for p in (files["real"], f"{mem}/realistic.csv")]
    assert bursts[0] == bursts[1]


def _json(*args) -> tuple[dict, str]:
    res = run_cli(*args, "--format", "json", "--no-progress")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout), res.stderr


@pytest.mark.parametrize("command", ["entropy", "bursts", "fragmentation"])
def test_file_urls_on_two_jobs_give_the_local_result(files, command, monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 300_000)  # byte ranges of the 0.9 MB file: 3 pieces
    # fragmentation on the realistic log only (the regimes log has no addresses to replay)
    given = files["folder"] if command != "fragmentation" else files["real"]
    url = given.resolve().as_uri()
    assert url.startswith("file:///")
    jobs = "4" if command == "fragmentation" else "2"  # fragmentation splits from 4 local jobs
    local, _ = _json(command, given, "--jobs", jobs)
    remote, _ = _json(command, url, "--jobs", jobs)
    if command == "entropy":
        assert remote["windows"] == local["windows"] and len(local["windows"]) > 10
    else:
        assert json.dumps(remote, sort_keys=True).replace(url, "") == json.dumps(local, sort_keys=True).replace(
            str(given), "")


def test_dask_workers_open_the_urls_themselves(files):
    pytest.importorskip("distributed", reason="--engine dask needs veotrace[dask]")
    url = files["real"].resolve().as_uri()
    local, _ = _json("entropy", files["real"], "--window", "1m")
    remote, _ = _json("entropy", url, "--window", "1m", "--engine", "dask", "--workers", "2")
    assert remote["windows"] == local["windows"]


def test_info_describes_a_url(files, mem):
    res = run_cli("info", f"{mem}/groups.parquet", "--format", "json")
    assert res.exit_code == 0, res.stderr
    (info,) = json.loads(res.stdout)["files"]
    assert info["path"] == f"{mem}/groups.parquet" and info["tables"] == {"alloc_events": 20_000}
    assert info["version"]["row_groups"] == 5


def _one_error(res, code: int, *needles: str) -> None:
    assert res.exit_code == code and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), res.stderr
    for needle in needles:
        assert needle in lines[0]


def test_unknown_protocol_and_missing_object_name_the_url(mem):
    _one_error(run_cli("entropy", "nosuchproto://b/k.csv"), 2, "nosuchproto://b/k.csv", "nosuchproto")
    _one_error(run_cli("entropy", f"{mem}/missing.csv"), 1, f"{mem}/missing.csv", "no such object")
    _one_error(run_cli("bursts", f"{mem}/missing/", "--jobs", "2"), 1, f"{mem}/missing")


def test_refused_read_names_the_url(files):
    from fsspec.implementations.memory import MemoryFileSystem

    class Denied(MemoryFileSystem):
        protocol = "deniedtest"

        def info(self, path, **kwargs):
            raise PermissionError("Access Denied")

    fsspec.register_implementation("deniedtest", Denied, clobber=True)
    _one_error(run_cli("entropy", "deniedtest://b/x.csv"), 1, "deniedtest://b/x.csv", "access refused")


def test_without_fsspec_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec raises ImportError
    _one_error(run_cli("entropy", "s3://bucket/log.csv"), 2, "s3://bucket/log.csv", "pip install 'veotrace[remote]'")


def test_local_paths_do_not_import_fsspec(files):
    code = ("import sys; from veotrace.cli import main; sys.argv = ['veotrace', 'entropy', sys.argv[1], "
            "'--no-progress', '--format', 'json']\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('FSSPEC=%s' % ('fsspec' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(files["real"])], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=120, check=False)
    assert "FSSPEC=False" in out.stderr and '"windows"' in out.stdout


class _Ranges(SimpleHTTPRequestHandler):
    """http.server with single byte ranges (as object stores and web servers serve them)."""

    def log_message(self, *args):
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not rng or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        a, _, b = rng.removeprefix("bytes=").partition("-")
        a, b = int(a), min(int(b) if b else size - 1, size - 1)
        fh = path.open("rb")
        fh.seek(a)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
        self.send_header("Content-Length", str(b - a + 1))
        self.end_headers()
        return _Limited(fh, b - a + 1)


class _Limited:
    def __init__(self, fh, n: int) -> None:
        self.fh, self.n = fh, n

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(self.n if size < 0 else min(size, self.n))
        self.n -= len(data)
        return data

    def close(self) -> None:
        self.fh.close()


def test_http_url_over_loopback(files):
    pytest.importorskip("aiohttp", reason="fsspec's http file system needs aiohttp (pip install aiohttp)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Ranges, directory=str(files["dir"])))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for name in ("realistic.csv", "regimes.csv.gz", "groups.parquet"):
            local, _ = _json("entropy", files["dir"] / name, "--window", "1m")
            remote, _ = _json("entropy", f"{base}/{name}", "--window", "1m")
            assert remote["windows"] == local["windows"], name
        _one_error(run_cli("entropy", f"{base}/missing.csv"), 1, f"{base}/missing.csv")
    finally:
        server.shutdown()
        server.server_close()


def test_s3_url_on_a_moto_server(files, monkeypatch):
    pytest.importorskip("s3fs", reason="s3:// needs s3fs")
    moto_server = pytest.importorskip("moto.server", reason="the S3 test needs moto[server]")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
                           "AWS_ENDPOINT_URL_S3": endpoint}.items():
            monkeypatch.setenv(key, value)
        from veotrace.sources import remote

        monkeypatch.setattr(remote, "_FS", {})  # a file system for this endpoint
        import s3fs

        s3 = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
        s3.mkdir("logs")
        for p in files["folder"].iterdir():
            s3.pipe(f"logs/run/{p.name}", p.read_bytes())
        local, _ = _json("entropy", files["folder"], "--window", "1m")
        remote_res, _ = _json("entropy", "s3://logs/run/", "--window", "1m")
        assert remote_res["windows"] == local["windows"]
        if importlib.util.find_spec("distributed") is not None:
            # workers started now see the endpoint's environment (--jobs' forkserver may predate it)
            remote_res, _ = _json("entropy", "s3://logs/run/", "--window", "1m", "--engine", "dask", "--workers", "2")
            assert remote_res["windows"] == local["windows"]
        _one_error(run_cli("entropy", "s3://logs/run/missing.csv"), 1, "s3://logs/run/missing.csv")
    finally:
        server.stop()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_convert_reads_urls_and_never_writes_over_a_file_url_input(files, tmp_path, jobs):
    out = tmp_path / "out.parquet"
    res = run_cli("convert", files["folder"].resolve().as_uri(), "-o", out, "--no-progress", "--jobs", jobs)
    assert res.exit_code == 0, res.stderr
    assert pq.read_table(out).select(READ).equals(_events([files["folder"]]).select(READ))
    before = out.read_bytes()
    res = run_cli("convert", out.as_uri(), "-o", out, "--no-progress", "--jobs", jobs)
    assert res.exit_code == 2 and "refusing to write the output over an input" in res.stderr
    assert out.read_bytes() == before


def test_report_reads_a_url_folder(files, tmp_path):
    out = tmp_path / "r.html"
    res = run_cli("report", files["folder"].resolve().as_uri(), "-o", out)
    assert res.exit_code == 0, res.stderr
    assert "2 of 2 analyses" in res.stderr and "alloc.log.10.csv" in out.read_text()
