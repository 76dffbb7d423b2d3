"""Run `info`: probe each file (format, version, cheap metadata) and describe every table it provides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class InfoRun(RunResult):
    """``info``'s result: ``value`` is the list of ``FileInfo``; ``skipped`` the files that are not traces."""

    command = "info"
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"files": [i.to_dict() for i in self.value], "skipped_files": self.skipped}

    def tables(self) -> dict[str, Any]:
        from veotrace.analysis.info import info_table

        return {"files": info_table(self.value)}

    def headline(self) -> list[tuple[str, Any]]:
        return [(i.path, i.format or i.error) for i in self.value]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.info import render_info

        render_info(console, self.value)


def info(paths, *, time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None) -> InfoRun:
    """What each file is: format and version, tables and rows, time span, devices, streams, ops, sizes,
    kernels, and the commands that will run on it. A file that is no trace gets ``error`` (exit code 1)."""
    from veotrace.analysis import info as analysis
    from veotrace.sources.frames import frames_or_none
    from veotrace.sources.probe import probe_paths

    paths = common.as_paths(paths)
    options, _ = common.reading(time_unit, skip_bad_rows, format_hint)
    probes, skipped = probe_paths(paths, options)
    infos, skipped = analysis.describe_all(probes, skipped, frames_or_none)
    for i in infos:  # a snapshot records the device's free bytes at each OOM: the reader's table has no column
        alloc = i.details.get("alloc_events") or {}
        if alloc.get("recorded_ooms") and i.format == "torch-snapshot":
            from veotrace.analysis.ooms import with_device_free
            from veotrace.sources.snapshots.torch_snapshot import oom_free_bytes

            # as_paths: a URL's i.path is read again through fsspec (Path() would fold file:///x into file:/x)
            alloc["recorded_ooms"] = with_device_free(alloc["recorded_ooms"], oom_free_bytes(common.as_paths(i.path)[0]))
    messages = []
    for p in probes:
        # reader notes (e.g. "no time_us") are part of the description; a file cut mid-write is said on stderr too,
        # as every other command says it (data is lost: never only in a table)
        cut = [w for w in p.report.warnings if "(cut mid-write?)" in w]
        p.report.warnings.clear()
        messages.extend([*cut, *p.report.messages()])
    if skipped:
        one = len(skipped) == 1
        messages.append(f"Warning: skipped {len(skipped)} file{'' if one else 's'} that {'is' if one else 'are'} "
                        f"not a trace: {', '.join(skipped[:5])}")
    bad = [i for i in infos if i.error]
    return InfoRun(infos, messages, common.input_files(paths), exit_code=1 if bad else 0,
                   closing=[f"Error: {i.path}: {i.error}" for i in bad], skipped=skipped)
