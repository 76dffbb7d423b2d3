"""Read a trace for the allocator models: its events, and for one PyTorch snapshot its settings and seed.

The one reading path behind ``veotrace simulate`` and the report's simulate section.
"""

from __future__ import annotations

from pathlib import Path


def load_trace(paths: list[Path], options, report, conf_text: str | None, *, whole: bool = True):
    """The events table, and for one PyTorch snapshot its settings-derived conf and seed (else None).

    ``whole=False``: for anything but a snapshot, the events come as ``open_batches(first)``, which reads
    the source's batches anew at each call (see :class:`veotrace.allocators.stream.RequestStream`), so a
    long log is never held whole; only the first read reports to ``report``. A snapshot's table is always whole.
    """
    import pyarrow as pa

    from veotrace.allocators import conf as cf
    from veotrace.allocators.seed import rebuild
    from veotrace.sources import ReadReport, iter_alloc_events, resolve_inputs
    from veotrace.sources.snapshots import torch_snapshot as ts

    inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    snapshot = len(inputs) == 1 and inputs[0][1].name == "torch-snapshot"
    def open_batches(first: bool):
        return iter_alloc_events(paths, options=options, report=report if first else ReadReport(), inputs=inputs)

    table = pa.Table.from_batches(list(open_batches(True))) if whole or snapshot else open_batches
    snap_conf = seed = None
    if snapshot:
        path = inputs[0][0]
        snap = ts.load_snapshot(path)
        snap_conf = cf.from_settings(snap.allocator_settings) if snap.allocator_settings else cf.TorchConf(
            source="PyTorch defaults (the snapshot has no allocator_settings)")
        seed = rebuild(table, ts.read_segments(path), ts.read_blocks(path))
    conf = cf.parse_conf(conf_text) if conf_text is not None else (snap_conf or cf.TorchConf())
    return table, conf, snap_conf, seed
