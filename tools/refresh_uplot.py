"""Refresh the vendored uPlot (veotrace/viewer/assets/) from the npm registry: its minified IIFE build, its
CSS and its licence, at the version given (default: the one the page names), with npm's own client.

    python3 tools/refresh_uplot.py            # the pinned version again (checks the files match)
    python3 tools/refresh_uplot.py 1.6.33     # another version; then update page.py's UPLOT_VERSION

Nothing is fetched at install or run time: the files are committed, and the page holds them inline.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "veotrace" / "view" / "assets"
FILES = {"package/dist/uPlot.iife.min.js": "uPlot.iife.min.js", "package/dist/uPlot.min.css": "uPlot.min.css",
         "package/LICENSE": "uPlot.LICENSE"}


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ASSETS.parent.parent.parent))
    from veotrace.viewer.page import UPLOT_VERSION

    version = argv[0] if argv else UPLOT_VERSION
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"uplot@{version}", "--silent"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        (tgz,) = Path(tmp).glob("uplot-*.tgz")
        with tarfile.open(tgz) as tar:
            for member, name in FILES.items():
                src = tar.extractfile(member)
                with open(ASSETS / name, "wb") as out:
                    shutil.copyfileobj(src, out)
                print(f"{name}: {(ASSETS / name).stat().st_size:,} bytes")
    print(f"uPlot {version} in {ASSETS}; 'git diff --stat' shows what changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
