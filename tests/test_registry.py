"""The registry of commands and analyses: complete entries, one source for the CLI, info, the report, plots and engines."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest

from tests.conftest import SAMPLES
from veotrace import registry
from veotrace.runs.result import RunResult


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.name)
def test_every_entry_is_complete_and_every_reference_resolves(entry):
    run = registry.resolve(entry.run)
    assert callable(run) and run.__doc__, f"{entry.run} needs a docstring (it is the API's help)"
    assert entry.command in entry.name
    import importlib

    importlib.import_module(entry.cli)
    shown = entry.title is not None
    # an analysis the report shows has all of its parts; a command without a section has none of them,
    # but for diagnose, whose picture (the findings' timeline) is the report's first page, not a section
    parts = (entry.section is not None) == shown == (entry.supports is not None)
    assert (parts and (entry.plot is not None) == shown) or entry.name == "convert" or \
        (parts and entry.name == "diagnose" and entry.plot is not None), \
        f"{entry.name}: title, section, plot and supports go together"
    for ref in (entry.section, entry.plot, entry.supports):
        if ref is not None:
            assert callable(registry.resolve(ref)), ref


def test_every_registered_command_is_on_the_cli_once_in_registry_order():
    from veotrace.cli import app

    names = [c.name for c in app.registered_commands]
    # then the commands that serve the others (registry.SERVICES: veotrace mcp)
    assert names == [e.command for e in registry.commands()] + list(registry.SERVICES)


def test_every_result_class_names_its_registered_command():
    import importlib
    import inspect

    for entry in registry.commands():
        module = importlib.import_module(entry.run.partition(":")[0])
        classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
                   if issubclass(c, RunResult) and c is not RunResult and c.__module__ == module.__name__]
        assert [c.command for c in classes] == [entry.command], entry.name


def test_engine_tasks_resolve():
    import importlib

    from veotrace.engine.tasks import TASKS, Job

    for name, task in TASKS.items():
        module, _, attr = task.function.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name
    with pytest.raises(ValueError, match="unknown task"):
        Job("nope", {}, None, None)


_NEW_ANALYSIS = '''
"""A new analysis, added with this module and one registry entry only: the number of alloc events."""
from dataclasses import dataclass

from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class CountRun(RunResult):
    command = "count-allocs"

    def to_dict(self):
        return {"allocs": self.value}

    def headline(self):
        return [("allocs", self.value)]


def count_allocs(paths, *, time_unit="ns"):
    """Count alloc events."""
    from veotrace.sources import iter_alloc_events

    paths = common.as_paths(paths)
    options, report = common.reading(time_unit)
    n = sum(b.column("op").to_pylist().count("alloc") for b in iter_alloc_events(paths, options=options, report=report))
    return CountRun(n, [], common.input_files(paths))


def section(job, section, reading, size):
    run = count_allocs(job.paths, time_unit=reading["time_unit"])
    section.headline = run.headline()


def plot(value, *, size):
    from veotrace.plot.base import new_figure

    fig, ax = new_figure(size)
    ax.bar([0], [value])
    return fig


def supports(info):
    return "count-allocs" if info.tables.get("alloc_events") else None
'''


def test_a_new_analysis_needs_only_its_module_and_its_registry_entry(tmp_path, monkeypatch):
    """Written as a contributor would (CONTRIBUTING.md): the API, info, the report and --plot pick it up."""
    (tmp_path / "count_allocs_mod.py").write_text(textwrap.dedent(_NEW_ANALYSIS))
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = registry.Entry("count-allocs", "count-allocs", "count_allocs_mod:count_allocs", "veotrace.cli.info",
                           title="Alloc count", section="count_allocs_mod:section", plot="count_allocs_mod:plot",
                           supports="count_allocs_mod:supports")
    monkeypatch.setattr(registry, "ENTRIES", (*registry.ENTRIES, entry))
    monkeypatch.setattr(registry, "BY_NAME", {e.name: e for e in registry.ENTRIES})
    import veotrace

    monkeypatch.setattr(veotrace, "__all__", [*veotrace.__all__, "count_allocs"])
    log = SAMPLES / "alloc_logs" / "alloc.log.1.csv"
    result = veotrace.count_allocs(log)  # the Python API
    assert result.to_dict()["allocs"] > 0
    info = veotrace.info(log).value[0]
    assert info.supports[-1] == "count-allocs"  # what info lists
    from veotrace.reporting.run import build_report

    page = build_report([log])
    ours = [s for s in page.sections if s.title == "Alloc count"]  # the report's section
    assert len(ours) == 1 and ours[0].headline == [("allocs", result.value)] and ours[0].error is None
    png = tmp_path / "c.png"
    assert result.plot(png) > 0 and png.stat().st_size > 0  # --plot
    monkeypatch.delitem(sys.modules, "count_allocs_mod")


def test_entries_are_frozen_and_named_uniquely():
    names = [e.name for e in registry.ENTRIES]
    assert len(names) == len(set(names))
    with pytest.raises(dataclasses.FrozenInstanceError):
        registry.ENTRIES[0].name = "x"  # type: ignore[misc]


def test_policy_registry_is_what_simulate_names_checks_and_builds():
    from veotrace.allocators import POLICIES, policies
    from veotrace.allocators.base import Recorder
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.simulate import check_policies
    from veotrace.cli.simulate import _POLICY_HELP
    from veotrace.errors import UsageError

    assert POLICIES == tuple(p.name for p in policies.REGISTRY)
    assert all(name in _POLICY_HELP for name in POLICIES)
    assert check_policies([]) == list(POLICIES)
    with pytest.raises(UsageError, match="unknown policy 'nope'"):
        check_policies(["nope"])
    for spec in policies.REGISTRY:
        assert spec.summary
        ctx = policies.PolicyContext(0, None, Recorder(), TorchConf(), None, None, None)
        if spec.name.startswith("tiered"):
            continue  # built from the requests' lifetimes (tests/test_simulate.py replays them)
        model = policies.make(spec.name, ctx)
        for method in ("malloc", "free"):
            assert callable(getattr(model, method)), (spec.name, method)
        assert hasattr(model, "c")
