"""Plot layer: one static matplotlib figure per analysis result, drawn from the result objects only.

This package owns the pictures: figure size and style, the reduction of long series for drawing
(``reduce.minmax_indices`` keeps each pixel column's extremes), and deterministic PNG/SVG bytes (the
same result gives the same file: fixed SVG hash salt, no dates in metadata, Agg only, no pyplot
state). Each analysis has its module (``entropy``, ``bursts``, ``l2``, ``correlate``, ``coherence``)
with one ``plot_*(result, *, size, ...) -> Figure`` function that draws what the analysis computed and
never computes the analysis itself. matplotlib is imported only when a picture is asked for: nothing
outside this package imports it, and this module imports no plotting code at import time.
"""

from __future__ import annotations

from veotrace.plot.base import (
    DEFAULT_SIZE,
    SUFFIXES,
    check_target,
    figure_bytes,
    parse_size,
    plot_format,
    write_figure,
)

__all__ = ["DEFAULT_SIZE", "SUFFIXES", "check_target", "figure_bytes", "parse_size", "plot_format", "write_figure"]
