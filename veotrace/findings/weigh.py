"""What a finding weighs and what it must say beside its title: the bytes at stake against the device's
scale (its impact), and the notes and warnings of the command that made it.

Impact of a finding about memory is the bytes at stake (cached but free, stranded, fragmented free bytes,
a saving) over the device's scale: its peak reserved (or peak live bytes without segments), since a
trace seldom records the device's capacity, and never under MIN_SCALE_BYTES, so that 90% of a 20 MiB
toy peak does not outrank 20 GiB pinned on a large device. One scale per device, shared by every rule.
"""

from __future__ import annotations

from veotrace.units import gib  # noqa: F401 (the rules spell bytes with it; it lives in units for tune too)

#: The least a device's scale is taken to be (8 GiB: the smallest GPU memory a training or inference job
#: worth diagnosing runs on); a trace's own peak under it is not its device's size.
MIN_SCALE_BYTES = 8 << 30


def impact(bytes_at_stake: int | float | None, peak_bytes: int | float | None) -> float:
    """``bytes_at_stake`` over the device's scale: its peak (``peak_bytes``), at least MIN_SCALE_BYTES."""
    if not bytes_at_stake or bytes_at_stake <= 0:
        return 0.0
    return min(1.0, float(bytes_at_stake) / max(float(peak_bytes or 0), MIN_SCALE_BYTES))


def command_notes(command: str, d: dict, messages=()) -> list[str]:
    """Every note and warning of a command, for each of its findings: the lines it printed on stderr
    before its result (``messages``: skipped rows, counted problems, read warnings) and those its JSON
    ``d`` carries (the window it chose, idle gaps, segments that disagree with the trace, a model not
    validated on the trace), each once, without its ``Note:``/``Warning:`` prefix."""
    s = d.get("summary") or {}
    out = [str(n) for n in [*messages, *(s.get("notes") or []), *(d.get("notes") or [])] if n]
    disagree = s.get("segments_disagree")
    if disagree:
        out.append(f"{' and '.join(disagree['hold'])} hold; {'; '.join(disagree['do_not_hold'])}")
    choice = s.get("window_choice")
    if choice and choice.get("reason") and not any(choice["reason"] in str(n) for n in out):  # said once
        w = choice["window_s"]
        out.append(f"windows of {w:g} s: {choice['reason']}" if w >= 1 else f"windows of {w * 1e3:g} ms: {choice['reason']}")
    trust = ((d.get("recommendation") or {}).get("trust")) or {}
    if command == "tune" and trust and not trust.get("ran", trust.get("validated")):  # ran and failed: said apart
        out.append("the torch model is not validated on this trace (nothing recorded to check its replay against)")
    return list(dict.fromkeys(n.removeprefix("Note: ").removeprefix("note: ").removeprefix("Warning: ") for n in out))
