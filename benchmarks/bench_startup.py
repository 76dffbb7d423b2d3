"""Start-up benchmark (issue 51): what each command pays before it reads a byte, in one run.

Prints, best of N whole processes (wall and CPU seconds), `python -c pass`, `python -c "import pyarrow"`,
`veotrace --version`, `veotrace --help` and `veotrace entropy` on a 1,000-row CSV, and the ratios the
issue asks for: --version and --help within 3x `python -c pass`, entropy within 2x `import pyarrow`.

    python benchmarks/bench_startup.py --runs 7
    python benchmarks/bench_startup.py --modules              # the modules each command loads on a small input
    python benchmarks/bench_startup.py --modules entropy -v   # every module of one command, not only the heavy

The module lists come from ``sys.modules`` at exit (``-X importtime`` misses modules that
``importlib.import_module`` loads). ``tests/test_import_budget.py`` checks them against what each command
may load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
S = ROOT / "sample_traces"
SNAP = str(S / "snapshots" / "memory_snapshot.pickle")
LOG = str(S / "alloc_logs" / "alloc.log.1.csv")

#: One small input per command (the README's examples), ``{tmp}`` a scratch folder, ``{small}`` a 1,000-row CSV.
COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "entropy": ["entropy", "{small}"],
    "entropy-snapshot": ["entropy", SNAP],
    "convert": ["convert", "{small}", "-o", "{tmp}/out.parquet"],
    "bursts": ["bursts", str(S / "alloc_logs_bursty" / "alloc.log.csv")],
    "fragmentation": ["fragmentation", str(S / "alloc_addr" / "alloc_addr.csv")],
    "fragmentation-snapshot": ["fragmentation", SNAP],
    "simulate": ["simulate", str(S / "simulate" / "training_log.csv")],
    "l2-breakpoints": ["l2-breakpoints", str(S / "ncu" / "l2_details.csv"), "--metric", "L2 Hit Rate"],
    "correlate": ["correlate", str(S / "arrays" / "addrs.npy"), str(S / "arrays" / "epe.npy")],
    "coherence": ["coherence", str(S / "frames" / "frames.csv")],
    "tune": ["tune", str(S / "simulate" / "training_log.csv")],
    "sites": ["sites", SNAP],
    "view": ["view", SNAP, "-o", "{tmp}/view.html"],
    "diff": ["diff", str(S / "alloc_addr" / "alloc_addr.csv"), "{small}"],
    "info": ["info", "{small}"],
    "gate": ["gate", "{small}", "--baseline", "{tmp}/base.json"],
    "report": ["report", "{small}", "-o", "{tmp}/report.html"],
    "diagnose": ["diagnose", str(S / "simulate" / "training_log.csv")],
    "banks": ["banks", "--stride", "2"],
    "formats": ["formats"],
}

#: Runs the CLI as the console script does and writes the module names loaded at exit to argv[1].
_PROBE = ("import atexit, json, sys\n"
          "out = sys.argv[1]\n"
          "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
          "sys.argv = ['veotrace', *sys.argv[2:]]\n"
          "from veotrace.cli import run\n"
          "run()\n")


def small_csv(path: Path, rows: int = 1000) -> Path:
    """The first ``rows`` events of the bundled log (a 1,000-row CSV)."""
    with open(LOG) as src, open(path, "w") as dst:
        for i, line in enumerate(src):
            if i > rows:
                break
            dst.write(line)
    return path


def scratch(tmp: Path) -> dict[str, str]:
    """The ``{small}`` and ``{tmp}`` substitutions, and a baseline for ``gate``."""
    small = small_csv(tmp / "small.csv")
    base = tmp / "base.json"
    if not base.exists():
        subprocess.run([sys.executable, "-m", "veotrace", "entropy", str(small), "--save-baseline", str(base),
                        "-f", "json", "-o", str(tmp / "e.json"), "--no-progress"],
                       check=True, capture_output=True, env=env())
    return {"small": str(small), "tmp": str(tmp)}


def env() -> dict[str, str]:
    """This checkout first on the path (an editable install of another one may be on it)."""
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)  # time an installed package (compiled once, then from __pycache__)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [e.get("PYTHONPATH")])])
    return e


def modules(args: list[str], subs: dict[str, str]) -> tuple[int, list[str], str]:
    """(exit code, sorted module names at exit, stderr) of one command."""
    argv = [a.format(**subs) for a in args]
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        proc = subprocess.run([sys.executable, "-c", _PROBE, out.name, *argv], capture_output=True, text=True,
                              env=env(), timeout=300)
        text = out.read()
    return proc.returncode, (json.loads(text) if text else []), proc.stderr


def timed(cmd: list[str], runs: int) -> tuple[float, float]:
    """Best wall and best CPU seconds (user + system) of ``runs`` processes."""
    walls, cpus = [], []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env())
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return min(walls), min(cpus)


HEAVY = ("numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.dataset", "pyarrow.csv", "scipy",
         "matplotlib", "pandas", "polars", "fsspec", "dask", "distributed", "adbc_driver_sqlite", "rich", "zstandard")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="processes per case; the best is kept")
    ap.add_argument("--modules", nargs="*", metavar="COMMAND",
                    help="print the modules each command (all when none named) loads instead of timing")
    ap.add_argument("-v", "--verbose", action="store_true", help="with --modules: every module, not only veotrace's and the heavy ones")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        subs = scratch(Path(d))
        if a.modules is not None:
            for name in a.modules or COMMANDS:
                code, mods, err = modules(COMMANDS[name], subs)
                shown = mods if a.verbose else [m for m in mods if m.startswith("veotrace") or m in HEAVY]
                print(f"== {name} (exit {code}, {len(mods)} modules, {sum(m.startswith('veotrace') for m in mods)} of veotrace)")
                print("   " + " ".join(shown))
                if code not in (0, 3):
                    print("   stderr: " + err.strip().splitlines()[-1] if err.strip() else "")
            return
        py = [sys.executable]
        cases = {
            "python -c pass": py + ["-c", "pass"],
            "python -c 'import pyarrow'": py + ["-c", "import pyarrow"],
            "veotrace --version": py + ["-m", "veotrace", "--version"],
            "veotrace --help": py + ["-m", "veotrace", "--help"],
            "veotrace entropy 1,000-row CSV": py + ["-m", "veotrace", "entropy", subs["small"], "--no-progress"],
        }
        res = {k: timed(v, a.runs) for k, v in cases.items()}  # the first run of each writes __pycache__
        for k, (w, c) in res.items():
            print(f"{k:34s} {w:6.3f} s wall  {c:6.3f} s CPU")
        base, arrow = res["python -c pass"], res["python -c 'import pyarrow'"]
        for k, ref, goal in (("veotrace --version", base, 3), ("veotrace --help", base, 3),
                             ("veotrace entropy 1,000-row CSV", arrow, 2)):
            w, c = res[k]
            print(f"{k:34s} {w / ref[0]:5.2f}x wall  {c / ref[1]:5.2f}x CPU of {'python -c pass' if ref is base else 'import pyarrow'}"
                  f"  (goal <= {goal}x)")


if __name__ == "__main__":
    main()
