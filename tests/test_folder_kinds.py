"""A folder is one run (issue 39): a folder holding traces of several kinds (a snapshot beside an
unrelated log) is refused by every command with the list of what it holds, in one place
(``sources.resolve_inputs``); ``diagnose`` analyses each kind on its own and says so."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import SAMPLES, run_cli


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixed")
    shutil.copy(SAMPLES / "snapshots" / "memory_snapshot.pickle", folder)
    shutil.copy(SAMPLES / "alloc_logs_bursty" / "alloc.log.csv", folder)
    return folder


@pytest.mark.parametrize("command", ["tune", "simulate", "sites", "entropy", "bursts", "fragmentation", "convert"])
def test_every_command_refuses_a_folder_of_two_kinds_with_what_it_holds(mixed, command, tmp_path):
    args = [command, mixed] + (["-o", tmp_path / "out.parquet"] if command == "convert" else [])
    r = run_cli(*args)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.count("Error:") == 1 and "Traceback" not in r.stderr
    assert "2 kinds of trace" in r.stderr
    assert "alloc/free log (alloc.log.csv)" in r.stderr and "PyTorch snapshot (memory_snapshot.pickle)" in r.stderr


def test_a_folder_of_one_kind_is_still_one_run():
    r = run_cli("entropy", SAMPLES / "alloc_logs", "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["events_read"] > 0


def test_diagnose_analyses_each_kind_on_its_own_and_says_so(mixed):
    out = json.loads(run_cli("diagnose", mixed, "-f", "json").stdout)
    ran = [a["command"] for a in out["analyses"]]
    assert any(c.endswith("alloc.log.csv") for c in ran) and any(c.startswith("veotrace tune") and
                                                                 c.endswith("memory_snapshot.pickle") for c in ran)
    (note,) = [n for n in out["notes"] if "kinds of trace" in n]
    assert "alloc/free log: alloc.log.csv" in note and "each analysed on its own" in note
