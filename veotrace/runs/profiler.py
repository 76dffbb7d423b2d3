"""The runs' side of profiler traces (``sources.kineto``): reading one trace or a folder of one trace per rank
as one run with its ops, ``sites --by op|frame|module|kernel`` on it, and the recorded totals that
``fragmentation`` shows beside its replay. The rules live in ``analysis.profiler``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace.runs import common
from veotrace.runs.result import RunResult

SITES_BY = ("op", "frame", "module", "kernel")


def kineto_inputs(paths, options, report) -> list:
    """The profiler traces among the inputs (a folder of ranks: each trace), or [] when they are something else."""
    from veotrace.errors import TraceFormatError
    from veotrace.sources import resolve_inputs

    try:
        inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    except TraceFormatError:
        return []
    if all(f.name == "kineto" for _, f in inputs):
        return [p for p, _ in inputs]
    if len(inputs) == 1 and inputs[0][1].name == "parquet":  # what ``convert`` wrote from traces: each trace
        from veotrace.sources.kineto.converted import sides_of

        return sides_of(inputs[0][0]) or []
    return []


def read_run(files: list, options, report, *, context: bool, config=None):
    """The memory events of every trace of the run as one ``KINETO_MEMORY`` table (ops ids made unique across
    files) and, with ``context``, the one ``KINETO_OPS`` table; with ``config`` parallel (``--jobs``, Dask) the
    ranks are read on its workers (``engine.ranks``) and joined here in file order: the same tables."""
    from veotrace.engine.ranks import read_ranks

    return join_reads(read_ranks(files, options, report, context=context, config=config), context=context)


def join_reads(reads: list, *, context: bool):
    """:func:`read_run`'s tables from the ``MemoryRead`` of each trace, in file order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables, ops, offset = [], [], 0
    for read in reads:
        t = read.table
        if context and read.ops is not None:
            for name in ("op_id", "frame_id", "kernel_id", "module_id"):
                i = t.schema.get_field_index(name)
                t = t.set_column(i, name, pc.add(t.column(name), offset))
            ops.append(read.ops.set_column(0, "id", pc.add(read.ops.column("id"), offset)))
            offset += read.ops.num_rows
        tables.append(t)
    table = pa.concat_tables(tables, promote_options="permissive").unify_dictionaries() if tables else None
    return table, (pa.concat_tables(ops, promote_options="permissive").unify_dictionaries() if ops else None)


@dataclass
class ProfilerSitesRun(RunResult):
    """``sites`` on a profiler trace: ``value`` is {"by", "devices": who holds the peak, "reserved_growth":
    which op grew reserved memory, "finding"}."""

    command = "sites"

    def to_dict(self) -> dict:
        return self.value

    def tables(self) -> dict[str, Any]:
        import pyarrow as pa

        rows = [{"device": d, "at": where, "name": r["name"], "bytes": r["bytes"], "blocks": r["blocks"], "share": r["share"]}
                for d, v in self.value["devices"].items() for where in ("at_peak", "at_end") for r in v[where]]
        growth = [{"device": d, "op": r["op"], "bytes": r["bytes"], "rises": r["rises"],
                   "kernel": next(iter(r["kernels"]), None)}
                  for d, g in self.value["reserved_growth"].items() for r in g["by_op"]]
        cached = [{"device": d, "op": r["op"], "byte_seconds": r["byte_seconds"]}
                  for d, g in self.value["reserved_growth"].items() for r in g["cached_free_after"]]
        return {"sites": pa.Table.from_pylist(rows, schema=pa.schema([
                    ("device", pa.string()), ("at", pa.string()), ("name", pa.string()), ("bytes", pa.int64()),
                    ("blocks", pa.int64()), ("share", pa.float64())])),
                "reserved_growth": pa.Table.from_pylist(growth, schema=pa.schema([
                    ("device", pa.string()), ("op", pa.string()), ("bytes", pa.int64()), ("rises", pa.int64()),
                    ("kernel", pa.string())])),
                "cached_free_after": pa.Table.from_pylist(cached, schema=pa.schema([
                    ("device", pa.string()), ("op", pa.string()), ("byte_seconds", pa.float64())]))}

    def headline(self) -> list[tuple[str, Any]]:
        out = []
        for d, v in self.value["devices"].items():
            if v["at_peak"]:
                top = v["at_peak"][0]
                out.append((f"{d}: top {self.value['by']} at peak", f"{top['name']} ({top['bytes']:,} B of {v['peak_bytes']:,})"))
        if self.value.get("finding"):
            out.append(("grew reserved memory most", self.value["finding"]["text"]))
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.profiler import render_profiler_sites

        render_profiler_sites(console, self.value, max_rows=max_rows)


def profiler_sites(paths, files: list, *, by: str = "op", options=None, report=None, config=None) -> ProfilerSitesRun:
    """Who holds each GPU's peak of live bytes, by the op (``cpu_op``), Python frame, ``nn.Module`` or GPU
    kernel enclosing each allocation; which ops grew reserved memory; those after which memory stayed cached."""
    from veotrace.analysis.profiler import growth_finding, peak_holders, reserved_growth
    from veotrace.errors import UsageError

    if by not in SITES_BY:
        raise UsageError(f"--by {by!r}: a profiler trace's sites are by one of {', '.join(SITES_BY)}")
    table, ops = read_run(files, options, report, context=True, config=config)
    growth = reserved_growth(table, ops)
    value = {"by": by, "devices": peak_holders(table, ops, by), "reserved_growth": growth,
             "finding": growth_finding(growth)}
    notes = report.messages()
    if by == "module" and not any(r["name"] != "(no enclosing module)" for v in value["devices"].values()
                                  for r in v["at_peak"] if r["name"]):
        notes.append("Note: no nn.Module frames enclose the allocations: record with with_stack=True "
                     "(and with_modules=True) for --by module")
    return ProfilerSitesRun(value, notes, common.input_files(paths))


def recorded_totals(paths, options, report, *, config=None) -> tuple[dict, dict] | None:
    """For ``fragmentation`` on profiler traces: each device's recorded peaks of live and reserved bytes with
    what cannot be known without segment events, and each device's totals as step functions (keyed by the
    common table's ``device``) for the replay's windows (``analysis.profiler.with_recorded``); None when the
    inputs are something else or record no totals (the 2021 format)."""
    files = kineto_inputs(paths, options, report)
    if not files:
        return None
    import numpy as np

    from veotrace.analysis.profiler import RECORDED_COLUMNS_NOTE, SEGMENTS_NOTE, lane_steps, totals_series
    from veotrace.engine.ranks import read_ranks
    from veotrace.schemas.kineto import CPU
    from veotrace.sources.kineto.trace import lane

    parts: dict = {}
    reads = read_ranks(files, options, report, config=config)  # in file order, as the replay read them
    for read in reads:
        t = read.table
        if not t.num_rows or t.column("total_allocated_bytes").null_count or t.column("total_reserved_bytes").null_count:
            continue
        gpu = t.column("device_type").to_numpy() != CPU
        devs = lane(read, t.column("device_id").to_numpy())
        cols = [t.column(c).to_numpy() for c in ("ts_ns", "total_allocated_bytes", "total_reserved_bytes", "bytes")]
        for d in np.unique(devs[gpu]).tolist():
            m = gpu & (devs == d)
            # one GPU (the common case, and a long trace's): the table's own columns, no copy
            parts.setdefault(int(d), []).append(cols if m.all() else [c[m] for c in cols])
        del gpu, devs
    steps = {}
    for d, chunks in parts.items():
        ts, ta, tr, nb = (chunks[0][k] if len(chunks) == 1 else np.concatenate([c[k] for c in chunks]) for k in range(4))
        if ts.size > 1 and (ts[1:] < ts[:-1]).any():  # ranks sharing a device id (one node): one time line
            order = np.argsort(ts, kind="stable")
            ts, ta, tr, nb = ts[order], ta[order], tr[order], nb[order]
        steps[d] = lane_steps(ts, ta, tr, nb)
    table, _ = join_reads(reads, context=False)  # read once: with --jobs a second read_ranks reads again
    devices = totals_series(table)
    if not devices:
        return None
    return {"devices": devices, "note": SEGMENTS_NOTE, "columns": RECORDED_COLUMNS_NOTE}, steps


def no_addresses_error(paths, options, report):
    """The error for ``fragmentation`` on profiler traces whose events carry no addresses (the 2021 format),
    naming the first such file and what still works; None when the inputs are something else."""
    from veotrace.errors import AnalysisError

    files = kineto_inputs(paths, options, report)
    if not files:
        return None
    return AnalysisError("the profiler trace is the 2021 format: its [memory] events carry Bytes, Device Type and "
                         "Device Id only, no addresses and no totals, so neither blocks nor reserved bytes can be "
                         "placed", path=files[0],
                         hint="'veotrace info' gives each device's live bytes from the running sum; entropy, bursts, "
                              "sites --by op and view work on it; record with a recent PyTorch for fragmentation")


def convert_traces(files: list, output, options, report, config, inputs) -> dict | None:
    """``convert`` of profiler traces: the GPU events as ``ALLOC_EVENTS`` and, beside them, each trace's memory
    rows and ops with what its read found (``sources.kineto.converted``), so that every command gives the Parquet
    file the traces' answer; the ranks read on the engine's workers when parallel. None when the traces hold no
    GPU event (the events route then says why) or ``files`` are such side tables already."""
    from veotrace.engine.ranks import read_ranks
    from veotrace.outputs import output_file
    from veotrace.schemas.kineto import CPU
    from veotrace.sources.convert import write_parquet
    from veotrace.sources.kineto.converted import is_side, metadata, side_paths, write_side
    from veotrace.sources.kineto.trace import alloc_batches

    if any(is_side(p) for p in files):
        return None
    reads = read_ranks(files, options, report, context=True, config=config)
    if not any((r.table.column("device_type").to_numpy() != CPU).any() for r in reads):
        return None  # no GPU event: the events' route says so
    sides = [side_paths(output, k) for k in range(len(files))]
    with output_file(output, "wb", inputs=inputs) as sink:
        rows = write_parquet((b for r in reads for b in alloc_batches(r)), sink,
                             metadata=metadata(files, [m for m, _ in sides]))
    written = {"alloc_events": (output, rows)}
    for k, (read, (memory, ops)) in enumerate(zip(reads, sides)):
        mine = [w for w in report.warnings if str(files[k]) in w]
        written[f"profiler-{k}"] = (memory, write_side(read, mine, memory, ops))
    return written


def profiler_hip(paths, options) -> bool:
    """Whether the inputs are profiler traces of a ROCm job (Device Type 6: its export line names the HIP variable)."""
    from veotrace.sources import ReadReport

    report = ReadReport()
    files = kineto_inputs(paths, options, report)
    if not files:
        return False
    from veotrace.sources.kineto.trace import cached_read

    return any((cached_read(p, options, report).table.column("device_type").to_numpy() == 6).any() for p in files)


def replay_input(files: list, options, report, config=None):
    """``simulate``/``tune``'s input from profiler traces: the GPU events with the rises and falls of Total
    Reserved as recorded device allocations and releases, and the seed from the first events' totals
    (``allocators.kineto_seed``)."""
    import numpy as np
    import pyarrow as pa

    from veotrace.allocators.kineto_seed import seed_from_totals, segment_rows
    from veotrace.engine.ranks import read_ranks
    from veotrace.sources.kineto.trace import alloc_batches, lane, running_sum_check

    tables, live_before, reserved_before = [], {}, {}
    for read in read_ranks(files, options, report, config=config):  # in file order, on the workers if parallel
        t = read.table.filter(np.asarray(read.table.column("device_type").to_numpy() != 0))
        events = pa.Table.from_batches(list(alloc_batches(read))) if t.num_rows else None
        if events is None or not events.num_rows:
            continue
        tr = t.column("total_reserved_bytes")
        lanes = lane(read, t.column("device_id").to_numpy())
        if tr.null_count == 0:
            events, before = segment_rows(events, tr.to_numpy(), lanes)
            reserved_before.update(before)
        for key, c in running_sum_check(t).items():
            if c.get("live_before_bytes") is not None:
                did = key.split(":")[-1]
                d = int(lane(read, np.array([int(did)]))[0])
                live_before[d] = c["live_before_bytes"]
        tables.append(events)
    if not tables:
        return None, None
    table = pa.concat_tables(tables, promote_options="permissive").unify_dictionaries().combine_chunks()
    for line in lane_clashes(files, options) if len(files) > 1 else []:  # two processes on one device number
        if f"Warning: {line}" not in report.warnings:
            report.warnings.append(f"Warning: {line}")
    return table, seed_from_totals(table, live_before, reserved_before)


#: The runtime calls that mark CUDA/HIP graphs in a trace (Kineto's cuda_runtime events, by name).
GRAPH_MARKS = {"capture": (b'StreamBeginCapture"',), "launch": (b'GraphLaunch"',)}


def graph_marks(files: list) -> dict:
    """How many stream captures (``cudaStreamBeginCapture`` / ``hipStreamBeginCapture``) and graph launches
    (``cudaGraphLaunch`` / ``hipGraphLaunch``) the traces record: one pass over their bytes, made only when
    the replay missed its validation targets (a graph's private pool is a cause the model cannot follow)."""
    from veotrace.sources.base import open_decompressed

    keep = max(len(m) for marks in GRAPH_MARKS.values() for m in marks)
    out = dict.fromkeys(GRAPH_MARKS, 0)

    def count(text: bytes, sign: int) -> None:
        for kind, marks in GRAPH_MARKS.items():
            out[kind] += sign * sum(text.count(m) for m in marks)

    for path in files:
        fh, raw = open_decompressed(path)
        tail = b""
        try:
            while chunk := fh.read(1 << 20):
                text = tail + chunk
                tail = text[-(keep - 1):]  # a mark across the chunks' edge is whole only in the next text
                count(text, 1)
                count(tail, -1)  # those in the tail: counted with the next text (or below, at the end)
        except (OSError, EOFError, ValueError):  # a cut file: what was read is counted
            pass
        finally:
            fh.close()
            if raw is not fh:
                raw.close()
        count(tail, 1)
    return out


def profiler_validation(validation: dict, seed, assumption: str, files: list | None = None) -> None:
    """The validation of a profiler trace says what it is: no snapshot's settings nor final state, the
    assumed state before profiling, and that the rises of Total Reserved are what it checks against. When
    the replay misses its targets and ``files`` record CUDA/HIP graphs (:func:`graph_marks`), that is said
    first among the explanations: allocations made during a capture come from the graph's private pool."""
    out = [a for a in validation.get("assumptions", []) if not a.startswith("the snapshot has no allocator_settings")]
    out.insert(0, "a profiler trace records no allocator settings: PyTorch's defaults are assumed (a job that set "
                  "PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF / PYTORCH_ALLOC_CONF ran under other rules)")
    out.append(assumption)
    validation["assumptions"] = out
    validation["seed"] = (f"seeded from the first events' totals (assumed layout): {len(seed.segments)} segments "
                          f"({sum(s[2] for s in seed.segments):,} bytes) reserved and {len(seed.live)} blocks live "
                          "before profiling began")
    validation["recorded_from"] = "the rises of Total Reserved (each one device allocation of the rise)"
    if files and validation.get("recorded_segment_allocs") and not validation.get("meets_targets"):
        marks = graph_marks(files)
        validation["graphs"] = marks
        if marks["capture"] or marks["launch"]:
            validation["explanations"] = [
                f"the trace records CUDA/HIP graphs ({marks['capture']:,} stream captures, {marks['launch']:,} graph "
                "launches): what a capture allocates comes from the graph's private memory pool, with segments of its "
                "own, which the torch model does not keep apart (it serves those requests from the general cache), so "
                "the device allocations of the pools are not reproduced", *(validation.get("explanations") or [])]


def lane_clashes(paths, options=None, infos=None) -> list[str]:
    """One line per device number two traces of a run both claim at the same time: files that name no rank (no
    ``distributedInfo``) but record the same Device Id over overlapping spans (each worker saw its GPU as device
    0, or two runs in one folder). The common events give them one device, so the analyses interleave two
    processes' events. Traces one after the other on one device (``tensorboard_trace_handler``'s files, one per
    profiling cycle of one process) are that device's one time line: no clash."""
    import numpy as np

    from veotrace.errors import VeotraceError
    from veotrace.sources import ReadOptions, ReadReport

    options = options or ReadOptions()
    try:
        files = kineto_inputs(paths, options, ReadReport())
    except VeotraceError:
        return []
    if len(files) < 2:  # one trace claims its devices alone (no reader loaded for other inputs)
        return []
    from veotrace.sources.kineto.trace import CPU, cached_read, lane, lane_text, lanes

    described = {str(i.path): ((i.details or {}).get("profiler_memory") or {}).get("lanes") for i in infos or []}
    spans = {str(i.path): (i.details or {}).get("profiler_memory") for i in infos or []}
    owner: dict[int, list[tuple]] = {}
    out = []
    try:
        for p in files:
            lanes_of = described.get(str(p))
            summary = spans.get(str(p)) or {}
            if lanes_of and all("device" in d for d in lanes_of.values() if d.get("kind") == "gpu") \
                    and summary.get("first_ns") is not None:
                mine = [(int(d["device"]), name) for name, d in lanes_of.items() if d.get("kind") == "gpu"]
                span = (summary["first_ns"], summary["last_ns"])
            else:
                read = cached_read(p, options, ReadReport())
                mine = [(int(lane(read, np.array([k[2]]))[0]), lane_text(k)) for k in lanes(read.table) if k[1] != CPU]
                ts = read.table.column("ts_ns").to_numpy()
                span = (int(ts.min()), int(ts.max())) if ts.size else (0, -1)
            for dev, name in mine:
                clash = next((o for o in owner.get(dev, []) if o[2] <= span[1] and span[0] <= o[3]), None)
                if clash is not None:
                    out.append(f"{clash[0]} and {p} both record {name} over the same time: the analyses take their "
                               "events as one device's (no distributedInfo rank tells the two processes apart): "
                               "analyse each file alone, or record with torch.distributed initialised")
                else:
                    owner.setdefault(dev, []).append((str(p), name, *span))
    except VeotraceError:
        return []
    return out


def clash_hint(report, hint: str | None) -> str | None:
    """The hint of an error the replay's pairing raised, led by the clash of two rank-less traces on one device
    when reading found one (:func:`lane_clashes`): their merged events are the likely cause."""
    clash = next((w for w in report.warnings if "both record" in w and "no distributedInfo rank" in w), None)
    return hint if clash is None else clash.removeprefix("Warning: ") + (f"; {hint}" if hint else "")


def lane_names(paths, options=None, infos=None) -> dict:
    """The common table's device number -> what findings say of its lane, for profiler traces ({} for any other
    input, or one that does not read): ``lane`` its name (``cuda:0``, ``rank 1 hip:0``), the one name every
    finding gives it; ``device_name`` and ``capacity_bytes`` from the trace's ``deviceProperties`` (``name``,
    ``totalGlobalMem``; None when not listed); ``peak_reserved_bytes``, ``peak_allocated_bytes`` and
    ``reserved_rises`` recorded (the reader's check: bytes live before profiling included); ``rank``, ``device_id``.
    ``infos`` (``analysis.info.FileInfo`` of the files, as diagnose and the report have them): their
    descriptions give the same without reading the traces again (a folder of more ranks than the read cache
    holds would be read twice); a file they do not describe is read."""
    import numpy as np

    from veotrace.errors import VeotraceError
    from veotrace.sources import ReadOptions, ReadReport

    options = options or ReadOptions()
    described = {str(i.path): ((i.details or {}).get("profiler_memory") or {}).get("lanes") for i in infos or []}
    try:
        files = kineto_inputs(paths, options, ReadReport())
        out = {}
        if files:
            from veotrace.sources.kineto.trace import CPU, cached_read, device_memory, lane, lane_text, lanes
        for p in files:
            lanes_of = described.get(str(p))
            if lanes_of and all("device" in d for d in lanes_of.values() if d.get("kind") == "gpu"):
                for name, d in lanes_of.items():
                    if d.get("kind") == "gpu":
                        out[int(d["device"])] = {"lane": name, **{k: d.get(k) for k in (
                            "device_name", "capacity_bytes", "peak_reserved_bytes", "peak_allocated_bytes",
                            "reserved_rises", "rank", "device_id")}}
                continue
            read = cached_read(p, options, ReadReport())
            props = device_memory(read.head)
            for key in lanes(read.table):
                if key[1] == CPU:
                    continue
                check = read.checks.get(lane_text(key)) or {}
                name, cap = props.get(key[2], (None, None))
                out[int(lane(read, np.array([key[2]]))[0])] = {
                    "lane": lane_text(key), "device_name": name, "capacity_bytes": cap,
                    "peak_reserved_bytes": check.get("peak_reserved_bytes"),
                    "peak_allocated_bytes": check.get("peak_allocated_bytes"),
                    "reserved_rises": check.get("reserved_rises"), "rank": key[0], "device_id": key[2]}
        return out
    except VeotraceError:
        return {}
