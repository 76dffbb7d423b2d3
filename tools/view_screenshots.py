"""The screenshots of `veotrace view`'s page in docs/_commands/view.md, taken in headless Chromium (tools/cdp.py)
from a real snapshot (constructorsun's, read where it lies and never copied into the repository):

    python3 tools/view_screenshots.py [SNAPSHOT]   # rewrites docs/images/view-*.png

Each is the union of a few elements of the page at 0.7 scale, quantised to 64 colours (Pillow, when installed).
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tools.cdp import Browser  # noqa: E402

SNAPSHOT = ROOT.parent / "shared" / "real_traces" / "constructorsun_memory_snapshot.pickle"
#: name: (the page's elements, script run first, the most height kept)
SHOTS = {
    "view-step-map.png": ([".vt-stepbar", ".vt-maphead", ".vt-map"],
                          "(() => { const l = veotraceView.lanes[0]; l.step(0, l.data.peaks[0].state); })()", 1e9),
    "view-segments-lane.png": ([".vt-chart", ".vt-frag", ".vt-seglane"], "", 1e9),
    "view-allocations.png": ([".vt-allocs"], "veotraceView.lanes[0].pickAllocation(0)", 330),
}


def main() -> None:
    snapshot = Path(sys.argv[1]) if len(sys.argv) > 1 else SNAPSHOT
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "view.html"
        subprocess.run([sys.executable, "-m", "veotrace", "view", str(snapshot), "-o", str(page)], check=True, cwd=ROOT)
        with Browser(chromium, Path(tmp) / "profile", size=(1200, 900)) as b:
            for name, (sels, before, maxh) in SHOTS.items():
                p = b.open(page.as_uri())
                if before:
                    p.evaluate(before)
                p.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                box = p.evaluate("(() => { let l = 1e9, t = 1e9, r = 0, b = 0; for (const s of %s) { "
                                 "const q = document.querySelector(s).getBoundingClientRect(); l = Math.min(l, q.left + scrollX); "
                                 "t = Math.min(t, q.top + scrollY); r = Math.max(r, q.right + scrollX); b = Math.max(b, q.bottom + scrollY); } "
                                 "return [l, t, r - l, b - t]; })()" % json.dumps(sels))
                shot = b.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
                    "x": box[0], "y": box[1], "width": box[2], "height": min(box[3], maxh), "scale": 0.7}}, session=p.session)
                data = base64.b64decode(shot["data"])
                try:
                    from PIL import Image

                    buf = io.BytesIO()
                    Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=64).save(buf, "PNG", optimize=True)
                    data = buf.getvalue()
                except ImportError:
                    pass
                (ROOT / "docs" / "images" / name).write_bytes(data)
                print(f"docs/images/{name}: {len(data):,} bytes")


if __name__ == "__main__":
    main()
