"""The interactive memory timeline (``veotrace view``): one self-contained, offline HTML page per run.

This package owns what the page shows and how it is kept bounded: per input and device a lane of
live bytes over the trace, stacked by site (a PyTorch snapshot with stacks: ``snapshot``) or by size
class and stream (logs, or a snapshot without stacks: ``logs``), the reserved bytes over it, the
external fragmentation per window beneath, the peaks, OOMs, phases and annotations marked; the
multi-resolution summary that keeps the page's size bounded whatever the trace's (``levels``); the
segment and block maps at the instants that matter (``maps``); the data model and its encoding
(``model``); and the page itself with the vendored chart library, uPlot (``page``, ``assets/``).
Reading files is the run layer's (``veotrace.runs.view``, the ``view`` command).
"""
