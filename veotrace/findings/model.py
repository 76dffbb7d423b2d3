"""The finding record, its severity and ranking, and the links between findings by time order.

A finding's ``impact`` (0..1) is the share of something the run lost or risked: for memory, the bytes at
stake against the device's scale (``findings.weigh``); else events, frames, launches (each rule says
which). Its ``confidence`` (0..1) how sure the statistic behind it is; its
``score`` is their product and its severity follows from the score (:data:`SEVERITIES`), unless the finding
is a note (``note``: why it is not ranked among the problems: a trend over one pass, the state the program
released itself with ``empty_cache()``): a note ranks after every other finding and never fails a gate. Time is one
axis for every source that has a clock: seconds since the earliest first event of the inputs
(``t_s``); sources without one (ncu launches, frame indices without timestamps) keep their own axis
(``launch``, ``frame``) until ``--align`` maps them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Severity by score (impact x confidence), highest first.
SEVERITIES = (("high", 0.5), ("medium", 0.2), ("low", 0.0))
#: The severity of a finding said as a note (``Finding.note``): below low, never counted by --fail-on.
NOTE = "note"
#: Every severity a finding can have, highest first.
SEVERITY_NAMES = (*(name for name, _ in SEVERITIES), NOTE)
#: Axes a finding's span may be on.
AXES = ("time", "launch", "frame", "event", "none")


@dataclass
class Finding:
    """One thing that went wrong, with where it shows."""

    kind: str
    title: str
    source: str
    axis: str  # "time" (seconds on the common axis), "launch", "frame", "event" (a trace without times), or "none"
    start: float | None
    end: float | None
    impact: float
    confidence: float
    evidence: dict
    command: str
    suggestion: str | None = None
    links: list[str] = field(default_factory=list)
    #: Which clock the time axis is for this finding (inputs on different clocks are never linked).
    clock: str | None = None
    #: The bytes the finding is about (cached but free, stranded, saved, requested), when it is about memory.
    bytes_at_stake: int | None = None
    #: The notes and warnings of the command that made it (``findings.weigh.command_notes``).
    notes: list[str] = field(default_factory=list)
    #: Why this finding is a note rather than a problem ranked by its score (None: it is ranked).
    note: str | None = None

    @property
    def score(self) -> float:
        return max(0.0, min(1.0, self.impact)) * max(0.0, min(1.0, self.confidence))

    @property
    def severity(self) -> str:
        if self.note:
            return NOTE
        return next(name for name, floor in SEVERITIES if self.score >= floor)

    def as_note(self, why: str) -> Finding:
        """This finding said as a note, ``why`` in its title's words (kept in ``note`` and its evidence)."""
        self.note = why
        self.evidence = {**self.evidence, "note": why}
        return self

    def to_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "score": round(self.score, 4), "title": self.title,
                "source": self.source, "axis": self.axis, "start": self.start, "end": self.end,
                "impact": round(self.impact, 4), "confidence": round(self.confidence, 4),
                "bytes_at_stake": self.bytes_at_stake, "evidence": self.evidence, "notes": self.notes,
                "note": self.note,
                "command": self.command, "suggestion": self.suggestion, "links": self.links}


def rank(findings: list[Finding]) -> list[Finding]:
    """Highest score first, notes after every other finding; ties by earlier start on the common axis, then kind."""
    return sorted(findings, key=lambda f: (bool(f.note), -f.score, f.start if f.axis == "time" and f.start is not None else float("inf"),
                                           f.kind, f.title))


def severity_at_least(findings: list[Finding], level: str) -> list[Finding]:
    """The findings of ``level`` or above (``high`` > ``medium`` > ``low``; a note is none of them)."""
    order = list(SEVERITY_NAMES)
    return [f for f in findings if f.severity != NOTE and order.index(f.severity) <= order.index(level)]


def link(findings: list[Finding]) -> None:
    """For each finding on the time axis, what happened before and after it on that axis (among the
    findings of the same clock), by time only ("40.0 min before: the L2 break ..."). Never a cause:
    the words say order and distance."""
    clocks: dict = {}
    for f in findings:
        if f.axis == "time" and f.start is not None:
            clocks.setdefault(f.clock, []).append(f)
    for timed in clocks.values():
        _link(sorted(timed, key=lambda f: f.start))


def _link(timed: list[Finding]) -> None:
    for i, f in enumerate(timed):
        if i + 1 < len(timed):
            nxt = timed[i + 1]
            f.links.append(f"{fmt_span(nxt.start - f.start)} before: {nxt.title}")
        if i > 0:
            prev = timed[i - 1]
            f.links.append(f"{fmt_span(f.start - prev.start)} after: {prev.title}")


def fmt_span(seconds: float) -> str:
    """A duration for a sentence: 40.0 min, 3.2 h, 250 ms."""
    s = abs(seconds)
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if s >= size * 0.9995:  # 999.7 ms reads 1.0 s, not 1000 ms
            return f"{s / size:.1f} {unit}"
    return f"{s * 1e3:.0f} ms"


def fmt_at(axis: str, value: float | None) -> str:
    """Where a finding starts, in its axis' words."""
    if value is None or axis == "none":
        return "whole run"
    if axis == "time":
        return f"{value / 3600:.1f} h" if value >= 7200 else fmt_span(value)
    return f"{axis} {int(value):,}"
