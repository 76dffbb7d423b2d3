"""Run ``--follow`` (issue 29): follow a growing log or a folder of rotated logs and hand each completed
window to ``emit`` as it completes (records of ``live.contract``), checkpointing to ``--state``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from veotrace.defaults import (
    BURSTS_GAP_MS,
    BURSTS_MIN_EVENTS,
    BURSTS_OPS,
    ENTROPY_MAX_CLASS,
    ENTROPY_MIN_CLASS,
    ENTROPY_OPS,
    ENTROPY_WINDOW_S,
    FOLLOW_POLL_S,
    FRAGMENTATION_BINS,
    FRAGMENTATION_MAX_GAP_BYTES,
    FRAGMENTATION_THRESHOLD,
    FRAGMENTATION_WINDOW_S,
    FRAGMENTATION_ZONE_BYTES,
)
from veotrace.runs import common

Emit = Callable[[dict], None]
Note = Callable[[str], None]


class Follower:
    """The loop's consumer (``live.follow.Consumer``): parses lines, feeds the windows, emits and checkpoints.

    Args:
        command: the command followed ("entropy"); windows: its open windows (``live.windows``).
        until_ns: stop once the log reaches this long after its first window's origin.
        on_window: called with each window's record before it is emitted (gate decides there).
    """

    def __init__(self, command, windows, tail, *, options, report, emit: Emit, note: Note, state: Path | None,
                 ident: dict, until_ns: int | None, columns) -> None:
        self.command, self.windows, self.tail = command, windows, tail
        self.options, self.report, self.emit, self.note = options, report, emit, note
        self.state, self.ident, self.until_ns, self.columns = state, ident, until_ns, columns
        self.fed = False
        self.printed = 0
        #: The gate's hooks: called with each window's record (may return a reason to stop), and
        #: (state to keep, restore from it) for the checkpoint.
        self.on_window: Callable[[dict], str | None] | None = None
        self.stop: str | None = None
        self.extra: tuple[Callable[[], dict], Callable[[dict], None], object] | None = None

    def feed(self, lines) -> None:
        from veotrace.live.tail import Piece
        from veotrace.sources.logs.lines import parse_lines

        self.fed = True
        piece = isinstance(lines, Piece)
        w = self.windows
        if hasattr(w, "add_piece") and (w.pieces > 0 if not piece else w.pieces == 0 and w.events_read > 0):
            from veotrace.errors import TraceFormatError

            raise TraceFormatError("the folder holds both alloc/free logs and PyTorch snapshot pieces, which do not "
                                   "replay as one run", path=lines.path,
                                   hint="Follow a folder of logs, or one of snapshot pieces (veotrace.live.torch_dump)")
        if piece:  # a PyTorch snapshot piece (live.torch_dump), read whole
            self.feed_piece(Path(lines.path))
            return
        batch = parse_lines(lines.data, shape=lines.shape, path=lines.path, first_line=lines.first_line, seq_start=0,
                            options=self.options, report=self.report, columns=self.columns)
        if batch is not None:
            self.windows.add(batch)

    def feed_piece(self, path: Path) -> None:
        """A snapshot piece's entries: fragmentation seeds its replay from the pieces' states
        (``add_piece``); the other analyses count the entries as a log's rows."""
        if hasattr(self.windows, "add_piece"):
            self.windows.add_piece(path, options=self.options, report=self.report)
            return
        from veotrace.sources import iter_alloc_events

        for batch in iter_alloc_events([path], options=self.options, report=self.report, columns=self.columns):
            self.windows.add(batch)

    def _print(self, rows: list[dict], complete: bool) -> None:
        from veotrace.live.contract import record

        for row in rows:
            rec = record(self.windows.record_kind, self.command, complete=complete, **row)
            hidden = {k: rec.pop(k) for k in [k for k in rec if k.startswith("_")]}
            self.emit(rec)
            self.printed += 1
            if self.on_window is not None:
                self.stop = self.on_window({**rec, **hidden})
                if self.stop is not None:  # the gate failed with --exit-on-fail: nothing after this window
                    return

    def after_poll(self) -> str | None:
        self._print(self.windows.complete(self.until_ns), True)
        if self.fed:
            self.checkpoint()
            self.fed = False
        if self.stop is not None:
            return self.stop
        return "until" if self.until_ns is not None and self.windows.reached(self.until_ns) else None

    def checkpoint(self) -> None:
        """Write the tail's generations and the open windows to ``--state`` (once the origin is settled)."""
        from veotrace.live.contract import generation_to_json, save_state

        open_windows = self.windows.to_state()
        if self.state is None or open_windows is None:
            return
        save_state(self.state, {**self.ident, "tail": [generation_to_json(g) for g in self.tail.generations()],
                                "windows": open_windows, **({"extra": self.extra[0]()} if self.extra else {})})

    def finish(self, reason: str) -> None:
        from veotrace.live.contract import record

        until = reason == "until"
        if reason != "failed":  # the gate stopped at its failing window: nothing after it
            self._print(self.windows.rest(self.until_ns if until else None), until)
        w = self.windows
        for line in self.report.messages():
            self.note(line)
        if self.tail.skipped:
            self.note(f"Warning: skipped {len(self.tail.skipped)} file(s) that are not alloc/free logs: "
                      + ", ".join(self.tail.skipped[:5]))
        if w.late_rows:
            self.note(f"Warning: {w.late_rows:,} rows were earlier than windows already printed (time going "
                      "backwards, e.g. across a rotation): they are left out of those windows")
        self.emit(record("end", self.command, reason=reason, events_read=w.events_read,
                         events_counted=w.events_counted, windows=self.printed, late_rows=w.late_rows,
                         skipped_rows=self.report.skipped_rows))


def follow_entropy(target, *, emit: Emit, note: Note, window: str | float | None = None,
                   step: str | float | None = None, ops: str | list[str] | None = None,
                   min_class: int = ENTROPY_MIN_CLASS, max_class: int = ENTROPY_MAX_CLASS, device: int | None = None,
                   time_unit: str = "ns", skip_bad_rows: bool = False, until: str | float | None = None,
                   idle_timeout: str | float | None = None, poll: str | float = FOLLOW_POLL_S,
                   state: Path | None = None, clock=None) -> str:
    """Follow ``target`` and emit each entropy window as it completes: the rows ``entropy`` gives on the
    finished log (the window is ``window``, default 300 s: following cannot choose one from the whole run).

    Args:
        emit, note: receive each record (``live.contract``) and each message for stderr.
        until: stop once the log reaches this long after its origin (trace time: ``2h``, ``90m``).
        idle_timeout: stop after this long without a new line (None: never); poll: seconds between looks.
        state: the checkpoint file: resumed from when it exists, rewritten (atomically) as windows complete.
        clock: ``live.follow.Clock`` (tests).

    Returns:
        Why following stopped: ``"until"``, ``"idle"`` or ``"interrupted"``.

    Raises:
        UsageError: impossible options. VeotraceError: bad input, a checkpoint of another run.
    """
    from veotrace.analysis.entropy.entropy import COLUMNS
    from veotrace.live.windows import EntropyWindows

    windows = EntropyWindows(window_s=ENTROPY_WINDOW_S if window is None else common.seconds(window, "--window"),
                             step_s=common.seconds(step, "--step"), ops=common.ops_list(ops, ENTROPY_OPS),
                             min_class=min_class, max_class=max_class, device=device)
    params = {"window_ns": windows.window_ns, "step_ns": windows.step_ns, "ops": windows.kw["ops"],
              "min_class": min_class, "max_class": max_class, "device": device,
              "time_unit": getattr(time_unit, "value", time_unit)}
    columns = list(COLUMNS) + (["device"] if device is not None else [])
    return run_follow("entropy", target, windows, params, columns, emit=emit, note=note, time_unit=time_unit,
                      skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                      clock=clock)


def follow_bursts(target, *, emit: Emit, note: Note, gap: str | float = f"{BURSTS_GAP_MS:g}ms",
                  ops: str | list[str] | None = None, min_events: int = BURSTS_MIN_EVENTS, time_unit: str = "ns",
                  skip_bad_rows: bool = False, until=None, idle_timeout=None, poll=FOLLOW_POLL_S,
                  state: Path | None = None, clock=None) -> str:
    """Follow ``target`` and emit each burst as it completes (the log reached ``gap`` past its last event):
    the rows ``bursts`` gives on the finished log. Arguments as :func:`follow_entropy` and ``bursts``."""
    from veotrace.analysis.bursts import bursts as analysis
    from veotrace.live.bursts import BurstWindows

    gap_ms = common.seconds(gap, "--gap", bare_unit="ms") * 1e3
    windows = BurstWindows(gap_ns=analysis.check_params(gap_ms, min_events), min_events=min_events, ops=common.ops_list(ops, BURSTS_OPS))
    params = {"gap_ns": windows.gap_ns, "min_events": min_events, "ops": windows.ops,
              "time_unit": getattr(time_unit, "value", time_unit)}
    return run_follow("bursts", target, windows, params, analysis.COLUMNS, emit=emit, note=note, time_unit=time_unit,
                      skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                      clock=clock)


def follow_fragmentation(target, *, emit: Emit, note: Note, window: str | float | None = None,
                         threshold: float = FRAGMENTATION_THRESHOLD, max_gap: str | int | None = None,
                         bins: str | list | None = None, zone_bytes: str | int | None = None, time_unit: str = "ns",
                         skip_bad_rows: bool = False, until=None, idle_timeout=None, poll=FOLLOW_POLL_S,
                         state: Path | None = None, clock=None) -> str:
    """Follow ``target`` and emit each fragmentation window (per device) as the replay closes it: the rows
    ``fragmentation`` gives on the finished log with the same ``window`` (default 300 s). ``state``: the
    checkpoint (the allocator state replayed so far, ``live.fragmentation``), as :func:`follow_entropy`."""
    from veotrace.frag.decode import COLUMNS
    from veotrace.live.fragmentation import FragWindows
    from veotrace.runs.fragmentation import parse_bins, zone_option

    windows = FragWindows(window_s=FRAGMENTATION_WINDOW_S if window is None else common.seconds(window, "--window"),
                          threshold=threshold,
                          max_gap=FRAGMENTATION_MAX_GAP_BYTES if max_gap is None else common.nbytes(max_gap, "--max-gap"),
                          bins=parse_bins(list(FRAGMENTATION_BINS) if bins is None else bins),
                          zone_bytes=zone_option(FRAGMENTATION_ZONE_BYTES if zone_bytes is None else zone_bytes))
    r = windows.replay
    params = {"window_ns": windows.window_ns, "threshold": r.threshold, "max_gap": r.max_gap,
              "bins": [list(b) for b in r.bins], "zone_bytes": r.layout.zone_bytes,
              "time_unit": getattr(time_unit, "value", time_unit)}
    return run_follow("fragmentation", target, windows, params, COLUMNS, emit=emit, note=note, time_unit=time_unit,
                      skip_bad_rows=skip_bad_rows, until=until, idle_timeout=idle_timeout, poll=poll, state=state,
                      clock=clock)


def run_follow(command: str, target, windows, params: dict, columns, *, emit: Emit, note: Note, time_unit,
               skip_bad_rows: bool, until, idle_timeout, poll, state, clock, on_window=None, extra=None) -> str:
    """The follow loop of ``command`` over its open ``windows`` (resumed from ``state`` when it exists)."""
    from veotrace.errors import UsageError
    from veotrace.live.contract import generation_from_json, identity, load_state
    from veotrace.live.follow import follow
    from veotrace.live.tail import Tail

    target = Path(target)
    poll_s = common.seconds(poll, "--poll")
    idle_s = common.seconds(idle_timeout, "--idle-timeout")
    until_s = common.seconds(until, "--until")
    if poll_s is None or poll_s <= 0:
        raise UsageError("--poll must be positive")
    options, report = common.reading(time_unit, skip_bad_rows)
    ident = identity(command, target, params)
    known = []
    if state is not None:
        saved = load_state(state, ident, windows.state_schema(), None if extra is None else extra[2])
        if saved is not None:
            known = [generation_from_json(g, target) for g in saved["tail"]]
            windows.from_state(saved["windows"])
            if extra is not None:
                extra[1](saved.get("extra") or {})
            note(f"Resuming from {state}: {windows.events_read:,} events read before")
    tail = Tail(target, known=known)
    consumer = Follower(command, windows, tail, options=options, report=report, emit=emit, note=note, state=state,
                        ident=ident, until_ns=None if until_s is None else round(until_s * 1e9), columns=columns)
    consumer.on_window, consumer.extra = on_window, extra
    return follow(tail, consumer, poll_s=poll_s, idle_s=idle_s, note=note, clock=clock)
