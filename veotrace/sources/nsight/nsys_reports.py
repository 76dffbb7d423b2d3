"""Readers layer: split ``nsys stats --format csv`` output into its reports and name each one.

Two layouts (FORMATS.md A.1): a file holding one report (``--output base`` writes
``base_<report>.csv``), and captured stdout where each report follows a
``Processing [db.sqlite] with [.../reports/<report>.py]...`` line, an empty one prints ``SKIPPED: ...``,
and ``Generating``/``NOTICE:`` log lines come in between. Report names changed around nsys 2023.1
(``gputrace`` -> ``cuda_gpu_trace``, A.2); both are recognised and old names are reported as the new.
Pure text work (no pyarrow), so ``veotrace info`` stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from veotrace.sources.base import open_decompressed

#: The report veotrace reads per-event rows from (kernels, memcpy, memset).
TRACE_REPORT = "cuda_gpu_trace"
#: Old (<= 2022.x) report names -> current names (FORMATS.md A.2).
OLD_NAMES = {
    "gputrace": "cuda_gpu_trace", "gpukernsum": "cuda_gpu_kern_sum", "gpumemsizesum": "cuda_gpu_mem_size_sum",
    "gpumemtimesum": "cuda_gpu_mem_time_sum", "cudaapisum": "cuda_api_sum", "cudaapitrace": "cuda_api_trace",
    "nvtxsum": "nvtx_sum", "nvtxkernsum": "nvtx_kern_sum", "kernexecsum": "cuda_kern_exec_sum",
    "kernexectrace": "cuda_kern_exec_trace", "osrtsum": "osrt_sum",
}
#: Reports recognised by name, current spelling (the Analysis Guide's list, FORMATS.md A.2).
_KNOWN = (
    "cuda_api_gpu_sum cuda_api_sum cuda_api_trace cuda_gpu_kern_gb_sum cuda_gpu_kern_sum cuda_gpu_mem_size_sum "
    "cuda_gpu_mem_time_sum cuda_gpu_sum cuda_gpu_trace cuda_kern_exec_sum cuda_kern_exec_trace dx11_pix_sum "
    "dx12_gpu_marker_sum dx12_pix_sum mpi_event_sum mpi_event_trace network_congestion nvtx_gpu_proj_sum "
    "nvtx_gpu_proj_trace nvtx_kern_sum nvtx_pushpop_sum nvtx_pushpop_trace nvtx_startend_sum nvtx_sum "
    "nvvideo_api_sum openacc_sum opengl_khr_gpu_range_sum opengl_khr_range_sum openmp_sum osrt_sum syscall_sum "
    "um_cpu_page_faults_sum um_sum um_total_sum vulkan_api_sum vulkan_api_trace vulkan_gpu_marker_sum "
    "vulkan_marker_sum wddm_queue_sum")
KNOWN_REPORTS = frozenset(_KNOWN.split())

_PROCESSING = re.compile(r"^Processing \[.*\] with \[(?:.*[/\\])?([^/\\\]]+?)(?:\.py)?\]")
#: nsys log lines mixed into stdout: "SKIPPED: ...", "NOTICE: ...", "WARNING: ...", "Generating SQLite file ...".
_LOG_LINE = re.compile(r"^(?:[A-Z]{3,}: |Generating |Exporting |Processing \[)")
_UNIT = re.compile(r"^(.*?)\s*\(([^()]*)\)\s*$")


@dataclass
class Report:
    """One report's CSV block: its name, header, data lines and their 1-based line numbers in the file.

    ``name`` is the current report name (old names translated); ``given_name`` what nsys called it
    (None when the file has no ``Processing`` line and the name was judged from the header).
    ``skipped`` holds nsys's ``SKIPPED:`` reason for an empty report.
    """

    name: str | None
    given_name: str | None = None
    header: str | None = None
    header_line: int | None = None
    lines: list[str] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)
    skipped: str | None = None

    @property
    def columns(self) -> list[str]:
        import csv

        return next(csv.reader([self.header])) if self.header else []

    @property
    def is_trace(self) -> bool:
        """Whether this is the per-event GPU trace (cuda_gpu_trace / gputrace)."""
        return self.name == TRACE_REPORT


def split_column(col: str) -> tuple[str, str | None]:
    """('Start', 'ns') for 'Start (ns)' and for 2021's 'Start(sec)'; ('CorrId', None) for 'CorrId'."""
    m = _UNIT.match(col.strip())
    return (m.group(1), m.group(2).strip()) if m else (col.strip(), None)


def canonical_name(name: str) -> str:
    return OLD_NAMES.get(name, name)


def classify_header(columns: list[str]) -> str | None:
    """The report a header belongs to, judged from its column names (None when not recognised).

    Summaries that share a layout (cuda_api_sum / osrt_sum / syscall_sum) cannot be told apart and
    are named by the first.
    """
    names = {split_column(c)[0] for c in columns}
    if {"Start", "Duration", "Name"} <= names and ({"CorrId", "GrdX"} <= names or {"CorrId", "Bytes"} <= names):
        return TRACE_REPORT
    if {"Start", "Duration", "Name", "Result"} <= names:
        return "cuda_api_trace"
    if {"Time", "Total Time", "Instances"} <= names:
        return "nvtx_sum" if "Range" in names else "cuda_gpu_kern_sum"
    if "Operation" in names or "Operations" in names:
        return "cuda_gpu_mem_time_sum" if "Total Time" in names else "cuda_gpu_mem_size_sum"
    if {"Time", "Total Time", "Num Calls"} <= names:
        return "cuda_api_sum"
    return None


def _name_from_file(path: Path) -> str | None:
    stem = path.name.split(".")[0]
    for name in sorted(set(KNOWN_REPORTS) | set(OLD_NAMES), key=len, reverse=True):
        if stem == name or stem.endswith("_" + name):
            return canonical_name(name)
    return None


def read_text_lines(path: Path) -> list[str]:
    """The file's lines (gzip/zstd decompressed, BOM stripped, undecodable bytes replaced)."""
    from veotrace.sources.limits import read_bounded, text_head

    stream, raw = open_decompressed(path)
    try:
        text = read_bounded(path, stream, "the nsys stats CSV file", head_check=text_head(path, "the nsys stats CSV file")).decode("utf-8", errors="replace")
    finally:
        raw.close()
    return text.lstrip("\ufeff").splitlines()


def split_reports(path: Path, lines: list[str] | None = None) -> tuple[list[Report], bool]:
    """The reports in an ``nsys stats --format csv`` file, in file order, and whether it is captured stdout.

    In captured stdout a report ends at a blank line or the next ``Processing`` line. A file with no
    ``Processing`` line is one report; its name comes from the header, else from the file name.
    """
    lines = read_text_lines(path) if lines is None else lines
    reports: list[Report] = []
    current: Report | None = None
    captured = False
    for i, line in enumerate(lines, start=1):
        m = _PROCESSING.match(line)
        if m:
            captured = True
            current = Report(canonical_name(m.group(1)), given_name=m.group(1))
            reports.append(current)
            continue
        text = line.strip()
        if not text:
            if captured and current is not None and current.header is not None:
                current = None  # a blank line closes a report in captured stdout
            continue
        if current is None:
            if captured or _LOG_LINE.match(text):
                continue  # log lines between reports
            current = Report(None)
            reports.append(current)
        if text.startswith("SKIPPED:") and current.header is None:
            current.skipped = text.removeprefix("SKIPPED:").strip()
            continue
        if _LOG_LINE.match(text):
            continue
        if current.header is None:
            current.header, current.header_line = line, i
        else:
            current.lines.append(line)
            current.line_numbers.append(i)
    for rep in reports:
        by_header = classify_header(rep.columns) if rep.header else None
        if rep.name is None or (rep.name not in KNOWN_REPORTS and by_header is not None):
            rep.name = by_header or _name_from_file(path)
    return reports, captured
