"""Each command loads what it uses, not every command's machinery (issue 51): not a timed test.

Every command runs once on a small bundled input in a process of its own, as the console script runs it,
and the modules it loaded are checked against what it may load: veotrace's parts (by subpackage; by
module for the CLI, run, reader and analysis layers, where one command's module must not pull in another's)
and the heavy third-party packages (pyarrow.compute, scipy, matplotlib, ...). A new import fails here with
its name: import it where it is used (inside the function, or behind ``registry.resolve``), or, when the
command does need it on every input, add it to the command's list below, saying why.
``python benchmarks/bench_startup.py --modules`` prints the lists, and times the start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
S = ROOT / "sample_traces"
SNAP = str(S / "snapshots" / "memory_snapshot.pickle")
TRAINING = str(S / "simulate" / "training_log.csv")

#: veotrace's layers checked module by module (a CLI, run, reader or analysis module of another command
#: is a finding); the rest by subpackage (``veotrace.attribution``, ``veotrace.allocators``, ...).
BY_MODULE = ("cli", "runs", "sources", "analysis")

#: Third-party modules checked (the rest are typer's, the standard library's, or these packages' own).
HEAVY_EXACT = {"pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.dataset", "pyarrow.csv", "pyarrow.json",
               "pyarrow.feather"}
HEAVY_TOP = {"numpy", "scipy", "matplotlib", "pandas", "polars", "fsspec", "dask", "distributed", "adbc_driver_sqlite",
             "adbc_driver_manager", "rich", "zstandard", "PIL", "ncu_report", "psutil", "sqlite3"}

#: What every command may load: the entry point and the package's plain definitions.
ANY = {"veotrace", "veotrace.cli", "veotrace.cli.app", "veotrace.cli.common", "veotrace.registry", "veotrace.errors",
       "veotrace.defaults", "veotrace.outputs", "veotrace.units", "veotrace.schemas", "veotrace.render",
       "veotrace.runs", "veotrace.runs.common", "veotrace.runs.result", "veotrace.analysis"}
#: Reading a trace: the readers' common layer and the arrays it is made of (pyarrow brings numpy).
READ = {"numpy", "pyarrow", "veotrace.sources", "veotrace.sources.base", "veotrace.sources.detect",
        "veotrace.sources.limits", "veotrace.sources.remote", "veotrace.replay_limits"}
#: An alloc/free log (CSV): its reader and the C scanner.
LOG = READ | {"pyarrow.csv", "veotrace.sources.logs"}
#: A PyTorch snapshot: its reader (and the logs' shared column code, veotrace.sources.logs.extra).
SNAPSHOT = READ | {"veotrace.sources.snapshots", "veotrace.sources.logs", "pyarrow.compute"}
#: A table printed on the terminal.
TEXT = {"rich"}
ENGINE = {"veotrace.engine", "veotrace.cli.engine_opts"}
ENTROPY = {"veotrace.cli.entropy", "veotrace.runs.entropy", "veotrace.analysis.entropy", "veotrace.analysis.groups",
           "veotrace.analysis.ops", "veotrace.analysis.rankstats", "veotrace.analysis.timescale", "veotrace.analysis.trend",
           "veotrace.cli.follow_opts", "veotrace.cli.series_opts"} | ENGINE
FRAG = {"veotrace.frag", "veotrace.analysis.ooms", "veotrace.analysis.timescale"}
REPLAY = {"veotrace.allocators", "veotrace.cli.replay_opts", "veotrace.runs.simulate", "veotrace.attribution",
          "pyarrow.compute"} | FRAG
PLAN = {"veotrace.reporting", "veotrace.findings", "veotrace.analysis.info", "veotrace.analysis.table_summary",
        "veotrace.analysis.frames", "veotrace.analysis.ooms", "veotrace.sources.probe", "veotrace.sources.arrays",
        "veotrace.sources.frames", "pyarrow.compute"}

#: The commands that also read profiler traces ask the run that dispatches them whether the inputs are ones
#: (its readers and analyses load only when they are: ``sources.kineto``, ``analysis.profiler``).
PROFILED = {"veotrace.runs.profiler"}

#: Per command: the arguments (``{small}`` a 1,000-row CSV, ``{tmp}`` a scratch folder) and what it may load.
CASES: dict[str, tuple[list[str], set[str]]] = {
    # the root's eager option: the compiled parts it names are imported, with their packages' __init__
    "--version": (["--version"], {"veotrace.sources", "veotrace.sources.base", "veotrace.sources.detect",
                                  "veotrace.sources.limits", "veotrace.sources.logs", "veotrace.sources.snapshots",
                                  "veotrace.analysis", "veotrace.analysis.entropy", "veotrace.allocators"}),
    # every command's module (their names and help texts), none of their runs' machinery
    "--help": (["--help"], {"veotrace.cli.banks", "veotrace.cli.bursts", "veotrace.cli.categories", "veotrace.cli.coherence", "veotrace.cli.convert",
                            "veotrace.cli.correlate", "veotrace.cli.diagnose", "veotrace.cli.diff", "veotrace.cli.engine_opts",
                            "veotrace.cli.entropy", "veotrace.cli.follow_opts", "veotrace.cli.formats",
                            "veotrace.cli.fragmentation", "veotrace.cli.gate", "veotrace.cli.info", "veotrace.cli.l2",
                            "veotrace.cli.replay_opts", "veotrace.cli.report", "veotrace.cli.series_opts",
                            "veotrace.cli.simulate", "veotrace.cli.sites", "veotrace.cli.tune", "veotrace.cli.view", "veotrace.cli.mcp",
                            # the help texts of --policy and --bins name the policies and the default bins
                            "veotrace.allocators", "veotrace.runs.fragmentation"}),
    # the card's main job: no pyarrow.compute, no attribution, no allocator models
    "entropy": (["entropy", "{small}"], LOG | TEXT | ENTROPY),
    "entropy-snapshot": (["entropy", SNAP], SNAPSHOT | TEXT | ENTROPY),
    "convert": (["convert", "{small}", "-o", "{tmp}/out.parquet"],
                LOG | ENGINE | {"pyarrow.compute", "pyarrow.parquet", "veotrace.cli.convert", "veotrace.runs.convert",
                                "veotrace.sources.convert", "veotrace.sources.snapshots"} | PROFILED),
    "bursts": (["bursts", str(S / "alloc_logs_bursty" / "alloc.log.csv")],
               LOG | TEXT | ENGINE | {"pyarrow.compute", "veotrace.cli.bursts", "veotrace.runs.bursts", "veotrace.analysis.bursts",
                                      "veotrace.analysis.groups", "veotrace.analysis.ops", "veotrace.analysis.timescale",
                                      "veotrace.cli.follow_opts", "veotrace.cli.series_opts"}),
    "fragmentation": (["fragmentation", str(S / "alloc_addr" / "alloc_addr.csv")],
                      LOG | TEXT | ENGINE | FRAG | {"pyarrow.compute", "veotrace.cli.fragmentation", "veotrace.runs.fragmentation",
                                                   "veotrace.cli.follow_opts", "veotrace.cli.series_opts",
                                                   "veotrace.sources.snapshots"} | PROFILED),
    "fragmentation-snapshot": (["fragmentation", SNAP],
                               SNAPSHOT | TEXT | ENGINE | FRAG | {"pyarrow.parquet", "veotrace.cli.fragmentation",
                                                                  "veotrace.runs.fragmentation", "veotrace.cli.follow_opts",
                                                                  "veotrace.cli.series_opts"} | PROFILED),
    # simulate and sites take --jobs/--engine (a profiler run's ranks read on the engine): its options and config
    "simulate": (["simulate", TRAINING],
                 LOG | TEXT | REPLAY | ENGINE | PROFILED | {"veotrace.cli.simulate", "veotrace.cli.series_opts",
                                                    "veotrace.sources.snapshots"}),
    "tune": (["tune", TRAINING],
             LOG | TEXT | REPLAY | ENGINE | PROFILED | {"veotrace.cli.tune", "veotrace.runs.tune", "veotrace.tuning",
                                             "veotrace.sources.snapshots"}),
    "l2-breakpoints": (["l2-breakpoints", str(S / "ncu" / "l2_details.csv"), "--metric", "L2 Hit Rate"],
                       LOG | TEXT | {"pyarrow.compute", "veotrace.cli.l2", "veotrace.runs.l2", "veotrace.analysis.l2",
                                     "veotrace.sources.nsight"}),
    "correlate": (["correlate", str(S / "arrays" / "addrs.npy"), str(S / "arrays" / "epe.npy")],
                  READ | {"scipy", "veotrace.cli.correlate", "veotrace.runs.correlate", "veotrace.analysis.frames",
                   "veotrace.sources.arrays"} | TEXT),
    "coherence": (["coherence", str(S / "frames" / "frames.csv")],
                  READ | TEXT | {"pyarrow.compute", "pyarrow.csv", "veotrace.cli.coherence", "veotrace.runs.coherence",
                                 "veotrace.analysis.frames", "veotrace.sources.arrays", "veotrace.sources.frames"}),
    "sites": (["sites", SNAP],
              SNAPSHOT | TEXT | ENGINE | PROFILED | {"veotrace.cli.sites", "veotrace.runs.sites", "veotrace.attribution",
                                            "veotrace.analysis.timescale",
                                            # its sweep replays segments with fragmentation's rules (frag.state)
                                            "veotrace.frag"}),
    "view": (["view", SNAP, "-o", "{tmp}/view.html"],
             SNAPSHOT | {"veotrace.cli.view", "veotrace.runs.view", "veotrace.viewer", "veotrace.attribution",
                         "veotrace.plot", "veotrace.analysis.timescale",
                         # its maps replay segments with fragmentation's own rules (issue 48: frag.state)
                         "veotrace.frag"}),
    "diff": (["diff", str(S / "alloc_addr" / "alloc_addr.csv"), "{small}"],
             LOG | TEXT | ENGINE | FRAG | PROFILED | {"pyarrow.compute", "scipy", "veotrace.cli.diff", "veotrace.comparison",
                                           "veotrace.gating", "veotrace.runs.bursts", "veotrace.runs.entropy",
                                           "veotrace.runs.fragmentation", "veotrace.runs.sites", "veotrace.analysis.bursts",
                                           "veotrace.analysis.entropy", "veotrace.analysis.groups", "veotrace.analysis.ops",
                                           "veotrace.analysis.rankstats", "veotrace.analysis.trend",
                                           "veotrace.sources.snapshots"}),
    "info": (["info", "{small}"], LOG | TEXT | PLAN - {"veotrace.reporting", "veotrace.findings"}
             | {"veotrace.cli.info", "veotrace.runs.info"}),
    "gate": (["gate", "{small}", "--baseline", "{tmp}/base.json"],
             LOG | TEXT | (ENTROPY - ENGINE - {"veotrace.cli.entropy", "veotrace.runs.entropy", "veotrace.cli.series_opts"})
             | {"veotrace.cli.gate", "veotrace.runs.gate", "veotrace.gating",
                # the baseline is checked field by field with the follow checkpoints' checkers (issue 47)
                "veotrace.live"}),
    # the HTML report draws its figures (matplotlib)
    "report": (["report", "{small}", "-o", "{tmp}/report.html"],
               LOG | PLAN | ENGINE | (ENTROPY - {"veotrace.cli.entropy", "veotrace.cli.follow_opts", "veotrace.cli.series_opts"})
               | {"matplotlib", "PIL", "veotrace.cli.report", "veotrace.plot", "veotrace.runs.bursts", "veotrace.analysis.bursts"}
               | PROFILED),  # asks each source whether it is profiler traces (their lanes' names, clashes)
    "diagnose": (["diagnose", TRAINING], LOG | TEXT | PLAN | PROFILED | {"veotrace.cli.diagnose"}),
    "banks": (["banks", "--stride", "2"], TEXT | {"numpy", "veotrace.cli.banks", "veotrace.runs.banks", "veotrace.analysis",
                                                 "veotrace.analysis.banks"}),
    # one export_memory_timeline file: its reader (sources.kineto) and the categories' own analysis, windowed by
    # the one window rule (analysis.timescale)
    "categories": (["categories", "{timeline}"],
                   READ | TEXT | {"veotrace.cli.categories", "veotrace.runs.categories", "veotrace.analysis.categories",
                                  "veotrace.analysis.timescale", "veotrace.sources.kineto"}),
    "formats": (["formats"], {"veotrace.cli.formats", "veotrace.runs.formats", "veotrace.sources", "veotrace.sources.base",
                              "veotrace.sources.detect", "veotrace.sources.limits"}),
}

#: Runs the CLI as the console script does and writes the names in sys.modules at exit to argv[1].
PROBE = ("import atexit, json, sys\n"
         "out = sys.argv[1]\n"
         "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
         "sys.argv = ['veotrace', *sys.argv[2:]]\n"
         "from veotrace.cli import run\n"
         "run()\n")


def checked(module: str) -> str | None:
    """The name a loaded module is checked under (None: not checked)."""
    parts = module.split(".")
    if parts[0] == "veotrace":
        depth = 3 if len(parts) > 2 and parts[1] in BY_MODULE else 2
        return ".".join(parts[:depth])
    if module in HEAVY_EXACT:
        return module
    return parts[0] if parts[0] in HEAVY_TOP else None


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("budget")
    small = tmp / "small.csv"
    with open(S / "alloc_logs" / "alloc.log.1.csv") as src:
        small.write_text("".join(line for _, line in zip(range(1001), src)))
    env = _env()
    subprocess.run([sys.executable, "-m", "veotrace", "entropy", str(small), "--save-baseline", str(tmp / "base.json"),
                    "-f", "json", "-o", str(tmp / "e.json"), "--no-progress"], check=True, capture_output=True, env=env,
                   timeout=120)
    from veotrace.synth.timeline import memory_timeline

    timeline = memory_timeline(0).write_raw(tmp / "timeline.raw.json.gz")
    return {"small": str(small), "tmp": str(tmp), "timeline": str(timeline)}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("VEOTRACE_ALLOW_PANDAS", None)
    return env


def loaded(args: list[str], subs: dict[str, str], tmp: Path) -> set[str]:
    out = tmp / "modules.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *(a.format(**subs) for a in args)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode in (0, 3), f"{args[0]} failed (exit {proc.returncode}): {proc.stderr[-800:]}"
    return set(json.loads(out.read_text()))


@pytest.mark.parametrize("name", list(CASES))
def test_a_command_loads_only_what_it_may(name, scratch, tmp_path):
    args, allowed = CASES[name]
    modules = loaded(args, scratch, tmp_path)
    names = {c for c in map(checked, modules) if c is not None}
    extra = sorted(names - allowed - ANY)
    assert not extra, (f"`veotrace {' '.join(args)}` loaded {', '.join(extra)}, which it may not load on a small input: "
                       "import it where it is used, or add it to CASES in tests/test_import_budget.py saying why")


def test_the_lists_name_no_module_a_command_no_longer_loads(scratch, tmp_path):
    """Kept tight: the entropy command's list names only what it loads (a list that only grows checks nothing)."""
    args, allowed = CASES["entropy"]
    names = {c for c in map(checked, loaded(args, scratch, tmp_path)) if c is not None}
    assert allowed - names == set(), f"no longer loaded by entropy: {sorted(allowed - names)} (take them off its list)"


def test_import_veotrace_loads_no_analysis():
    """The Python API resolves each function on first use: ``import veotrace`` loads no third-party package."""
    code = "import json, sys, veotrace; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    names = {c for c in map(checked, json.loads(proc.stdout)) if c is not None}
    assert names == {"veotrace"}, names


def test_the_probe_sees_an_import_the_list_forbids(scratch, tmp_path):
    """The check can fail: the entropy run with the attribution package imported first is caught by name."""
    probe = PROBE.replace("from veotrace.cli import run\n", "import veotrace.attribution.rows\nfrom veotrace.cli import run\n")
    out = tmp_path / "m.json"
    subprocess.run([sys.executable, "-c", probe, str(out), "entropy", scratch["small"]], capture_output=True,
                   env=_env(), timeout=120, check=True)
    names = {c for c in map(checked, json.loads(out.read_text())) if c is not None}
    assert "veotrace.attribution" in names - CASES["entropy"][1] - ANY
