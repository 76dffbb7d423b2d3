"""Readers layer: what a file is before it is read in full (format, version, cheap metadata), for `info`.

``probe(path)`` never raises for a file that exists: detection failures and unreadable metadata
are recorded on the :class:`Probe`, so one bad file cannot hide what the others hold.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace.errors import TraceFormatError, VeotraceError
from veotrace.sources.base import (
    ReadOptions,
    ReadReport,
    call_guarded,
    compression_of,
    expand_paths,
    read_head,
)
from veotrace.sources.base import detail as _detail
from veotrace.sources.detect import Format, detect

#: nsys SQLite tables whose row counts `info` shows (the ones veotrace maps, FORMATS.md A.4-A.5).
NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "CUDA_GPU_MEMORY_USAGE_EVENTS", "NVTX_EVENTS", "TARGET_INFO_GPU")


@dataclass
class Held:
    """The alloc/free batches of each file as ``info`` reads them, kept for a caller that analyses the same
    files next (``diagnose``: each input read once), up to ``budget`` bytes in all; a file past it is not
    kept (``over``) and is read again by whoever needs it."""

    budget: int
    batches: dict[str, list] = field(default_factory=dict)
    nbytes: int = 0
    over: list[str] = field(default_factory=list)
    #: What reading each kept file reported (its warnings are the caller's to show, as a read of its own would).
    reports: dict[str, ReadReport] = field(default_factory=dict)

    def keep(self, path: Path, batches, report: ReadReport | None = None):
        """Yield ``batches``, keeping them (and ``report``, what reading them said) for ``path`` once all
        were read within the budget."""
        kept: list | None = []
        n = 0
        for b in batches:
            yield b
            if kept is not None:
                n += b.nbytes
                if self.nbytes + n > self.budget:
                    kept = None
                    self.over.append(str(path))
                else:
                    kept.append(b)
        if kept is not None:
            self.batches[str(path)] = kept
            self.nbytes += n
            if report is not None:
                self.reports[str(path)] = report


@dataclass
class Probe:
    """A file's detected format and version details, and how to load each table it provides.

    Attributes:
        error: why detection failed (empty file, not a supported format); None when detected.
        version_error: why the version details could not be read (the file may still be unreadable).
    """

    path: Path
    fmt: Format | None
    version: dict[str, Any] = field(default_factory=dict)
    error: VeotraceError | None = None
    version_error: VeotraceError | None = None
    options: ReadOptions = field(default_factory=ReadOptions)
    report: ReadReport = field(default_factory=ReadReport)
    held: Held | None = None  # where the alloc/free batches read are kept for the next reader

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.fmt.provides if self.fmt is not None else ()

    def load(self, kind: str) -> Any:
        """Batches (alloc_events), a dict of arrays (arrays) or an Arrow table (other kinds).

        Raises:
            VeotraceError: the reader refuses the file or is not available yet.
        """
        from veotrace import sources

        if kind == "alloc_events":
            batches = sources.iter_alloc_events([self.path], options=self.options, report=self.report)
            return batches if self.held is None else self.held.keep(self.path, batches, self.report)
        if kind == "arrays":
            from veotrace.sources.arrays import read_array

            names = list(self.version.get("arrays", {})) or [None]
            return {name or "array": read_array(self.path, name=name) for name in names}
        return sources.read_table([self.path], kind, options=self.options, report=self.report)


def probe(path: Path, options: ReadOptions | None = None) -> Probe:
    """Detect ``path``'s format and read its version details (never raises for an existing file)."""
    options = options if options is not None else ReadOptions()
    try:
        fmt = detect(path, options.format_hint)
    except TraceFormatError as exc:
        return Probe(path, None, error=exc, options=options)
    result = Probe(path, fmt, options=options)
    reader = _VERSION.get(fmt.name)
    if reader is not None:
        try:
            result.version = call_guarded(path, reader, path)
        except VeotraceError as exc:
            result.version_error = exc
    return result


def probe_paths(paths: list[Path], options: ReadOptions | None = None) -> tuple[list[Probe], list[str]]:
    """Probes of every file named or inside the folders named, and the folder files that are no trace.

    A file named directly is always probed (its detection error is kept on the probe); inside folders,
    files that are none of the supported formats are left out and listed instead.

    Raises:
        FileNotFoundError: a path does not exist.
    """
    out, skipped = [], []
    for given in paths:
        odd: list[str] = []
        found = expand_paths([given], odd)
        skipped.extend(odd)
        for path in found:
            result = probe(path, options)
            if result.error is not None and path != given:
                skipped.append(str(path))
            else:
                out.append(result)
    return out, skipped


def _torch(path: Path) -> dict[str, Any]:
    from veotrace.sources.snapshots.torch_snapshot import snapshot_info

    snap = snapshot_info(path)
    return {"layout": snap.layout, "has_time_us": snap.has_time, "device_traces": len(snap.device_traces),
            "allocator_settings": snap.allocator_settings is not None, "external_annotations": snap.annotations}


def _nsys_sqlite(path: Path) -> dict[str, Any]:
    from veotrace.sources.nsight.sqlite_ro import connect_ro, export_layout

    with connect_ro(path) as con:
        layout = export_layout(con, path)
        counts = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in NSYS_TABLES if t in layout.tables}
    return {"nsys_version": layout.meta_value("PRODUCT_VERSION"), "schema_version": layout.meta_value("SCHEMA_VERSION"),
            "metadata_table": layout.meta_table, "tables": len(layout.tables), "source_rows": counts}


def _nsys_csv(path: Path) -> dict[str, Any]:
    from veotrace.sources.nsight.nsys_reports import split_reports

    reports, captured = split_reports(path)
    if not captured:
        rep = reports[0] if reports else None
        return {"layout": "one report", "report": rep.name if rep else None,
                "header": (rep.header or "")[:200] if rep else "", "rows": len(rep.lines) if rep else 0}
    return {"layout": "captured nsys stats stdout", "reports": [r.name or r.given_name for r in reports],
            "empty_reports": [r.name or r.given_name for r in reports if r.skipped is not None],
            "report_rows": {r.name or r.given_name: len(r.lines) for r in reports if r.skipped is None}}


def _ncu_csv(path: Path) -> dict[str, Any]:
    head = read_head(path, 1 << 20)
    lines = head.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        return {"page": None}
    header = [c.strip('"') for c in lines[start].split('","')]
    generation = ("2020-era header (Kernel Time column)" if "Kernel Time" in header
                  else "2025+ header (Block Size .. CC columns)" if "CC" in header else "unknown header")
    return {"page": "details" if "Metric Name" in header else "raw", "generation": generation,
            "preamble_lines": start, "bom": head.startswith(b"\xef\xbb\xbf"), "crlf": b"\r\n" in head[:4096]}


def _ncu_rep(path: Path) -> dict[str, Any]:
    del path
    try:
        import ncu_report  # noqa: F401
    except ImportError:
        return {"ncu_report_module": False}
    return {"ncu_report_module": True}


def _npy_header(fh) -> dict[str, Any]:
    import warnings

    import numpy as np

    major, minor = np.lib.format.read_magic(fh)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Python 2 headers ("(2L,)") parse fine; numpy warns
        shape, fortran, dtype = read(fh)
    return {"npy_version": f"{major}.{minor}", "dtype": dtype.str, "shape": list(shape), "fortran_order": fortran}


def _arrays(path: Path) -> dict[str, Any]:
    try:
        if read_head(path, 4).startswith(b"PK"):
            with zipfile.ZipFile(path) as zf:
                out = {}
                for name in zf.namelist():
                    if not name.endswith(".npy"):
                        continue  # not an array: np.savez writes only .npy members
                    with zf.open(name) as fh:
                        out[name.removesuffix(".npy")] = _npy_header(fh)
                return {"container": "npz", "arrays": out}
        with path.open("rb") as fh:
            return {"container": "npy", **_npy_header(fh)}
    except Exception as exc:  # noqa: BLE001 - numpy parses headers with ast/tokenize: any error is a bad header
        detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise TraceFormatError(f"unreadable array header ({detail})", path=path) from None


def _parquet(path: Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veotrace.schemas import schema_tag
    from veotrace.sources.remote import arrow_source

    try:
        pf = pq.ParquetFile(arrow_source(path))
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(f"not a readable Parquet file ({_detail(exc)})", path=path) from None
    return {"schema": schema_tag(pf.schema_arrow), "rows": pf.metadata.num_rows, "row_groups": pf.num_row_groups,
            "columns": pf.schema_arrow.names}


def _alloc_log(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        compression = compression_of(fh.read(4))
    first = next((ln for ln in read_head(path, 4096).decode("utf-8", errors="replace").splitlines() if ln.strip()), "")
    out: dict[str, Any] = {"compression": compression}
    if not first.lstrip().startswith("{"):
        out["columns"] = [c.strip().strip('"') for c in first.split(",")]
    return out


def _kineto(path: Path) -> dict[str, Any]:
    """A profiler trace's header: schema version, devices, rank and world size, what it recorded."""
    from veotrace.sources.kineto.scan import ScanState, parse_head

    state = ScanState()
    parse_head(read_head(path, 1 << 20), state)
    head = state.head
    dist = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), dict) else {}
    props = head.get("deviceProperties") if isinstance(head.get("deviceProperties"), list) else []
    out = {"schema_version": head.get("schemaVersion"), "profile_memory": head.get("profile_memory"),
           "with_stack": head.get("with_stack"), "rank": dist.get("rank"), "world_size": dist.get("world_size"),
           "gpus": [str(p.get("name")) for p in props if isinstance(p, dict)]}
    for key in ("backend", "nccl_version"):  # the collectives' library (distributedInfo), when the run recorded it
        if isinstance(dist.get(key), str):
            out[key] = dist[key][:64]
    for key in ("roctracer_version", "hip_runtime_version", "cuda_runtime_version", "cuda_driver_version"):
        if key in head:
            out[key] = head[key]
    return out


_VERSION: dict[str, Callable[[Path], dict[str, Any]]] = {
    "kineto": _kineto,
    "torch-snapshot": _torch, "nsys-sqlite": _nsys_sqlite, "nsys-csv": _nsys_csv, "ncu-csv": _ncu_csv,
    "ncu-rep": _ncu_rep, "npy": _arrays, "parquet": _parquet, "alloc-csv": _alloc_log, "alloc-jsonl": _alloc_log,
}
