"""Comparison layer: two runs side by side (``veotrace diff BEFORE AFTER``).

This package owns what a diff adds to the single-run analyses, and nothing of the analyses
themselves: reading each side once (``sides``: a file, a folder of rotated logs or a Parquet file
from ``convert``, and whether the two sides can be compared), running the single-run commands' own
run functions on what was read (``measure``: entropy, bursts, fragmentation, sites, so every number
is the one those commands print), the headline deltas with their units and run-to-run noise tests
(``deltas``: the gate's circular block bootstrap; the size-class distribution's Jensen-Shannon
distance; allocator settings; sites), the two runs' series on one axis (``series``), the
``--fail-on`` conditions (``conditions``), the whole result (``diff``: each side read and measured once) and the
command's run (``run``: registered in ``veotrace.registry``; it sits above ``veotrace.runs``, whose
functions it calls, as the report does).
"""
