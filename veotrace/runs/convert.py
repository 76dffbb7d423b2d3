"""Run `convert`: write alloc/free events once as Parquet (alloc_events/1); snapshots also give segments and blocks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class ConvertRun(RunResult):
    """``convert``'s result: ``value`` maps each table written to (path, rows)."""

    command = "convert"

    def to_dict(self) -> dict:
        return {"written": {kind: {"path": str(path), "rows": rows} for kind, (path, rows) in self.value.items()}}

    def headline(self) -> list[tuple[str, Any]]:
        return [(kind, f"{rows:,} rows in {path}") for kind, (path, rows) in self.value.items()]

    def render(self, console, *, max_rows: int = 40) -> None:
        for line in self.closing:
            console.print(line)


def table_path(output: Path, kind: str) -> Path:
    """Where the ``kind`` table goes beside ``output``: out.parquet -> out.segments.parquet."""
    stem = output.name[: -len(".parquet")] if output.name.endswith(".parquet") else output.name
    return output.with_name(f"{stem}.{kind}.parquet")


def convert(paths, output, *, time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
            engine: str = "local", jobs: int = 1, scheduler: str | None = None, workers: int | None = None,
            on_progress: common.Progress = None) -> ConvertRun:
    """Convert logs, snapshots or exports to one Parquet table that every command accepts.

    Args:
        output: the Parquet file to write (snapshots: also OUT.segments.parquet, OUT.blocks.parquet and OUT.keys.parquet (sites and phases)).

    Returns:
        The tables written; ``closing`` holds the line the command prints ("wrote ...").
    """
    from veotrace.outputs import output_file, refuse_url
    from veotrace.render.export import write_table
    from veotrace.sources import ReadReport, read_table, resolve_inputs
    from veotrace.sources.convert import write_parquet

    paths = common.as_paths(paths)
    output = Path(output)
    refuse_url(output)
    options, report = common.reading(time_unit, skip_bad_rows, format_hint)
    config = common.engine(engine, jobs, scheduler, workers)
    inputs = common.input_files(paths)
    notes: list[str] = []
    from veotrace.runs.profiler import convert_traces, kineto_inputs

    traces = kineto_inputs(paths, options, report)
    written = convert_traces(traces, output, options, report, config, inputs) if traces else None
    if written is not None:  # profiler traces: their totals, ops and checks go with the events
        line = "wrote " + ", ".join(f"{rows:,} {'events' if kind == 'alloc_events' else 'rows'} to {path}"
                                    for kind, (path, rows) in written.items())
        return ConvertRun(written, list(report.messages()), inputs, closing=[line])
    if config.parallel:  # each file converted by a task into a part, the parts then joined in order
        if not any("segments" in fmt.provides
                   for _, fmt in resolve_inputs(paths, "alloc_events", options=options, report=ReadReport())):
            from veotrace.engine import run_convert

            rows = run_convert(paths, output, config, options=options, report=report, on_progress=on_progress,
                               inputs=inputs)
            return ConvertRun({"alloc_events": (output, rows)}, list(report.messages()), inputs,
                              closing=[f"wrote {rows:,} events to {output}"])
        notes.append("a PyTorch snapshot is converted on one process (its segments, blocks and settings go with it)")
    resolved = resolve_inputs(paths, "alloc_events", options=options, report=report)
    snapshots = [path for path, fmt in resolved if "segments" in fmt.provides]
    meta = None
    if len(resolved) == 1 and snapshots:  # read back as this snapshot (sources.snapshots.converted)
        from veotrace.allocators.releases import snapshot_release_frames
        from veotrace.sources.snapshots.converted import metadata
        from veotrace.sources.snapshots.torch_snapshot import oom_free_bytes, snapshot_info

        info = snapshot_info(snapshots[0])
        meta = metadata(snapshots[0], table_path(output, "segments"), table_path(output, "blocks"),
                        info.allocator_settings, oom_free_bytes(snapshots[0]), table_path(output, "keys"),
                        releases=info.releases, release_frames=snapshot_release_frames(snapshots[0]))
    with output_file(output, "wb", inputs=inputs) as sink:
        rows = write_parquet(_events(resolved, options, report, notes, on_progress), sink, metadata=meta)
    messages = list(report.messages())
    written = {"alloc_events": (output, rows)}
    for kind in ("segments", "blocks") if snapshots else ():
        table = read_table(snapshots, kind, options=options, report=report)
        write_table(table, "parquet", table_path(output, kind), inputs=inputs)
        written[kind] = (table_path(output, kind), table.num_rows)
    if meta is not None and rows:  # the sites and phases of --by site|phase, for the Parquet route
        table = _keys(snapshots[0])
        write_table(table, "parquet", table_path(output, "keys"), inputs=inputs)
        written["keys"] = (table_path(output, "keys"), table.num_rows)
    messages += [f"Note: {note}" for note in notes]
    line = "wrote " + ", ".join(f"{rows:,} {'events' if kind == 'alloc_events' else kind} to {path}"
                                for kind, (path, rows) in written.items())
    return ConvertRun(written, messages, inputs, closing=[line])


def _keys(snapshot: Path):
    """Each event's site and phase (``attribution.rows``, the default site rule) by ``seq``."""
    import numpy as np
    import pyarrow as pa

    from veotrace.attribution.rows import KEYED, snapshot_row_keys

    cols = {"seq": None}
    for by in KEYED:
        keys, names = snapshot_row_keys(snapshot, by)
        texts = pa.array([names[k] for k in range(len(names))], pa.string())
        cols[by] = pa.DictionaryArray.from_arrays(pa.array(keys.astype(np.int32)), texts)
        cols["seq"] = pa.array(np.arange(keys.size, dtype=np.int64))
    return pa.table(cols)


def _events(inputs, options, report, notes, on_progress):
    """Events of every input in order; a snapshot without trace entries adds a note instead."""
    from veotrace.sources import iter_alloc_events
    from veotrace.sources.snapshots.torch_snapshot import NoTraceEvents

    for path, _fmt in inputs:
        try:
            yield from iter_alloc_events([path], options=options, report=report, on_progress=on_progress)
        except NoTraceEvents as exc:
            notes.append(f"{exc.path}: {exc.message}")
