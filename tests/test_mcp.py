"""`veotrace mcp` driven by the official SDK's own client, in-process and over stdio.

The tool list is the registry's commands; each tool's whole result (``full``) is the command's ``-f json``
on the same sample files; the cut result pages through the same rows; a path outside the roots, a URL,
an unknown option, a hostile pickle, a refusal of the command's own and a call past the timeout each get
a tool error, and the server serves the next call.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("mcp")
import anyio
from mcp import Client, StdioServerParameters

from tests.conftest import REPO, SAMPLES, run_cli
from veotrace import registry
from veotrace.mcp.server import Service, build, page_uri

SNAPSHOT = SAMPLES / "snapshots" / "memory_snapshot.pickle"
HOSTILE = REPO / "tests" / "bad_inputs" / "names_a_callable.pickle"
LOG = SAMPLES / "alloc_logs_bursty" / "alloc.log.csv"

#: Per command: the tool's arguments, and the same run as a command line (written out independently).
CASES: dict[str, tuple[dict, list[str]]] = {
    "entropy": ({"paths": [str(SAMPLES / "alloc_logs")], "window": "1h"}, [str(SAMPLES / "alloc_logs"), "--window", "1h"]),
    "bursts": ({"paths": [str(SAMPLES / "alloc_logs_bursty")], "gap": "2ms"}, [str(SAMPLES / "alloc_logs_bursty"), "--gap", "2ms"]),
    "fragmentation": ({"paths": [str(SAMPLES / "alloc_addr" / "alloc_addr.csv")], "window": "30m"},
                      [str(SAMPLES / "alloc_addr" / "alloc_addr.csv"), "--window", "30m"]),
    "simulate": ({"paths": [str(SAMPLES / "simulate" / "training_log.csv")], "policy": ["torch", "ideal"]},
                 [str(SAMPLES / "simulate" / "training_log.csv"), "-p", "torch", "-p", "ideal"]),
    "l2-breakpoints": ({"paths": [str(SAMPLES / "ncu" / "l2_details.csv")], "min_size": 4},
                       [str(SAMPLES / "ncu" / "l2_details.csv"), "--min-size", "4"]),
    "correlate": ({"addrs": str(SAMPLES / "arrays" / "addrs.npy"), "epe": str(SAMPLES / "arrays" / "epe.npy"), "resamples": 50, "seed": 1},
                  [str(SAMPLES / "arrays" / "addrs.npy"), str(SAMPLES / "arrays" / "epe.npy"), "--resamples", "50", "--seed", "1"]),
    "coherence": ({"frames": str(SAMPLES / "frames" / "frames.csv"), "persist": 2}, [str(SAMPLES / "frames" / "frames.csv"), "--persist", "2"]),
    "tune": ({"paths": [str(SAMPLES / "simulate" / "training_log.csv")], "tries": ["max_split_size_mb=unset,64"]},
             [str(SAMPLES / "simulate" / "training_log.csv"), "--try", "max_split_size_mb=unset,64"]),
    "sites": ({"paths": [str(SNAPSHOT)], "site_depth": 2}, [str(SNAPSHOT), "--site-depth", "2"]),
    "diff": ({"before": str(SAMPLES / "alloc_addr" / "alloc_addr.csv"), "after": str(SAMPLES / "alloc_logs")},
             [str(SAMPLES / "alloc_addr" / "alloc_addr.csv"), str(SAMPLES / "alloc_logs")]),
    "info": ({"paths": [str(SAMPLES / "ncu" / "launch_count_1.csv"), str(SNAPSHOT)]}, [str(SAMPLES / "ncu" / "launch_count_1.csv"), str(SNAPSHOT)]),
    "gate": ({"paths": [str(SAMPLES / "alloc_logs")], "baseline": "{base}", "seed": 3}, [str(SAMPLES / "alloc_logs"), "--baseline", "{base}", "--seed", "3"]),
    "diagnose": ({"paths": [str(SNAPSHOT)]}, [str(SNAPSHOT)]),
    "banks": ({"elem_bytes": 8, "stride": 3}, ["--elem-bytes", "8", "--stride", "3"]),
}
#: Commands whose result is a file (their tests below), and formats (text).
FILES = {"view", "report", "convert"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A second root: a gate baseline, and a link that leads outside every root."""
    path = tmp_path_factory.mktemp("mcp")
    r = run_cli("entropy", SAMPLES / "alloc_logs", "--save-baseline", path / "base.json", "-f", "json", "-o", path / "e.json")
    assert r.exit_code == 0, r.stderr
    (path / "outside").symlink_to("/etc/hostname")
    (path / "logs").mkdir()
    (path / "logs" / "a.csv").symlink_to(SAMPLES / "alloc_logs_bursty" / "alloc.log.csv")  # inside a root: fine
    (path / "leaky").mkdir()
    (path / "leaky" / "b.csv").symlink_to("/etc/hostname")
    return path


@pytest.fixture(scope="module")
def service(folder):
    s = Service([REPO, folder], timeout=60, pages=folder / "pages")
    s.worker.warm()
    yield s
    s.close()


def talk(server, work):
    """Run ``await work(client)`` with the SDK's client connected to ``server`` (a Server, or stdio parameters)."""
    out = {}

    async def main():
        async with Client(server, read_timeout_seconds=120) as client:
            out["value"] = await work(client)

    anyio.run(main)
    return out["value"]


def _structured(result):
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def test_the_tools_are_the_registry_and_diagnose_says_to_call_it_first(service):
    tools = talk(build(service), lambda c: c.list_tools()).tools
    assert [t.name for t in tools] == [e.command for e in registry.commands()]
    by = {t.name: t for t in tools}
    assert by["diagnose"].description.startswith("Start here: call this first")
    assert all("diagnose first" in t.description for t in tools if t.name != "diagnose")
    # options from the command line: its types, its choices; what the server owns is not offered
    entropy = by["entropy"].input_schema
    assert entropy["properties"]["window_events"]["type"] == "integer"
    assert entropy["properties"]["by"]["enum"] == ["device", "stream", "site", "phase"]
    assert entropy["required"] == ["paths"] and entropy["additionalProperties"] is False
    for owned in ("fmt", "output", "plot", "follow", "save_baseline", "scheduler"):
        assert owned not in entropy["properties"]
    assert "on_fail" not in by["gate"].input_schema["properties"]
    assert by["simulate"].input_schema["properties"]["conf"]["type"] == "string"
    assert {"full", "select", "row_offset", "row_limit"} <= set(by["banks"].input_schema["properties"])
    # the parameters that name files, each checked against the roots (typer's TyperPath, path_or_url, tuples of paths)
    paths = {s["name"]: [p["name"] for p in s["params"] if p["path"]] for s in service.specs()}
    assert paths["correlate"] == ["addrs", "epe", "baseline"] and paths["gate"] == ["paths", "baseline", "history"]
    assert paths["tune"] == ["paths", "space"] and paths["banks"] == ["addresses"] and paths["diff"] == ["before", "after"]
    assert all(paths[e.command][:1] in (["paths"], ["frames"], ["addrs"], ["before"], ["addresses"], [])
               for e in registry.commands())


@pytest.mark.parametrize("name", list(CASES))
def test_each_tool_s_whole_result_is_the_command_s_json(service, folder, name):
    arguments, cli_args = CASES[name]
    arguments = {k: (v.format(base=folder / "base.json") if isinstance(v, str) else v) for k, v in arguments.items()}
    cli_args = [a.format(base=folder / "base.json") for a in cli_args]
    envelope = _structured(talk(build(service), lambda c: c.call_tool(name, {**arguments, "full": True})))
    r = run_cli(name, *cli_args, "-f", "json")
    assert r.exit_code == envelope["exit_code"] and r.exit_code in (0, 3), r.stderr
    assert envelope["result"] == json.loads(r.stdout)
    assert envelope["command"].startswith(f"veotrace {name} ")


def test_formats_is_the_command_s_text(service):
    envelope = _structured(talk(build(service), lambda c: c.call_tool("formats", {})))
    assert envelope["result"] == run_cli("formats").stdout


def test_the_cut_result_pages_through_the_same_rows(service):
    arguments = {"paths": [str(SAMPLES / "alloc_logs")], "window": "1h"}

    async def work(c):
        full = (await c.call_tool("entropy", {**arguments, "full": True})).structured_content["result"]
        first = (await c.call_tool("entropy", arguments)).structured_content
        later = (await c.call_tool("entropy", {**arguments, "row_offset": 230, "row_limit": 5})).structured_content
        part = (await c.call_tool("entropy", {**arguments, "select": "windows.3"})).structured_content
        one = (await c.call_tool("entropy", {**arguments, "paths": arguments["paths"][0]})).structured_content  # a string
        assert one == first
        return full, first, later, part

    full, first, later, part = talk(build(service), work)
    rows = len(full["windows"])
    assert rows > 10
    assert first["result"]["windows"] == full["windows"][:10]
    assert {"list": "windows", "rows": rows, "shown": [0, 10]} in first["left_out"] and "row_offset" in first["more"]
    assert later["result"]["windows"] == full["windows"][230:235]
    assert part["result"] == full["windows"][3]
    assert len(json.dumps(first)) < 25_000


def test_diagnose_has_its_headline_and_a_failed_check_is_a_result(service):
    envelope = _structured(talk(build(service), lambda c: c.call_tool("diagnose", {"paths": [str(SNAPSHOT)], "fail_on": "high"})))
    assert envelope["exit_code"] == 3 and "check" in envelope
    assert any(line.startswith("findings: ") for line in envelope["headline"])
    assert envelope["result"]["findings"][0]["severity"] == "high"


def test_pages_and_converted_tables_are_files_in_the_pages_folder(service, folder):
    import pyarrow.parquet as pq

    async def work(c):
        view = (await c.call_tool("view", {"paths": [str(SNAPSHOT)]})).structured_content
        table = (await c.call_tool("convert", {"paths": [str(SAMPLES / "alloc_logs_bursty")]})).structured_content
        page = await c.read_resource(page_uri("report", SAMPLES / "ncu" / "launch_count_1.csv"))
        templates = await c.list_resource_templates()
        listed = await c.list_resources()
        return view, table, page, templates, listed

    view, table, page, templates, listed = talk(build(service), work)
    html = folder / "pages" / os.path.basename(view["result"]["path"])
    assert html.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert view["result"]["bytes"] == html.stat().st_size
    report = page.contents[0].text
    assert report.endswith(".html") and "report" in open(report, encoding="utf-8").read(4000).lower()
    assert [t.uri_template for t in templates.resource_templates] == ["veotrace://view/{path}", "veotrace://report/{path}"]
    assert {r.name for r in listed.resources} >= {os.path.basename(view["result"]["path"]), os.path.basename(report)}
    r = run_cli("convert", SAMPLES / "alloc_logs_bursty", "-o", folder / "cli.parquet")
    assert r.exit_code == 0, r.stderr
    assert pq.read_table(table["result"]["path"]).equals(pq.read_table(folder / "cli.parquet"))


def test_refusals_are_tool_errors_and_the_server_serves_on(service, folder):
    refused = [
        ("diagnose", {"paths": ["/etc/passwd"]}, "outside the folders this server reads"),
        ("info", {"paths": [str(folder / "outside")]}, "outside the folders this server reads"),  # a link leading out
        ("info", {"paths": [str(folder / "leaky")]}, "a link to outside the folders"),  # a folder holding one
        ("info", {"paths": ["s3://bucket/trace.pickle"]}, "--allow-remote"),
        ("info", {"paths": ["file://localhost/etc/hostname"]}, "outside the folders"),
        ("info", {"paths": ["file://otherhost/etc/hostname"]}, "a file URL names a file on this machine"),
        ("info", {"paths": [str(SNAPSHOT) + "\0"]}, "a path has no NUL character"),
        ("tune", {"paths": [str(SNAPSHOT)], "space": "/etc/hostname"}, "outside the folders"),  # a file named as text
        ("sites", {"paths": ["/etc/hostname"]}, "outside the folders"),
        ("coherence", {"frames": "/etc/hostname"}, "outside the folders"),
        ("gate", {"paths": [str(SAMPLES / "alloc_logs")], "baseline": "/etc/hostname"}, "outside the folders"),
        ("banks", {"addresses": "/etc/hostname"}, "outside the folders"),
        ("correlate", {"addrs": str(SAMPLES / "arrays" / "addrs.npy"), "epe": str(SAMPLES / "arrays" / "epe.npy"),
                       "baseline": [str(SAMPLES / "arrays" / "addrs0.npy"), "/etc/hostname"]}, "outside the folders"),
        ("diagnose", {"paths": [str(SNAPSHOT)], "nope": 1}, "no option nope"),
        ("diagnose", {"paths": [str(SNAPSHOT)], "on_fail": "rm -rf /"}, "no option on_fail"),
        ("entropy", {"paths": [str(SNAPSHOT)], "window_events": "ten"}, "window_events must be an integer"),
        ("entropy", {}, "paths is required"),
        ("entropy", {"paths": ["--plot=/tmp/x.png"]}, "No such file"),  # a path never becomes an option
        ("nosuch", {}, "no tool 'nosuch'"),
    ]

    async def work(c):
        out = []
        for name, arguments, _ in refused:
            out.append(await c.call_tool(name, arguments))
        out.append(await c.call_tool("info", {"paths": [str(folder / "logs")]}))
        return out

    results = talk(build(service), work)
    for (name, _, expected), result in zip(refused, results):
        assert result.is_error and expected in result.content[0].text, (name, result.content[0].text)
        assert result.content[0].text.startswith("Error:")
    assert not results[-1].is_error


def test_the_command_s_own_refusal_is_its_error_line(service):
    async def work(c):
        hostile = await c.call_tool("entropy", {"paths": [str(HOSTILE)]})
        bad = await c.call_tool("diagnose", {"paths": [str(SNAPSHOT)], "fail_on": "sometimes"})
        after = await c.call_tool("formats", {})
        return hostile, bad, after

    hostile, bad, after = talk(build(service), work)
    cli = run_cli("entropy", HOSTILE)
    assert hostile.is_error and hostile.content[0].text == cli.stderr.strip().splitlines()[-1]
    assert "refused to load a pickle that names the class or callable 'builtins.print'" in hostile.content[0].text
    cli = run_cli("diagnose", SNAPSHOT, "--fail-on", "sometimes")
    assert cli.exit_code == 2 and bad.is_error and bad.content[0].text == cli.stderr.strip().splitlines()[-1]
    assert not after.is_error


def test_a_slow_call_is_stopped_and_the_next_one_served(folder):
    service = Service([REPO], timeout=0.5, pages=folder / "slow", warm=False)  # its first call comes before any warm-up
    slow = {"addrs": str(SAMPLES / "arrays" / "addrs.npy"), "epe": str(SAMPLES / "arrays" / "epe.npy"), "resamples": 100_000}  # tens of seconds

    async def work(c):  # the next call is one that takes milliseconds, well inside the 0.5 s however busy the machine
        return await c.call_tool("correlate", slow), await c.call_tool("formats", {})

    try:
        stopped, after = talk(build(service), work)
    finally:
        service.close()
    assert stopped.is_error and "stopped after 0.5 s" in stopped.content[0].text
    assert not after.is_error and after.structured_content["result"] == run_cli("formats").stdout


def test_over_stdio_as_an_assistant_launches_it(folder):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=sys.executable, args=["-m", "veotrace", "mcp", "--root", str(SAMPLES),
                                                                 "--pages", str(folder / "stdio")], env=env, cwd=str(REPO))

    async def work(c):
        tools = await c.list_tools()
        outside = await c.call_tool("info", {"paths": [str(HOSTILE)]})  # under the repository, not under the root
        done = await c.call_tool("info", {"paths": [str(SNAPSHOT)]})
        return tools, outside, done

    tools, outside, done = talk(params, work)
    assert [t.name for t in tools.tools] == [e.command for e in registry.commands()]
    assert outside.is_error and "outside the folders this server reads" in outside.content[0].text
    assert not done.is_error and done.structured_content["result"] == json.loads(run_cli("info", SNAPSHOT, "-f", "json").stdout)


def test_http_listens_on_the_loopback_only():
    r = run_cli("mcp", "--http", "0.0.0.0:8765")
    assert r.exit_code == 2 and "loopback only" in r.stderr
    r = run_cli("mcp", "--http", "8765")
    assert r.exit_code == 2 and "HOST:PORT" in r.stderr
    from veotrace.cli.mcp import loopback

    assert loopback("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert loopback("[::1]:80") == ("::1", 80)
    assert loopback("localhost:9") == ("localhost", 9)


def test_started_in_the_root_folder_it_asks_for_roots(monkeypatch):
    monkeypatch.chdir("/")
    r = run_cli("mcp")
    assert r.exit_code == 2 and "started in / with no --root" in r.stderr


def test_without_the_sdk_one_error_line_says_what_to_install(monkeypatch):
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else find(name, *a))
    r = run_cli("mcp")
    assert r.exit_code == 1 and r.stderr.strip() == "Error: the MCP server needs the official SDK: pip install 'veotrace[mcp]'"


@pytest.mark.slow
def test_over_streamable_http_on_the_loopback(folder):
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "veotrace", "mcp", "--http", f"127.0.0.1:{port}", "--root", str(SAMPLES),
                               "--pages", str(folder / "http")], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)

        async def work(c):
            return await c.list_tools(), await c.call_tool("info", {"paths": ["/etc/hostname"]}), \
                await c.call_tool("info", {"paths": [str(SNAPSHOT)]})

        tools, refused, done = talk(f"http://127.0.0.1:{port}/mcp", work)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert [t.name for t in tools.tools] == [e.command for e in registry.commands()]
    assert refused.is_error and "outside the folders" in refused.content[0].text
    assert not done.is_error and done.structured_content["result"] == json.loads(run_cli("info", SNAPSHOT, "-f", "json").stdout)


def test_a_page_of_a_result_is_reused_until_its_files_change(service, folder):
    logs = folder / "growing"
    logs.mkdir()
    lines = (SAMPLES / "alloc_logs_bursty" / "alloc.log.csv").read_text().splitlines(keepends=True)
    (logs / "alloc.log.csv").write_text("".join(lines[:400]))

    async def work(c):
        first = (await c.call_tool("bursts", {"paths": [str(logs)], "full": True})).structured_content
        again = (await c.call_tool("bursts", {"paths": [str(logs)], "full": True})).structured_content
        with open(logs / "alloc.log.csv", "a") as fh:  # the log grows: the next call runs the command again
            fh.write("".join(lines[400:]))
        grown = (await c.call_tool("bursts", {"paths": [str(logs)], "full": True})).structured_content
        return first, again, grown

    first, again, grown = talk(build(service), work)
    assert first == again
    assert grown["result"] == json.loads(run_cli("bursts", logs, "-f", "json").stdout) != first["result"]


def test_every_hostile_input_gets_the_reader_s_refusal(service):
    """The bad inputs of tests/bad_inputs (EXPECTED.tsv: file, command, exit, message) that one command refuses
    given the file alone: through the server, the same refusal, and the server goes on."""
    bad = REPO / "tests" / "bad_inputs"
    rows = [line.split("\t") for line in (bad / "EXPECTED.tsv").read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")]
    first = {s["name"]: s["params"][0] for s in service.specs() if s["params"]}
    cases = [(name, command, message) for name, command, code, message in rows
             if code == "1" and command in first and first[command]["path"] and command != "correlate"]
    assert len(cases) >= 20

    async def work(c):
        out = []
        for name, command, _ in cases:
            param = first[command]
            value = [str(bad / name)] if param["many"] else str(bad / name)
            out.append(await c.call_tool(command, {param["name"]: value}))
        out.append(await c.call_tool("info", {"paths": [str(SNAPSHOT)]}))
        return out

    results = talk(build(service), work)
    for (name, command, message), result in zip(cases, results):
        text = result.content[0].text
        assert result.is_error and text.startswith(f"Error: {bad / name}") and message in text, (name, command, text)
    assert not results[-1].is_error


def test_a_worker_grown_past_its_memory_bound_is_replaced_after_its_call(folder, monkeypatch):
    import veotrace.mcp.worker as worker

    monkeypatch.setattr(worker, "MCP_WORKER_RSS_BYTES", 1)  # any worker is past it
    service = Service([REPO], pages=folder / "rss", warm=False)
    try:
        first = service.call("banks", {"stride": 2, "full": True})
        second = service.call("banks", {"stride": 3, "full": True})  # served by a fresh worker
    finally:
        service.close()
    assert service.worker.restarts == 2
    assert second["result"] == json.loads(run_cli("banks", "--stride", "3", "-f", "json").stdout) != first["result"]


def test_urls_only_when_allowed_and_file_urls_under_the_roots(service, folder):
    from veotrace.mcp.calls import Policy

    async def work(c):
        return [await c.call_tool("info", {"paths": [url], "full": True}) for url in
                ("file:///etc/hostname", LOG.as_uri(), "memory://nowhere/trace.pickle")]

    outside, inside, refused = talk(build(service), work)
    assert outside.is_error and "outside the folders" in outside.content[0].text
    assert not inside.is_error, inside.content[0].text
    assert inside.structured_content["result"] == json.loads(run_cli("info", LOG.as_uri(), "-f", "json").stdout)
    assert refused.is_error and "--allow-remote" in refused.content[0].text
    kept = service.policy
    service.policy = Policy.of([REPO, folder], allow_remote=True)
    try:
        allowed = talk(build(service), lambda c: c.call_tool("info", {"paths": ["memory://nowhere/trace.pickle"]}))
    finally:
        service.policy = kept
    cli = run_cli("info", "memory://nowhere/trace.pickle")  # the command's own refusal: no such file there
    assert allowed.is_error and allowed.content[0].text == cli.stderr.strip().splitlines()[-1]


def test_a_worker_killed_during_a_call_is_that_call_s_error_and_the_next_is_served(folder):
    import signal
    import threading
    import time

    service = Service([REPO], timeout=60, pages=folder / "killed", warm=False)
    slow = {"addrs": str(SAMPLES / "arrays" / "addrs.npy"), "epe": str(SAMPLES / "arrays" / "epe.npy"), "resamples": 100_000}
    try:
        service.worker.warm()
        pid = service.worker._proc.pid

        def kill_once_busy():  # the out-of-memory killer, say, once the call holds the worker
            while not service.worker._lock.locked():
                time.sleep(0.01)
            time.sleep(0.3)
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill_once_busy, daemon=True).start()
        died = talk(build(service), lambda c: c.call_tool("correlate", slow))
        after = service.call("banks", {})
    finally:
        service.close()
    assert died.is_error and "the worker process ended during the call" in died.content[0].text
    assert after["result"]["warps"]
