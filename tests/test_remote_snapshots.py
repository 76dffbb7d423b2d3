"""A PyTorch snapshot given as a URL (sources.remote): every command that reads a snapshot says on its file://
URL what it says on the local file, on the whole read and on the streamed one (snapshots/large.py), with only
the source's name changed; a memory:// URL too; a missing URL is one Error: line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

fsspec = pytest.importorskip("fsspec", reason="URL inputs need fsspec (veotrace[remote])")

from tests.conftest import run_cli
from veotrace.sources.remote import UrlPath
from veotrace.sources.snapshots import large, stream, torch_snapshot

SNAP = Path(__file__).resolve().parents[1] / "sample_traces" / "snapshots" / "memory_snapshot.pickle"
URL = SNAP.as_uri()
NAME = "SNAPSHOT"
#: The sample's two recorded OOMs (its own oom entries): a 16 GiB request with 123 MiB free on each device.
OOMS = [(0, 17179869184, 128974848), (1, 17179869184, 128974848)]

#: Each command's arguments after the input (``{out}``: a file it writes in the test's folder).
COMMANDS = {
    "info": [], "entropy": [], "bursts": [], "fragmentation": [], "sites": [], "simulate": [], "tune": [],
    "diagnose": [], "diff": ["{src}"], "gate": ["--baseline", "{base}"],
}
WRITERS = {"view": "view.html", "report": "report.html", "convert": "events.parquet"}
#: Run by default on the streamed route too (the rest read it as these do: slow, -m slow); report reruns the others.
STREAMED = {"info", "fragmentation", "sites", "convert", "view"}


def _cases(commands) -> list:
    return [pytest.param(c, r, marks=() if c != "report" and (r == "whole" or c in STREAMED) else pytest.mark.slow)
            for r in ("whole", "streamed") for c in commands]


@pytest.fixture
def route(request, monkeypatch) -> str:
    """The snapshot read whole, or by the streaming decoder (every file streamed, past the whole read's bound:
    a URL cannot fall back to the whole read)."""
    if request.param == "streamed":
        if not stream.available():
            pytest.skip("the streaming read needs the C parts (python3 setup.py build_ext --inplace)")
        monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
        monkeypatch.setenv("VEOTRACE_MAX_FILE_BYTES", str(SNAP.stat().st_size // 2))
    torch_snapshot._load_cached.cache_clear()  # no read of the other route kept (their keys are the file's)
    large._READ.clear()
    large._WHOLE.clear()
    return request.param


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "base.json"
    res = run_cli("entropy", SNAP, "--save-baseline", path, "--format", "json")
    assert res.exit_code == 0, res.stderr
    return path


def _said(src: str, args: list[str], **fill) -> tuple[dict, str]:
    """The command's JSON and stderr on ``src``, its name replaced (the rest is what the analysis says)."""
    res = run_cli(*[a.format(src=src, **fill) for a in args], "--format", "json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout.replace(src, NAME)), res.stderr.replace(src, NAME)


@pytest.mark.parametrize(("command", "route"), _cases(COMMANDS), indirect=["route"])
def test_a_snapshot_url_says_what_the_local_file_says(command, route, base):
    args = [command, "{src}", *COMMANDS[command]]
    local, local_err = _said(str(SNAP), args, base=base)
    remote, remote_err = _said(URL, args, base=base)
    assert remote == local and remote_err == local_err
    if command == "info":  # ground truth: the snapshot's own oom entries, their free bytes re-read from the URL
        (f,) = remote["files"]
        assert f["path"] == NAME and f["format"] == "torch-snapshot"
        assert [(o["device"], o["request_bytes"], o["device_free_bytes"])
                for o in f["details"]["alloc_events"]["recorded_ooms"]] == OOMS
    if command == "fragmentation":
        assert remote["summary"]["from_snapshot"] is True and remote["windows"]


@pytest.mark.parametrize(("command", "route"), _cases(WRITERS), indirect=["route"])
def test_a_snapshot_url_writes_what_the_local_file_writes(command, route, tmp_path):
    written = []
    for src, side in ((str(SNAP), "local"), (URL, "url")):
        out = tmp_path / side / WRITERS[command]
        out.parent.mkdir()
        res = run_cli(command, src, "-o", out, *(["--no-progress"] if command == "convert" else []))
        assert res.exit_code == 0, res.stderr
        if command == "convert":  # the events, segments and blocks tables; source_file names the input
            written.append([pq.read_table(p).drop_columns(["source_file"]) for p in
                            (out, out.with_suffix(".segments.parquet"), out.with_suffix(".blocks.parquet"))])
        else:
            written.append(out.read_text().replace(src, NAME))
    if command == "convert":
        assert all(a.equals(b) for a, b in zip(*written)) and written[0][0].num_rows > 1000
    else:
        assert written[0] == written[1] and NAME in written[0]


@pytest.fixture
def mem():
    fs = fsspec.filesystem("memory")
    fs.pipe("/snaps/memory_snapshot.pickle", SNAP.read_bytes())
    yield "memory://snaps/memory_snapshot.pickle"
    fs.rm("/snaps", recursive=True)


@pytest.mark.parametrize("route", ["whole", pytest.param("streamed", marks=pytest.mark.slow)], indirect=True)
def test_a_memory_url_snapshot_and_its_version(mem, route):
    # fragmentation: the recorded OOMs' free bytes are read from the URL too (they were "unknown" but on file://)
    for command in ("info", "fragmentation"):
        assert _said(mem, [command, "{src}"]) == _said(str(SNAP), [command, "{src}"]), command
    first = UrlPath(mem).stat()
    fsspec.filesystem("memory").pipe("/snaps/memory_snapshot.pickle", SNAP.read_bytes())  # rewritten, same size
    again = UrlPath(mem).stat()
    assert first.st_size == again.st_size and first.st_version and first.st_version != again.st_version


@pytest.mark.parametrize("command", [*COMMANDS, *WRITERS])
def test_a_missing_snapshot_url_is_one_error_naming_it(command, tmp_path, base):
    url = (tmp_path / "gone.pickle").as_uri()
    extra = {"diff": [url], "gate": ["--baseline", base]}.get(command, [])
    extra = extra or (["-o", tmp_path / WRITERS[command]] if command in WRITERS else [])
    res = run_cli(command, url, *extra)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"Error: {url}: no such object"), res.stderr
