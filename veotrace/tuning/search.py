"""The search: baselines first, then every candidate against the best finished one; the Pareto front;
the recommendation by a stated rule; and its robustness over parts of the trace (halves, phases).

Rule (``recommend``): among finished candidates that fit (no allocation over the capacity) and are not
known to misbehave, the least objective (default peak reserved bytes, summed over devices); ties by
fewest device allocations, then fewest flushes, then the shorter setting (fewer knobs changed).
Verdict (``verdict``): that candidate replaces the settings in use only when it lowers the objective by
the margin of ``defaults.TUNE_MIN_GAIN_SHARE`` / ``TUNE_MIN_GAIN_BYTES``; else the settings in use are
kept and the candidate (chosen by a tie-breaker, or by less than the margin) is a side note.
The front is over finished candidates: peak reserved against device allocations (each
``cudaMalloc``/``cudaFree`` synchronises the device: a speed cost), both minimised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from veotrace.defaults import TUNE_MIN_GAIN_BYTES, TUNE_MIN_GAIN_SHARE
from veotrace.tuning.evaluate import OBJECTIVES, evaluate, ranked

#: Candidates are first replayed on 1/PROBE_DIV of the requests, to order (and prune) the full runs.
PROBE_DIV = 16


def rank_key(row: dict, objective: str) -> tuple:
    """The recommendation rule's order (least first): the counters pruning compares, then the knobs."""
    return (*ranked(row, objective), len(row["settings"]), row["id"])


def choosable(row: dict, capacity) -> bool:
    """Finished, fits the capacity (when there is one), and not known to misbehave."""
    return row["status"] == "finished" and "misbehaves" not in row and (capacity is None or not row["ooms"])


def search(req, cands: Sequence, *, first: Sequence[int] = (), seed=None, capacity=None, core: str = "auto",
           objective: str = "peak-reserved", prune: bool = True, run_many: Callable | None = None, wave: int = 1,
           on_progress: Callable | None = None, settle: Callable | None = None) -> list[dict]:
    """Evaluate every candidate; returns one row per candidate, in candidate order.

    ``first``: indices run first and never pruned (the trace's own setting, PyTorch's defaults): their
    results set the first bound. With pruning, every other candidate is then probed on the first
    1/PROBE_DIV of the requests (those already past the bound there are pruned) and the rest run least
    probe first, each against the best finished so far. ``run_many(calls)``: runs ``[(candidate, bound,
    stop, prune), ...]`` elsewhere (a pool of processes, a Dask cluster) and returns their rows; candidates then
    go in waves of ``wave``, each wave against the best finished before it. ``settle(row)`` completes a
    finished row before it can set the bound (the recorded OOMs it counts, ``runs/tune.py``).
    """
    rows: dict[int, dict] = {}
    best: tuple | None = None

    def done(row):
        nonlocal best
        if settle is not None and row["status"] == "finished":
            settle(row)
        rows[row["id"]] = row
        if prune and choosable(row, capacity):
            value = ranked(row, objective)
            best = value if best is None else min(best, value)
        if on_progress is not None:
            on_progress(row)

    kw = {"seed": seed, "capacity": capacity, "core": core, "objective": objective, "prune": prune}

    def many(calls):  # [(candidate, bound, stop, prune)] -> rows, here or on the engine
        if run_many is not None:
            return run_many(calls)
        return [evaluate(req, c, bound=b, stop=stop, **{**kw, "prune": p}) for c, b, stop, p in calls]

    for row in many([(cands[i], None, None, False) for i in first]):  # the baselines: never stopped early
        done(row)
    rest = [c for c in cands if c.index not in rows]
    if prune and len(rest) > 1 and len(req) >= PROBE_DIV * 64:
        rest = _probe_order(rest, best, done, many, len(req) // PROBE_DIV, objective, capacity)
    step = max(1, wave) if run_many is not None else 1
    for k in range(0, len(rest), step):
        for row in many([(c, best, None, prune) for c in rest[k:k + step]]):
            done(row)
    return [rows[c.index] for c in cands]


def _probe_order(rest: list, best, done, many, stop: int, objective: str, capacity) -> list:
    """Every candidate on the first ``stop`` requests: those already past ``best`` there are pruned (a
    prefix's counters bound the whole run's from below), as are those over the capacity; the others,
    least first, so that the likely winner finishes early and prunes the rest sooner. Returns the order
    to run them in."""
    probes = []
    for c, row in zip(rest, many([(c, None, stop, True) for c in rest]), strict=True):
        if best is not None and ranked(row, objective) > best:
            row.update(status="pruned", why=f"past the best finished after the first {stop:,} requests")
            done(row)
        elif capacity is not None and row["ooms"]:
            row.update(status="pruned", why="an allocation did not fit the capacity")
            done(row)
        else:
            probes.append((ranked(row, objective), c.index, c))
    return [c for _, _, c in sorted(probes, key=lambda p: (p[0], p[1]))]


def pareto(rows: list[dict]) -> list[int]:
    """Ids of the finished candidates no other finished one beats on both peak reserved and device
    allocations (ties on both: the lower id stands for them)."""
    done = [r for r in rows if r["status"] == "finished"]
    front = []
    for r in done:
        a = (r["peak_reserved_bytes"], r["device_allocs"])
        if not any((o["peak_reserved_bytes"], o["device_allocs"]) <= a and
                   ((o["peak_reserved_bytes"], o["device_allocs"]) != a or o["id"] < r["id"]) for o in done):
            front.append(r["id"])
    return sorted(front, key=lambda i: next(r["peak_reserved_bytes"] for r in done if r["id"] == i))


def recommend(rows: list[dict], *, objective: str = "peak-reserved", capacity=None) -> dict | None:
    """The row the rule picks (see the module docstring), or None when no candidate can be chosen."""
    ok = [r for r in rows if choosable(r, capacity)]
    return min(ok, key=lambda r: rank_key(r, objective)) if ok else None


def savings(rec: dict, base: dict | None) -> dict | None:
    """What ``rec`` saves against ``base`` (positive: less), for the headline numbers."""
    if base is None:
        return None
    out = {"against": base["conf"] or "PyTorch defaults"}
    for k in ("peak_reserved_bytes", "device_allocs", "device_frees", "flushes"):
        out[k] = base[k] - rec[k]
    out["peak_reserved_share"] = (out["peak_reserved_bytes"] / base["peak_reserved_bytes"]
                                  if base["peak_reserved_bytes"] else None)
    return out


def robustness(rec_peaks: dict, base_peaks: dict, names: dict[int, str], against: str) -> dict:
    """The recommendation's saving in peak reserved bytes on each part of the trace (the halves, or the
    record_function phases) against one baseline's, summed over devices, flagged when it wins on part of
    the trace only (saves nothing, or loses, on a part while it saves on another)."""
    saved = {}
    for k, name in names.items():
        saved[name] = sum(base_peaks[d].get(k, 0) - rec_peaks.get(d, {}).get(k, 0) for d in base_peaks)
    part_only = any(v > 0 for v in saved.values()) and any(v <= 0 for v in saved.values())
    return {"against": against, "savings_bytes": saved, "wins_on_part_only": part_only}


def margin(base: dict, objective: str = "peak-reserved") -> int:
    """The least gain in ``objective`` that matters against ``base`` (a finished row): TUNE_MIN_GAIN_SHARE
    of its value, and at least TUNE_MIN_GAIN_BYTES for bytes (one large segment), one for a count."""
    key = OBJECTIVES[objective]
    floor = TUNE_MIN_GAIN_BYTES if key.endswith("_bytes") else 1
    return max(floor, int(-(-base[key] * TUNE_MIN_GAIN_SHARE // 1)))


def verdict(rec: dict, base: dict | None, objective: str = "peak-reserved", capacity=None) -> dict:
    """Whether ``rec`` (the rule's pick) is a gain over ``base`` (the settings in use, or PyTorch's defaults
    when the trace does not say): ``{"gain", "margin", "objective", "helps"}``; ``helps`` is False when the
    objective improves by less than :func:`margin` (a tie, or a difference that does not matter), and
    True without a baseline to compare with, or when the baseline cannot be chosen itself (it does not fit
    ``capacity``: a recorded OOM it runs into, or it is known to misbehave): then fitting is the gain."""
    if base is None or rec["id"] == base["id"]:
        return {"objective": objective, "gain": 0, "margin": None if base is None else margin(base, objective),
                "helps": base is None}
    if not choosable(base, capacity):
        return {"objective": objective, "gain": int(base[OBJECTIVES[objective]] - rec[OBJECTIVES[objective]]),
                "margin": margin(base, objective), "helps": True,
                "why": "the baseline does not fit (an OOM under the capacity) or is known to misbehave"}
    key = OBJECTIVES[objective]
    gain, need = base[key] - rec[key], margin(base, objective)
    return {"objective": objective, "gain": int(gain), "margin": need, "helps": gain >= need}


def kept(out: dict, base: dict, label: str, objective: str, *, has_settings: bool) -> dict:
    """The recommendation ``out`` (the rule's pick) turned into "keep the settings in use" when its
    ``verdict`` says it is no gain: ``base``'s numbers (``label``: what the trace says the job ran with), no
    line to paste, and the pick as ``side_note`` with its numbers (its export line, what it saves)."""
    from veotrace.units import gib

    v = out["verdict"]
    what = objective.replace("-", " ")
    in_bytes = OBJECTIVES[objective].endswith("_bytes")
    unit = gib if in_bytes else (lambda n: f"{n:,}")
    floor = f"one {gib(TUNE_MIN_GAIN_BYTES)} segment" if in_bytes else "one"
    s = (out["savings"] or [{}])[0]
    share = "" if s.get("peak_reserved_share") is None else f" ({s['peak_reserved_share']:.2%})"
    side = {"conf": out["conf"], "export": out.get("export"), "python": out.get("python"),
            "savings": out["savings"], "gain": v["gain"], "margin": v["margin"],
            "text": (f"tie-breaker, not a gain: {out.get('export') or out['conf']} gives {what} "
                     f"{unit(max(v['gain'], 0))}{share if in_bytes else ''} less and "
                     f"{_fewer(s.get('device_allocs', 0), 'device allocations')} against {label}")}
    keep = {k: v2 for k, v2 in out.items() if k not in ("export", "python", "savings")}
    keep.update({"conf": base["conf"], "id": base["id"], "in_use": bool(base.get("in_use")), "keep": True,
                 "export": None, "python": None, "savings": [], "side_note": side,
                 **{k: base[k] for k in ("peak_reserved_bytes", "device_allocs", "device_frees", "flushes", "ooms")},
                 "why": (f"no setting lowers {what} by a margin that matters ({unit(v['margin'])} here: the larger of "
                         f"{TUNE_MIN_GAIN_SHARE:.0%} of {what} under {label} and {floor}): keep "
                         + ("the settings in use" if has_settings else
                            "the settings in use (the trace does not say which: PyTorch's defaults assumed)"))})
    return keep


def _fewer(n: int, what: str) -> str:
    return f"{n:,} fewer {what}" if n > 0 else f"{-n:,} more {what}" if n < 0 else f"as many {what}"
