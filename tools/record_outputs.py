"""Record every command's output on the sample traces and the real files, and compare two recordings.

A refactoring must not change what a user sees. This script runs every command of the CLI on every
input it accepts (what ``veotrace info`` says each file supports, plus option variants, the engines,
``convert`` and the commands run again on its Parquet file, ``gate`` against baselines, ``report``)
and writes each run's exit code, stdout (JSON, terminal table, CSV, HTML) and stderr into one file
per case. Values that differ between two runs of the same code (timings, temporary paths) are
normalised, so that two recordings of unchanged code compare equal byte for byte.

    python3 tools/record_outputs.py record /tmp/before      # before a change
    python3 tools/record_outputs.py record /tmp/after       # after it
    python3 tools/record_outputs.py compare /tmp/before /tmp/after

``compare`` exits 1 and lists the cases that differ (a unified diff of the first few). Cases are
skipped when ``../shared/real_traces`` is absent. ``--jobs`` runs cases in parallel (default 2).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
REAL = REPO.parent / "shared" / "real_traces"
#: JSON keys whose values are wall-clock measurements, not results.
TIMING_KEYS = re.compile(r"^(elapsed.*|.*_seconds|seconds|wall_s|cpu_s|took_s|duration_wall_s|generated(_at)?)$")


def _inputs() -> list[Path]:
    """Every sample file and folder of rotated logs, then every real file."""
    found = [p for p in sorted(SAMPLES.rglob("*")) if p.is_file() and p.suffix not in (".py",)]
    found += [SAMPLES / d for d in ("alloc_logs", "alloc_logs_bursty")]
    if REAL.is_dir():
        found += [p for p in sorted(REAL.iterdir()) if p.is_file() and p.name != "SOURCES.md"]
    return found


def _name(path: Path) -> str:
    rel = os.path.relpath(path, REPO if REPO in path.parents else REPO.parent)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", rel)


def _run(args: list[str], env_extra: dict | None = None, cwd: Path | None = None) -> dict:
    env = {**os.environ, "COLUMNS": "140", "NO_COLOR": "1", "TERM": "dumb", **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "veotrace", *args], capture_output=True, text=True, env=env,
                          cwd=cwd or REPO, timeout=1800)
    return {"args": args, "code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _supports(path: Path) -> list[str]:
    out = _run(["info", "-f", "json", str(path)])
    if out["code"] != 0:
        return []
    cmds: list[str] = []
    for f in json.loads(out["stdout"])["files"]:
        for c in f.get("supports") or []:
            if c not in cmds:
                cmds.append(c)
    return cmds


def _cases(tmp: Path) -> list[tuple[str, list[list[str]]]]:
    """(case name, the command lines to run in order); the last line's output is recorded, with all of them."""
    cases: list[tuple[str, list[list[str]]]] = [("formats", [["formats", "-f", "json"]]),
                                                ("formats.table", [["formats"]])]
    for path in _inputs():
        p, n = str(path), _name(path)
        cases.append((f"info.{n}", [["info", "-f", "json", p]]))
        cases.append((f"info.table.{n}", [["info", p]]))
        for cmd in _supports(path):
            if cmd == "convert":
                out = str(tmp / f"{n}.parquet")
                cases.append((f"convert.{n}", [["convert", p, "-o", out, "--no-progress"]]))
                for c2 in ("info", "entropy", "bursts", "fragmentation", "simulate"):
                    cases.append((f"{c2}.parquet.{n}", [["convert", p, "-o", out + f".{c2}.parquet", "--no-progress"],
                                                         [c2, out + f".{c2}.parquet", "-f", "json"]]))
                continue
            if cmd == "correlate":
                continue  # pairs below
            words = ["200" if w == "N" else w for w in re.sub(r"\(.*?\)", "", cmd).split()]
            cases.append((f"{'_'.join(words)}.{n}", [[*words, p, "-f", "json"]]))
            cases.append((f"{'_'.join(words)}.table.{n}", [[*words, p]]))
            if words[0] in ("entropy", "bursts"):
                cases.append((f"{words[0]}.csv.{n}", [[*words, p, "-f", "csv"]]))
                cases.append((f"{words[0]}.jobs2.{n}", [[*words, p, "-f", "json", "--jobs", "2"]]))
            if words[0] == "fragmentation":
                cases.append((f"fragmentation.at.{n}", [["fragmentation", p, "--at", "1s", "-f", "json"]]))
                cases.append((f"fragmentation.at.table.{n}", [["fragmentation", p, "--at", "1s"]]))
                cases.append((f"fragmentation.csv.{n}", [["fragmentation", p, "-f", "csv"]]))
            if words[0] == "entropy":
                cases.append((f"entropy.window.{n}", [["entropy", p, "--window", "1s", "--step", "500ms", "-f", "json"]]))
            if words[0] == "simulate":
                cases.append((f"simulate.csv.{n}", [["simulate", p, "-f", "csv"]]))
    a = SAMPLES / "arrays"
    for addrs, epe, extra in (("addrs.npy", "epe.npy", []), ("addrs0.npy", "epe0.npy", []),
                              ("addrs.npy", "epe_maps.npy", []), ("addrs.npy", "epe.npy", ["--max-lag", "3"]),
                              ("addrs.npy", "epe.npy", ["--baseline", str(a / "addrs0.npy"), str(a / "epe0.npy")])):
        cases.append((f"correlate.{addrs}.{epe}.{len(extra)}", [["correlate", str(a / addrs), str(a / epe), "-f", "json", *extra]]))
    cases.append(("correlate.table", [["correlate", str(a / "addrs.npy"), str(a / "epe.npy")]]))
    logs = str(SAMPLES / "alloc_logs")
    cases.append(("fragmentation.jobs4.alloc_logs", [["fragmentation", logs, "-f", "json", "--jobs", "4"]]))
    cases.append(("fragmentation.alloc_logs", [["fragmentation", logs, "-f", "json"]]))
    cases.append(("convert.jobs2.alloc_logs", [["convert", logs, "-o", str(tmp / "j2.parquet"), "--jobs", "2", "--no-progress"],
                                               ["entropy", str(tmp / "j2.parquet"), "-f", "json"]]))
    sim = str(SAMPLES / "simulate" / "training_log.csv")
    cases.append(("simulate.policies", [["simulate", sim, "--policy", "torch", "--policy", "bestfit", "-f", "json"]]))
    cases.append(("simulate.conf", [["simulate", sim, "--conf", "expandable_segments:True", "-f", "json"]]))
    cases.append(("simulate.capacity", [["simulate", sim, "--capacity", "1GiB", "-f", "json"]]))
    base = tmp / "baselines"
    save = [["entropy", logs, "--save-baseline", str(base / f"b{i}.json"), "-f", "json"] for i in range(3)]
    cases.append(("gate.baseline", [*save, ["gate", logs, "--baseline", str(base / "b0.json"), "-f", "json"]]))
    cases.append(("gate.history", [*save, ["gate", logs, "--history", str(base), "-f", "json"]]))
    cases.append(("gate.table", [*save, ["gate", logs, "--baseline", str(base / "b0.json")]]))
    cases.append(("gate.bursty", [*save, ["gate", str(SAMPLES / "alloc_logs_bursty"), "--baseline", str(base / "b0.json"), "-f", "json"]]))
    cases.append(("banks", [["banks", "-f", "json"]]))
    cases.append(("banks.stride", [["banks", "--stride", "2", "-f", "json"]]))
    cases.append(("banks.table", [["banks", "--stride", "33"]]))
    cases.append(("report.samples", [["report", str(SAMPLES), "-o", str(tmp / "report.html")]]))
    if REAL.is_dir():
        cases.append(("report.real", [["report", str(REAL), "-o", str(tmp / "report_real.html")]]))
    return cases


def _normalise(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<TMP>").replace(str(REPO), "<REPO>")  # the same in any checkout
    text = re.sub(r"/tmp/veorec-[A-Za-z0-9_]+", "<TMP>", text)  # recordings made before the case folders
    text = re.sub(r"\d+(\.\d+)? ?(s|ms) elapsed", "<T> elapsed", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?( ?UTC|Z)?", "<DATE>", text)  # when a baseline was saved
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return json.dumps(_strip(data), indent=1, sort_keys=False) + "\n"


def _strip(value):
    if isinstance(value, dict):
        return {k: ("<T>" if TIMING_KEYS.match(str(k)) else _strip(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _file_digest(path: Path) -> str:
    """What a written file holds: a Parquet file's schema, metadata and rows; other files' text."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        text = json.dumps(t.to_pylist(), default=str).replace(str(REPO), "<REPO>")  # source_file names the input
        rows = hashlib.sha256(text.encode()).hexdigest()
        meta = {k.decode(): v.decode(errors="replace")[:2000] for k, v in (t.schema.metadata or {}).items()}
        return json.dumps({"schema": str(t.schema.remove_metadata()), "metadata": meta, "rows": t.num_rows,
                           "rows_sha256": rows}, indent=1)
    text = path.read_text(errors="replace")
    text = re.sub(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+", "<IMG>", text)
    return text


def record(out: Path, jobs: int, only: str | None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="veorec-"))
    try:
        cases = [c for c in _cases(tmp) if only is None or re.search(only, c[0])]

        def one(case):
            name, lines = case
            case_tmp = tmp / name
            case_tmp.mkdir(parents=True, exist_ok=True)
            lines = [[a.replace(str(tmp), str(case_tmp)) for a in line] for line in lines]
            for d in {Path(a).parent for line in lines for a in line if a.startswith(str(case_tmp))}:
                d.mkdir(parents=True, exist_ok=True)
            parts = []
            for line in lines:
                r = _run(line)
                parts.append(f"$ veotrace {_normalise(' '.join(line), case_tmp)}\nexit {r['code']}\n--- stdout\n"
                             f"{_normalise(r['stdout'], case_tmp)}--- stderr\n{_normalise(r['stderr'], case_tmp)}")
            for written in sorted(case_tmp.rglob("*")):
                if written.is_file() and not written.name.endswith(".parts"):
                    parts.append(f"--- file {written.relative_to(case_tmp)}\n{_normalise(_file_digest(written), case_tmp)}")
            (out / f"{name}.txt").write_text("\n".join(parts))
            return name

        with ThreadPoolExecutor(jobs) as pool:
            for i, name in enumerate(pool.map(one, cases), 1):
                print(f"[{i}/{len(cases)}] {name}", file=sys.stderr)
        print(f"{len(cases)} cases recorded in {out}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.glob("*.txt")} | {p.name for p in b.glob("*.txt")})
    differ = []
    for name in names:
        ta = (a / name).read_text() if (a / name).exists() else "<missing>\n"
        tb = (b / name).read_text() if (b / name).exists() else "<missing>\n"
        ta, tb = _normalise(ta, a), _normalise(tb, b)
        if ta != tb:
            differ.append(name)
            if len(differ) <= 5:
                sys.stdout.writelines(difflib.unified_diff(ta.splitlines(True), tb.splitlines(True), f"{a}/{name}",
                                                           f"{b}/{name}", n=2))
    print(f"{len(names) - len(differ)} of {len(names)} cases identical" + (f"; differ: {', '.join(differ)}" if differ else ""))
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--only", help="regular expression: record only the cases whose name matches")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    return record(args.out, args.jobs, args.only) if args.what == "record" else compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
