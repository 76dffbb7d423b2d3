"""Draw the documentation's figures with the commands' own `--plot`, from the bundled samples (and, for
the README's picture, a real snapshot when the real traces are beside the repository).

    python3 tools/docs_figures.py            # rewrites docs/images/*.svg
    python3 tools/docs_figures.py --check    # exit 1 when a bundled-sample figure differs from what is committed

The figures are committed (small SVGs: the plot code keeps the extremes of each pixel column, fixed SVG
ids, no dates), so the site builds without drawing anything; the same data gives the same bytes, which
`--check` (and tests/test_docs.py) relies on. The real file is read where it lies and never copied into
the repository: only the picture is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
REAL = Path(os.environ.get("VEOTRACE_REAL_TRACES") or ROOT.parent / "shared" / "real_traces")
SIZE = "1000x560"

#: figure file -> the veotrace arguments that draw it (paths from the repository root; REAL/ = the real traces).
FIGURES: dict[str, list[str]] = {
    # the README's picture: fragmentation over time of a real PyTorch snapshot (public, see SOURCES.md there)
    "real-fragmentation.svg": ["fragmentation", "REAL/cranberrii_memory_snapshot.pickle"],
    "fragmentation.svg": ["fragmentation", "sample_traces/alloc_addr/alloc_addr.csv"],
    "entropy.svg": ["entropy", "sample_traces/alloc_logs/", "--segments", "48,120"],
    "simulate.svg": ["simulate", "sample_traces/simulate/training_log.csv"],
    "tune.svg": ["tune", "sample_traces/simulate/training_log.csv"],
    "findings.svg": ["diagnose", "sample_traces/alloc_logs/", "sample_traces/ncu/l2_details.csv",
                     "sample_traces/frames/frames.csv", "--align", "frames.csv=100h", "--frame-period", "1h"],
}


def draw(name: str, args: list[str], out_dir: Path) -> Path | None:
    """Draw one figure into out_dir; None when it needs the real traces and they are absent."""
    argv = [str(REAL / a[5:]) if a.startswith("REAL/") else a for a in args]
    if any(a.startswith("REAL/") for a in args) and not Path(argv[1]).exists():
        return None
    target = out_dir / name
    proc = subprocess.run([sys.executable, "-m", "veotrace", *argv, "--plot", str(target), "--plot-size", SIZE,
                           "-f", "json", "-o", os.devnull], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"{name}: veotrace {' '.join(argv)} exited {proc.returncode}\n{proc.stderr}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare the bundled-sample figures with docs/images")
    args = parser.parse_args(argv)
    IMAGES.mkdir(parents=True, exist_ok=True)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, fig_args in FIGURES.items():
            if args.check and any(a.startswith("REAL/") for a in fig_args):
                continue
            made = draw(name, fig_args, Path(tmp) if args.check else IMAGES)
            if made is None:
                print(f"{name}: skipped, {REAL} has no {fig_args[1][5:]}")
            elif args.check and made.read_bytes() != (IMAGES / name).read_bytes():
                print(f"{name}: differs from docs/images/{name}: run python3 tools/docs_figures.py")
                bad += 1
            else:
                print(f"{name}: {made.stat().st_size:,} bytes")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
