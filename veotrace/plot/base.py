"""Plot layer: figure creation, house style, and deterministic PNG/SVG bytes of a figure of a given pixel size."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from veotrace.errors import UsageError, VeotraceError

#: Default picture size in pixels (width, height); ``--plot-size WxH`` changes it.
DEFAULT_SIZE = (1200, 675)
#: Pixels per inch of the PNG; SVGs carry the same pixel size in their width/height attributes.
DPI = 100
#: Figure file suffixes and the matplotlib format each one writes.
SUFFIXES = {".png": "png", ".svg": "svg"}
MIN_SIDE, MAX_SIDE = 200, 8000

#: analysis name -> (module, function) drawing its result.

#: rcParams applied while drawing and saving. svg.hashsalt fixes the ids matplotlib writes into SVGs
#: (clip paths are otherwise named from a random salt), so the same result gives the same bytes.
STYLE = {
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
    "svg.hashsalt": "veotrace",
    "svg.fonttype": "none",  # text stays text: smaller files, selectable and searchable in the report
    "path.simplify": True,
}
#: Colours (matplotlib's tab10, named for what they mean here).
DATA, TREND, SEGMENT, ALERT, MUTED = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"


def plot_format(path: Path) -> str:
    """The figure format of ``path`` from its suffix.

    Raises:
        UsageError: the suffix is not one of SUFFIXES.
    """
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        allowed = ", ".join(SUFFIXES)
        raise UsageError(f"--plot {path}: unknown figure suffix {path.suffix or '(none)'!r}; use one of {allowed}")
    return fmt


def parse_size(text: str | None) -> tuple[int, int]:
    """``"1200x675"`` -> (1200, 675); None -> DEFAULT_SIZE.

    Raises:
        UsageError: not WxH, or a side outside [MIN_SIDE, MAX_SIDE] pixels.
    """
    if text is None:
        return DEFAULT_SIZE
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m:
        raise UsageError(f"--plot-size expects WIDTHxHEIGHT in pixels, e.g. 1200x675, got {text!r}")
    w, h = int(m.group(1)), int(m.group(2))
    if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
        raise UsageError(f"--plot-size sides must be between {MIN_SIDE} and {MAX_SIDE} pixels, got {w}x{h}")
    return w, h


def new_figure(size: tuple[int, int], nrows: int = 1, ncols: int = 1, **subplot_kw: Any):
    """A pyplot-free Figure of ``size`` pixels (Agg canvas) and its axes array (squeezed like subplots)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=True, **subplot_kw)
    return fig, axes


def draw(kind: str, result: Any, *, size: tuple[int, int] = DEFAULT_SIZE, **data: Any):
    """The Figure of analysis ``kind`` for ``result`` (extra ``data``: e.g. the correlate pairs)."""
    import matplotlib

    from veotrace import registry

    plotter = registry.resolve(registry.entry(kind).plot)
    with matplotlib.rc_context(STYLE):
        return _escaped(plotter(result, size=size, **data))


def _escaped(fig):
    """Every text of ``fig`` as a font can draw it (issue 47): a file name that is not UTF-8 or a frame string
    with a lone surrogate made matplotlib's text layout fail (``set_text(): incompatible function
    arguments``), a control character drew as a box. Escaped with ``errors.printable``."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    from veotrace.errors import printable

    for t in fig.findobj(Text):
        text = t.get_text()
        if isinstance(text, str) and text:
            shown = printable(text)
            if shown != text:
                t.set_text(shown)
    for ax in fig.axes:  # tick labels are made at draw time from the axis' formatter
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, FixedFormatter):
                fmt.seq = [printable(x) if isinstance(x, str) else x for x in fmt.seq]
            elif isinstance(fmt, FuncFormatter):  # set_ticks(..., labels) in matplotlib 3.10+
                axis.set_major_formatter(FuncFormatter(lambda x, pos, f=fmt.func: printable(f(x, pos))))
    return fig


def figure_bytes(kind: str, result: Any, fmt: str, *, size: tuple[int, int] = DEFAULT_SIZE, **data: Any) -> bytes:
    """PNG or SVG bytes of the figure of ``kind``; identical for identical results."""
    import matplotlib

    fig = draw(kind, result, size=size, **data)
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE):
        if fmt == "svg":
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        else:
            fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    out = buf.getvalue()
    return _svg_pixels(out, size) if fmt == "svg" else out


def _svg_pixels(svg: bytes, size: tuple[int, int]) -> bytes:
    """Give the root <svg> the pixel size (matplotlib writes points at 72/inch; the viewBox keeps the drawing)."""
    return re.sub(rb'(<svg[^>]*?)width="[\d.]+pt" height="[\d.]+pt"',
                  lambda m: m.group(1) + b'width="%dpx" height="%dpx"' % size, svg, count=1)


def write_figure(path: Path, kind: str, result: Any, *, size: tuple[int, int] = DEFAULT_SIZE, inputs: Any = (),
                 **data: Any) -> int:
    """Draw ``kind`` for ``result`` into ``path`` (format from the suffix); returns the bytes written.

    Raises:
        UsageError: unknown suffix. VeotraceError: the file cannot be written.
    """
    fmt = plot_format(path)
    payload = figure_bytes(kind, result, fmt, size=size, **data)
    from veotrace.outputs import write_bytes

    write_bytes(payload, path, inputs=inputs)
    return len(payload)


def check_target(path: Path) -> str:
    """Refuse, before any work, a figure path with an unknown suffix or in a place that cannot be written.

    Returns the figure format.

    Raises:
        UsageError: unknown suffix. VeotraceError: the folder is missing, not a folder, or not writable.
    """
    fmt = plot_format(path)
    check_writable(path, "figure", "a file name ending in " + " or ".join(SUFFIXES))
    return fmt


def check_writable(path: Path, what: str, example: str) -> None:
    """Raise VeotraceError when ``path`` is a folder, or its folder is missing or not writable (UsageError: a URL)."""
    import os

    from veotrace.outputs import refuse_url

    refuse_url(path)

    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise VeotraceError(f"is a folder; give {example}", path=path)
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise VeotraceError(f"cannot write the {what}: {folder} {why}", path=path, hint="Give a path in an existing folder")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise VeotraceError(f"cannot write the {what}: permission denied", path=path, hint="Choose a writable place")
