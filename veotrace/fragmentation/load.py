"""Read a trace (alloc/free logs, or one PyTorch snapshot seeded from its final state) and replay it.

The one reading path behind ``veotrace fragmentation`` and the report's fragmentation section.
"""

from __future__ import annotations

from pathlib import Path


def read_and_replay(paths: list[Path], *, options, report, on_progress=None, config=None, notes=None, **kw):
    """Read ``paths`` and replay them: one snapshot (seeded from its final state), or alloc/free logs.

    Args:
        config: an ``engine.EngineConfig``; when parallel, alloc/free logs are replayed in pieces
            (``fragmentation.parallel``). What cannot be (a snapshot, ``--at TIME``, ...) is replayed
            here, with the reason appended to ``notes``.
    """
    from veotrace.errors import TraceFormatError, UsageError
    from veotrace.fragmentation import TORCH_ROUND_BYTES, fragmentation_series, initial_from_tables, seed_from_final
    from veotrace.fragmentation.decode import COLUMNS
    from veotrace.schemas import ALLOC_EVENTS
    from veotrace.sources import iter_alloc_events, read_table, resolve_inputs
    from veotrace.sources.base import ReadReport

    resolved = ReadReport()  # what resolving skipped: reported here, or by the engine's own planning
    inputs = resolve_inputs(paths, "alloc_events", options=options, report=resolved)
    snaps = [p for p, fmt in inputs if fmt.name == "torch-snapshot"]
    notes = [] if notes is None else notes
    if config is not None and config.parallel:
        from veotrace.fragmentation.parallel import MIN_LOCAL_JOBS

        if snaps:
            notes.append("note: a PyTorch snapshot is replayed on one process (its final state seeds the replay)")
        elif kw.get("at_offset_s") is not None:
            notes.append("note: --at TIME is replayed on one process (use --at end with --jobs/--engine)")
        elif config.kind == "local" and config.jobs < MIN_LOCAL_JOBS:
            notes.append(f"note: --jobs {config.jobs}: replayed on one process, whose reader threads run beside the "
                         f"replay (the exact split reads every piece twice and pays from --jobs {MIN_LOCAL_JOBS})")
        else:
            from veotrace.engine import run_fragmentation

            args = {k: v for k, v in kw.items() if k != "at_offset_s"}
            result, why = run_fragmentation(paths, config, options=options, report=report, on_progress=on_progress,
                                            **args)
            if result is not None:
                return result
            notes.append(why)
    report.merge(resolved)
    if not snaps:
        batches = iter_alloc_events(paths, options=options, report=report,
                                    columns=COLUMNS,
                                    on_progress=on_progress, inputs=inputs)
        return fragmentation_series(batches, **kw)
    if len(inputs) > 1:
        raise UsageError("give one PyTorch snapshot at a time (its final state seeds the replay)")
    path = snaps[0]
    if kw.get("latency_col"):
        from veotrace.sources.logs.extra import check_source

        check_source(path, "torch-snapshot", (kw["latency_col"],))
    final = initial_from_tables(read_table([path], "segments", options=options, report=report),
                                read_table([path], "blocks", options=options, report=report))
    try:
        events = read_table([path], "alloc_events", options=options, report=report)
    except TraceFormatError:  # a snapshot with segments but no trace: its state alone, no windows
        events = ALLOC_EVENTS.empty_table()
        report.warnings.append(f"Warning: {path}: no trace entries; only the state at the snapshot is reported")
    initial, events = seed_from_final(events, final) if events.num_rows else (final, events)
    return fragmentation_series(events, initial=initial, round_bytes=TORCH_ROUND_BYTES, **kw)
