"""Run ``veotrace diagnose``: every analysis that applies to the inputs (as the report plans them), their
results turned into findings (``veotrace.findings``) on one time axis, ranked and linked by time order.

Composes the runs, so it lives beside the report, above ``veotrace.runs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veotrace import registry
from veotrace.defaults import DIAGNOSE_HOLD_BYTES
from veotrace.errors import EXIT_CHECK_FAILED, UsageError, VeotraceError
from veotrace.findings.model import SEVERITIES, fmt_at, severity_at_least
from veotrace.findings.rules import RULES
from veotrace.reporting.timeline import AUTO, aligned_sources, collect, source_name
from veotrace.runs import common
from veotrace.runs.result import RunResult
from veotrace.sources.probe import Held


@dataclass
class DiagnoseRun(RunResult):
    """``diagnose``'s result: ``value`` is the ``DiagnoseResult``."""

    command = "diagnose"

    def tables(self) -> dict[str, Any]:
        from veotrace.schemas.findings import findings_table

        return {"findings": findings_table(self.value.findings)}

    def headline(self) -> list[tuple[str, Any]]:
        from veotrace.render.findings import severity_counts

        out = [("findings", severity_counts(self.value.findings))]
        for f in self.value.findings[:3]:
            out.append((f"{f.severity}: {fmt_at(f.axis, f.start)}", f.title))
        return out

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.findings import render_findings

        render_findings(console, self.value, max_rows=max_rows)

    def markdown(self) -> str:
        from veotrace.render.findings import findings_markdown

        return findings_markdown(self.value)


def diagnose(paths, *, fail_on: str | None = None, align: list[str] | None = None, frame_period: str | None = None,
             time_unit: str = "ns", skip_bad_rows: bool = False, format_hint: str | None = None,
             on_progress: common.Progress = None) -> DiagnoseRun:
    """Ranked findings over every input: what went wrong, when, in what order, and what to change.

    Args:
        fail_on: ``high``, ``medium`` or ``low``: exit code 3 when a finding of that severity or above exists.
        align: ``SOURCE=OFFSET`` (a file or folder name, a duration): that source's clock shifted by
            OFFSET on the common axis; for a frame table, where its frame 0 sits. ``SOURCE=auto``: aligned
            on the allocations it shares with the inputs on the common clock (as a source on a clock of
            its own is, when it shares any).
        frame_period: a frame table's frame period (``41.7ms``): its onset on the time axis (with --align).

    Raises:
        UsageError: an unknown severity or a bad --align (``auto`` with nothing shared to align on).
        VeotraceError: no input feeds an analysis.
    """
    from veotrace.reporting.run import planned

    if fail_on is not None and fail_on not in [s for s, _ in SEVERITIES]:
        raise UsageError(f"--fail-on must be one of {', '.join(s for s, _ in SEVERITIES)}, got {fail_on!r}")
    paths = common.as_paths(paths)
    offsets = _offsets(align or [])
    period = common.seconds(frame_period, "--frame-period")
    options, report = common.reading(time_unit, skip_bad_rows, format_hint)
    held = Held(DIAGNOSE_HOLD_BYTES)
    infos, _, jobs = planned(paths, options, held)
    runnable = [j for j in jobs if j.note is None and j.command in RULES]
    aligned_sources(runnable, infos, offsets)  # an --align naming no input: refused before any run
    reading = {"time_unit": time_unit, "skip_bad_rows": skip_bad_rows, "format_hint": format_hint}
    reads = _Reads(runnable, options, report, held)
    prepared = [(job, {**reading, **reads.given(n)}) for n, job in enumerate(runnable)]
    results = [(job, *ran) for job, ran in zip(runnable, _run_all(prepared, on_progress))]
    value = collect(infos, jobs, results, offsets=offsets, period=period, allocs=reads.allocs, options=options)
    value.params["fail_on"] = fail_on
    value.notes.extend(_mixed_folders(paths, infos))
    _with_read_warnings(value.findings, report.messages())
    findings = value.findings
    run = DiagnoseRun(value, [*report.messages()], common.input_files(paths))
    if fail_on is not None and severity_at_least(findings, fail_on):
        hits = severity_at_least(findings, fail_on)
        run.exit_code = EXIT_CHECK_FAILED
        run.closing.append(f"diagnose: {len(hits)} finding{'s' if len(hits) != 1 else ''} at or above {fail_on}; "
                           f"exit {EXIT_CHECK_FAILED} because of --fail-on")
    return run


#: The analyses that take an input's alloc/free events read already (``events_table``): one read of each
#: input feeds all of them.
READ_ONCE = ("entropy", "bursts", "fragmentation", "simulate", "tune")


class _Reads:
    """Each input's events for every analysis of ``READ_ONCE`` that reads it: the batches the description
    of the inputs read (``held``), or one read of the input when they were not kept (past the budget),
    each held while the analyses run (their workers inherit them). An input whose read fails is left to
    each analysis (which refuses it with its own message, as when run alone)."""

    def __init__(self, jobs: list, options, report, held) -> None:
        self.options, self.report, self.kept = options, report, held
        self.key = [tuple(j.paths) if j.command in READ_ONCE and not self._own_route(j) else None for j in jobs]
        self.names = [source_name(j) for j in jobs]
        #: Each source's allocations (``findings.align``), for aligning clocks on shared events.
        self.allocs: dict = {}
        self.tables: dict[tuple, object] = {}  # an input's events (None: its read failed)

    def _own_route(self, job) -> bool:
        """simulate and tune read a profiler trace by its own route (``runs.profiler.replay_input``: the rises of
        Total Reserved they validate against and the seed from its first totals are not in the common events;
        given those, diagnose's tune said its model was not validated, as tune alone does not)."""
        if job.command not in ("simulate", "tune"):
            return False
        from veotrace.runs.profiler import kineto_inputs
        from veotrace.sources import ReadReport

        return bool(kineto_inputs(list(job.paths), self.options, ReadReport()))

    def given(self, n: int) -> dict:
        """``{"events_table": table}`` for job ``n`` when its input's events can be read (else nothing)."""
        from veotrace.sources import read_table

        key = self.key[n]
        if key is None:
            return {}
        if key not in self.tables:
            try:
                table = self._kept(list(key))
                if table is None:
                    table = read_table(list(key), "alloc_events", options=self.options, report=self.report)
            except VeotraceError:
                table = None
            self.tables[key] = table
            from veotrace.findings.align import allocs_of

            found = allocs_of(table)
            if found is not None:
                self.allocs[self.names[n]] = found
        table = self.tables[key]
        return {} if table is None else {"events_table": table}

    def _kept(self, paths: list):
        """The events of ``paths`` from the batches kept, in the order a read of them gives (None unless
        every file's were kept)."""
        from veotrace.sources import ReadReport, alloc_events_table, resolve_inputs

        inputs = resolve_inputs(paths, "alloc_events", options=self.options, report=ReadReport())
        if not inputs or any(str(p) not in self.kept.batches for p, _ in inputs):
            return None
        for p, _ in inputs:  # what reading them said (a snapshot without time_us, rows skipped): said once, here
            said = self.kept.reports.pop(str(p), None)
            if said is not None:
                self.report.merge(said)
        return alloc_events_table([b for p, _ in inputs for b in self.kept.batches.pop(str(p))], self.options)


def _with_read_warnings(findings: list, read: list[str]) -> None:
    """Each finding also carries the warnings of reading its source (read once for every analysis, so
    they are diagnose's, not its command run's: the same lines the command alone prints)."""
    from veotrace.findings.weigh import command_notes

    for f in findings:
        names = f.source.split(", ")
        mine = [m for m in read if any(n in m for n in names)]
        if mine:
            f.notes = list(dict.fromkeys([*f.notes, *command_notes("", {}, mine)]))


def _mixed_folders(paths: list, infos: list) -> list[str]:
    """A note for each folder holding traces of several kinds (which a single command refuses,
    ``sources.resolve_inputs``): diagnose analyses each kind on its own."""
    from pathlib import Path

    from veotrace.sources.detect import RUN_KIND

    out = []
    for given in paths:
        if not isinstance(given, Path) or not given.is_dir():
            continue
        kinds: dict[str, list[str]] = {}
        for i in infos:
            if i.format in RUN_KIND and given in Path(i.path).parents:
                kinds.setdefault(RUN_KIND[i.format], []).append(Path(i.path).name)
        if len(kinds) > 1:
            out.append(f"{given}: holds {len(kinds)} kinds of trace ("
                       + "; ".join(f"{k}: {', '.join(v)}" for k, v in kinds.items())
                       + "), each analysed on its own (a single command refuses such a folder)")
    return out


def _offsets(align: list[str]) -> dict[str, float]:
    out = {}
    for a in align:
        name, sep, value = a.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"--align {a!r}: expected SOURCE=OFFSET or SOURCE=auto, e.g. frames.csv=12.5s")
        out[name.strip()] = AUTO if value.strip().lower() == AUTO else common.seconds(value.strip(), "--align")
    return out


class _Ran:
    """An analysis' result as a worker sends it back: its JSON and its stderr lines (notes, warnings), which
    are what ``collect`` reads of it."""

    def __init__(self, d: dict, messages: list[str]) -> None:
        self._d = d
        self.messages = messages

    def to_dict(self) -> dict:
        return self._d


#: (job, reading) of each analysis, set before the workers fork (they inherit it, events included).
_PREPARED: list = []


def _one(n: int) -> tuple:
    """Analysis ``n`` of ``_PREPARED``: (its result, or the error text of a run that refused its input; its
    command line)."""
    job, reading = _PREPARED[n]
    try:
        run, command = _run(registry.entry(job.command), job, reading)
    except VeotraceError as exc:
        return str(exc), job.cli
    return run, command


def _run_all(prepared: list, on_progress) -> list[tuple]:
    """Every analysis of ``prepared``, in order: on this process when there is one core or one analysis,
    else on forked workers, one per core (they inherit the events read, and send back each result's JSON)."""
    import os

    global _PREPARED
    _PREPARED = prepared
    workers = min(len(prepared), os.cpu_count() or 1)
    try:
        if workers <= 1:
            out = []
            for n in range(len(prepared)):
                if on_progress is not None:
                    on_progress(n, len(prepared))
                out.append(_one(n))
            return out
        import multiprocessing

        out: list = [None] * len(prepared)
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for k, (n, (res, command)) in enumerate(pool.imap_unordered(_numbered, range(len(prepared)))):
                if on_progress is not None:
                    on_progress(k, len(prepared))
                out[n] = (res, command)
        return out
    finally:
        _PREPARED = []


def _numbered(n: int) -> tuple:
    res, command = _one(n)
    return n, (res if isinstance(res, str) else _Ran(res.to_dict(), list(res.messages)), command)


def _run(entry, job, reading: dict) -> tuple[RunResult, str]:
    """The job's analysis run as the report runs it (its section's function, without the figure), and
    the command line that gives the same (the section's: simulate's policies, ...)."""
    from veotrace.reporting.run import Section

    section = Section(id="", title="", command=job.cli)
    run = registry.resolve(entry.section)(job, section, reading, None)
    return run, section.command
