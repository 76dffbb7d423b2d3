"""Report layer: one self-contained, offline HTML file of every analysis that applies to the inputs.

This package owns ``veotrace report``: which analyses apply (``plan``: what ``info`` says each file
supports, files grouped as the CLI would read them), running them with their defaults through the
run layer and drawing their figures (``run`` and ``sections``: each section calls its command's run
function of ``veotrace.runs``, found in ``veotrace.registry``; ``run.report`` is the command's own
run), and the HTML page (``html``: summary numbers, per analysis its figure as inline SVG,
its key table and its parameters, the veotrace version; no script, no CDN, no network request; light
and dark colour schemes and print styles). Long inputs stay small because the figures keep only
each pixel column's extremes (``veotrace.plot.reduce``).
"""

from __future__ import annotations

from veotrace.reporting.html import render_html
from veotrace.reporting.run import Report, Section, build_report, write_report

__all__ = ["Report", "Section", "build_report", "render_html", "write_report"]
