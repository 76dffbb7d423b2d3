"""Each timed analysis' own series on the common time axis, as a lane of the findings' timeline: the
entropy of each window, the worst device's external fragmentation of each window, the events of each
burst. At most LANE_POINTS points a lane (the largest value of each stretch kept, so a spike shows)."""

from __future__ import annotations

import numpy as np

from veotrace.findings.rules import Context

#: Points of a lane's series at most.
LANE_POINTS = 240


def _entropy(d: dict, ctx: Context) -> tuple[list, list, str]:
    w = [x for x in d.get("windows", []) if x.get("entropy_bits") is not None and x.get("start_ns") is not None]
    return [ctx.at(x["start_ns"]) for x in w], [x["entropy_bits"] for x in w], "size-class entropy (bits)"


def _fragmentation(d: dict, ctx: Context) -> tuple[list, list, str]:
    worst: dict[int, float] = {}
    for x in d.get("windows", []):
        if x.get("external_frag") is not None and x.get("start_ns") is not None:
            worst[x["start_ns"]] = max(worst.get(x["start_ns"], 0.0), x["external_frag"])
    t = sorted(worst)
    return [ctx.at(s) for s in t], [worst[s] for s in t], "external fragmentation (worst device)"


def _bursts(d: dict, ctx: Context) -> tuple[list, list, str]:
    b = [x for x in d.get("bursts", []) if x.get("start_ns") is not None]
    return [ctx.at(x["start_ns"]) for x in b], [x["events"] for x in b], "events per burst"


SERIES = {"entropy": _entropy, "fragmentation": _fragmentation, "bursts": _bursts}


def lane(analysis: str, d: dict, ctx: Context, command: str) -> dict | None:
    """The lane of one analysis' result ``d`` (its JSON), or None when it has no series in time."""
    fn = SERIES.get(analysis)
    if fn is None or ctx.t0_ns is None:
        return None
    t, v, label = fn(d, ctx)
    if not t:
        return None
    t, v = _thin(np.asarray(t, float), np.asarray(v, float))
    return {"source": ctx.source, "analysis": analysis, "command": command, "label": label,
            "t_s": t.tolist(), "value": v.tolist()}


def _thin(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most LANE_POINTS points: each stretch of points as its largest value, at that point's time."""
    if t.size <= LANE_POINTS:
        return t, v
    edges = np.linspace(0, t.size, LANE_POINTS + 1).astype(int)
    pick = np.array([a + int(np.argmax(v[a:b])) for a, b in zip(edges[:-1], edges[1:]) if b > a])
    return t[pick], v[pick]
