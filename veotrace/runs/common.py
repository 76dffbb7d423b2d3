"""Run layer plumbing shared by the commands: reading options, the engine, option values, the run's input files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Progress = Callable[[int, int], None] | None


def reading(time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
            extra_columns: Sequence[str] = (), option: str | None = None) -> tuple[Any, Any]:
    """The ReadOptions of the shared reading options, and an empty ReadReport for what reading skips.

    ``option`` names the option that gave ``extra_columns`` (``--latency-col``) in the UsageError for a
    name the readers refuse (a column veotrace reads already, an empty name).
    """
    from veotrace.errors import UsageError
    from veotrace.sources import ReadOptions, ReadReport

    unit = getattr(time_unit, "value", time_unit)  # the CLI's enum, or its text
    options = ReadOptions(time_unit=unit, skip_bad_rows=skip_bad_rows, format_hint=format_hint)
    if extra_columns:
        import dataclasses

        try:
            options = dataclasses.replace(options, extra_columns=tuple(extra_columns))
        except ValueError as exc:  # ReadOptions' own check, a ValueError for the API's callers
            shown = f"{option} {', '.join(map(str, extra_columns))}: " if option else ""
            raise UsageError(f"{shown}{exc}") from None
    return options, ReadReport()


def engine(kind: str = "local", jobs: int = 1, scheduler: str | None = None, workers: int | None = None):
    """The EngineConfig of ``--engine``, ``--jobs``, ``--scheduler``, ``--workers`` (UsageError for a mix-up)."""
    from veotrace.engine import EngineConfig

    return EngineConfig(getattr(kind, "value", kind), jobs, scheduler, workers)


def as_paths(paths: Any) -> list:
    """A path, a URL or a list of them as the readers take them (``Path`` or ``sources.remote.UrlPath``)."""
    from veotrace.sources.remote import as_path

    if isinstance(paths, (str, Path)) or not isinstance(paths, Sequence):
        paths = [paths]
    return [as_path(p) for p in paths]


def keyed(by: str | None) -> bool:
    """Whether ``--by`` keys rows by site or phase (``attribution.rows.KEYED``); attribution loads only then."""
    if by is None:
        return False
    from veotrace.attribution.rows import KEYED

    return by in KEYED


def event_batches(paths, *, options, report, columns, on_progress: Progress = None, inputs=None, events=None):
    """The alloc/free event batches of ``paths`` with ``columns``: read now, or taken from ``events``, the
    ``ALLOC_EVENTS`` table of those same paths read already (``veotrace diff`` reads each side once for
    every analysis it reports, which then see exactly the batches a read would give them)."""
    from veotrace.sources import iter_alloc_events

    if events is None:
        return iter_alloc_events(paths, options=options, report=report, on_progress=on_progress, columns=columns,
                                 inputs=inputs)
    wanted = [c for c in events.column_names if c in columns] if columns is not None else events.column_names
    return iter(events.select(wanted).to_batches())  # the table's chunks: the batches its read yielded


def input_files(paths: Sequence[Any]) -> list:
    """Every local file ``paths`` name, folders expanded as the readers expand them (``expand_paths``),
    for the output guard; URLs other than ``file://`` are never outputs."""
    from veotrace.sources.base import expand_paths, local_path

    # a file:// URL whose file is missing is left to the reader, whose error names the URL as given
    local = [p if isinstance(p, Path) else q for p in paths
             if isinstance(p, Path) or ((q := local_path(p)) is not None and (q.exists() or q.is_symlink()))]
    return expand_paths(local)


def seconds(value: str | float | None, option: str, bare_unit: str = "s") -> float | None:
    """A duration option in seconds: text such as ``5m`` or ``300s``, or a number in ``bare_unit``."""
    from veotrace.units import parse_duration

    return None if value is None else parse_duration(value, option=option, bare_unit=bare_unit)


def count(value: int | None, option: str) -> int | None:
    """A count option (``--window-events``): None, or a whole number from 1 to 2**63-1 (int64, as the
    analyses hold it; 10**20 ended in an OverflowError deep in numpy)."""
    from veotrace.errors import UsageError

    if value is not None and not 1 <= value < 1 << 63:
        raise UsageError(f"{option} must be between 1 and 2**63-1, got {value}")
    return value


def nbytes(value: str | int | None, option: str) -> int | None:
    """A byte-size option: text such as ``80GiB``, or a number of bytes."""
    from veotrace.units import parse_bytes

    if value is None:
        return None
    return parse_bytes(str(value), option=option)


def ops_list(value: str | Sequence[str] | None, default: Sequence[str]) -> list[str]:
    """The op names of a comma-separated ``--ops`` value or a list (``default`` when None).

    Raises:
        UsageError: the value names no op at all (e.g. ``--ops ,``).
    """
    from veotrace.errors import UsageError

    if value is None:
        return list(default)
    parts = value.split(",") if isinstance(value, str) else list(value)
    ops = [o.strip() for o in parts if o.strip()]
    if not ops:
        raise UsageError("--ops needs at least one op name, e.g. alloc")
    return ops


def grouping(by: str | None, device: int | None) -> dict:
    """The by/device keywords of an analysis, only those given."""
    out: dict = {}
    if by is not None:
        out["by"] = getattr(by, "value", by)
    if device is not None:
        out["device"] = device
    return out


def site_rule(site_filter: str | None, site_depth: int):
    """The ``--site-filter``/``--site-depth`` rule (``attribution.stacks.SiteRule``).

    Raises:
        UsageError: a filter that is not a regular expression, a depth under 1.
    """
    import re

    from veotrace.attribution.stacks import DEFAULT_INTERNAL, SiteRule
    from veotrace.errors import UsageError

    if site_depth < 1:
        raise UsageError(f"--site-depth must be at least 1, got {site_depth}")
    if site_filter is not None:
        try:
            re.compile(site_filter)
        except re.error as exc:
            raise UsageError(f"--site-filter is not a regular expression: {exc}") from None
    return SiteRule(site_filter or DEFAULT_INTERNAL, site_depth)


def keyed_read(paths: list[Path], by: str, *, options, report, columns, on_progress=None, rule=None):
    """``--by site|phase``: the event batches with a ``by`` column of keys, and the text of each key:
    one PyTorch snapshot's sites or phases (``attribution.rows``), its Parquet conversion's, or the
    tags of alloc/free logs' own ``site``/``phase`` column (read as ``--id-col`` is; empty cells are
    "(no tag)").

    Raises:
        UsageError: the inputs are not one PyTorch snapshot.
    """
    import pyarrow as pa

    from veotrace.sources import iter_alloc_events

    keyed = snapshot_keys(paths, by, options=options, report=report, rule=rule)
    if keyed is None:
        return _tagged_read(paths, by, options=options, report=report, columns=columns, on_progress=on_progress)
    path, keys, names = keyed
    wanted = [c for c in columns if c != by] + (["seq"] if "seq" not in columns else [])

    def batches():
        for b in iter_alloc_events([path], options=options, report=report, on_progress=on_progress, columns=wanted):
            yield b.append_column(by, pa.array(keys[b.column("seq").to_numpy()], pa.int64()))

    return batches(), names


def snapshot_keys(paths: list[Path], by: str, *, options, report, rule=None):
    """``--by site|phase`` on one PyTorch snapshot or its Parquet conversion: (its path, the key of each
    row by ``seq``, the text of each key); None for alloc/free logs (their own column keys them).

    Raises:
        UsageError: inputs that are neither.
    """
    import numpy as np

    from veotrace.attribution.rows import snapshot_row_keys
    from veotrace.errors import UsageError
    from veotrace.sources import resolve_inputs
    from veotrace.sources.snapshots.converted import converted_snapshot

    inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    path = inputs[0][0] if len(inputs) == 1 else None
    converted = converted_snapshot(path) if path is not None and inputs[0][1].name == "parquet" else None
    if converted is not None and converted.keys is not None:  # convert wrote the snapshot's sites and phases
        col = converted.read_keys().column(by).combine_chunks()
        return path, col.indices.to_numpy().astype(np.int64), dict(enumerate(col.dictionary.to_pylist()))
    if path is not None and inputs[0][1].name == "torch-snapshot":
        return (path, *snapshot_row_keys(path, by, rule))
    if all(fmt.name in ("alloc-csv", "alloc-jsonl", "parquet") for _, fmt in inputs):
        return None
    raise UsageError(f"--by {by} reads a PyTorch memory snapshot (its stacks and record_function annotations), "
                     f"its conversion by 'veotrace convert', or alloc/free logs with a '{by}' column",
                     hint="--by device or --by stream group any input")


def _tagged_read(paths, by: str, *, options, report, columns, on_progress=None):
    """Logs with a ``by`` column of text tags (read as ``--id-col`` is): batches keyed by tag, and the tags."""
    import dataclasses

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from veotrace.sources import iter_alloc_events

    tagged = dataclasses.replace(options, extra_columns=(*options.extra_columns, by))
    wanted = [c for c in columns if c != by]
    codes: dict[str, int] = {}
    names: dict[int, str] = {}  # filled as the batches are read; the groups are named after the read

    def batches():
        for b in iter_alloc_events(paths, options=tagged, report=report, on_progress=on_progress, columns=wanted):
            col = pc.fill_null(b.column(by).cast(pa.string()), "(no tag)").dictionary_encode()
            remap = np.array([codes.setdefault(t, len(codes)) for t in col.dictionary.to_pylist()], np.int64)
            names.update({c: t for t, c in codes.items()})
            keys = remap[col.indices.to_numpy()] if remap.size else np.zeros(0, np.int64)
            yield b.drop_columns([by]).append_column(by, pa.array(keys, pa.int64()))

    return batches(), names


def name_groups(groups: list[dict], names: dict[int, str]) -> None:
    """Give ``--by site|phase`` groups their text instead of their key."""
    for g in groups:
        g["group"] = names.get(int(g["group"]), g["group"]) if str(g["group"]).lstrip("-").isdigit() else g["group"]


def hours_list(text: str | Sequence[float] | None) -> list[float]:
    """``--segments`` as hours: '48,120' (bare numbers are hours) or '30m,2h', or a list of hours."""
    from veotrace.units import parse_hours_list

    if text is None:
        return []
    if not isinstance(text, str):
        return [float(h) for h in text]
    return parse_hours_list(text)


def oom_free(paths: Sequence[Any]) -> dict:
    """The device's free bytes at each OOM a snapshot (or its Parquet conversion) recorded, by (device,
    ts_ns, request); empty for other inputs, whose traces record no free bytes."""
    from veotrace.sources.base import expand_paths
    from veotrace.sources.detect import sniff
    from veotrace.sources.snapshots.converted import converted_snapshot
    from veotrace.sources.snapshots.torch_snapshot import oom_free_bytes

    out: dict = {}
    for p in expand_paths(as_paths(paths)):  # URLs too (input_files lists local files only: s3:// said "unknown free")
        fmt = sniff(p)
        if fmt is not None and fmt.name == "torch-snapshot":
            out.update(oom_free_bytes(p))
        elif fmt is not None and fmt.name == "parquet":
            converted = converted_snapshot(p)
            out.update((converted.oom_free or {}) if converted else {})
    return out


def small_input_note(paths: Sequence[Any], config: Any) -> list[str]:
    """A note when ``--jobs``/``--engine`` would split local inputs smaller than one engine piece: starting
    processes (or a cluster) then costs more than the read (a 917-event log took 8.6 s with --jobs 2)."""
    if not config.parallel or any(not isinstance(p, Path) for p in paths):
        return []
    from veotrace.engine import SPLIT_BYTES

    total = sum(p.stat().st_size for p in input_files(paths))
    if total >= SPLIT_BYTES:
        return []
    how = "--engine dask" if config.kind == "dask" else f"--jobs {config.jobs}"
    return [f"note: {how} on {total / 2**20:.1f} MiB of input (under one {SPLIT_BYTES >> 20} MiB piece): one process "
            "is faster here; the engines pay off on larger inputs"]


def fraction(value: float | str | None, capacity: int | None, option: str = "--fraction") -> float | None:
    """``--fraction``: the job's ``torch.cuda.set_per_process_memory_fraction``, a share of the device's memory,
    so it needs ``--capacity`` (the device's memory) to become bytes.

    Raises:
        UsageError: not a number in [0, 1] in ASCII digits, or no device memory to apply it to.
    """
    from veotrace.allocators.conf import parse_fraction
    from veotrace.errors import UsageError

    if value is None:
        return None
    f = parse_fraction(value, option)  # [0, 1] in ASCII digits, as set_per_process_memory_fraction takes it
    if capacity is None:
        raise UsageError(f"{option} {value}: a fraction with no device memory to apply it to",
                         hint="Give --capacity, the device's total memory "
                              "(torch.cuda.get_device_properties(0).total_memory, e.g. 80GiB)")
    return f


def settings_lines(conf) -> list[str]:
    """What the settings' reading tells the user (stderr): the recorded options not understood (each once), the
    recorded string's contradictions with the fields, and options accepted with no effect on the model."""
    rec = conf.recorded or {}
    lines = [f"Warning: the recorded PYTORCH_CUDA_ALLOC_CONF is a string {rec['refused']}"] if rec.get("refused") else []
    lines += [f"Warning: the recorded PYTORCH_CUDA_ALLOC_CONF holds an option veotrace does not follow: {n}; the "
             "replay leaves it out" for n in rec.get("not_understood", [])]
    lines += [f"Warning: {c}" for c in rec.get("contradictions", [])]
    lines += [f"Note: {n}" for n in conf.notes]
    return lines
