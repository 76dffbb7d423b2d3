"""Analysis layer: collapse signs per frame of a long video generation and the frame the collapse starts.

Four signs, each from one metric (a sign is unknown where its metric is missing):

- ``id_drift``: tracker cross-frame ID match rate below ``id_min``;
- ``flow_jump``: mean inter-frame flow displacement above ``flow_max_px``;
- ``entropy_jump``: image-text alignment entropy above ``entropy_max_bits``;
- ``score_collapse``: coherence score below ``score_min``, or at least ``score_drop`` times lower than
  the score just before a one-frame drop of that size (0.124 -> 0.009 is 13.8x). The drop test stays
  fired while the score remains that far below the pre-drop level, so a collapse that stays low keeps
  counting frames for ``persist`` even when ``score_min`` is set low.

The onset is the first frame from which the rule holds on ``persist`` consecutive rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from veotrace.defaults import (
    COHERENCE_ENTROPY_MAX_BITS,
    COHERENCE_FLOW_MAX_PX,
    COHERENCE_ID_MIN,
    COHERENCE_PERSIST,
    COHERENCE_RULE,
    COHERENCE_SCORE_DROP,
    COHERENCE_SCORE_MIN,
)
from veotrace.errors import AnalysisError, UsageError
from veotrace.schemas.frames import FRAME_FLAGS, SIGNS

#: sign -> (metric, the option that names its column)
SIGN_METRIC = {
    "id_drift": ("id_match_rate", "--id-col"),
    "flow_jump": ("flow_l2_px", "--flow-col"),
    "entropy_jump": ("clip_entropy_bits", "--entropy-col"),
    "score_collapse": ("coherence_score", "--score-col"),
}


@dataclass(frozen=True)
class Thresholds:
    """Where each sign fires; every value has a CLI option."""

    id_min: float = COHERENCE_ID_MIN
    flow_max_px: float = COHERENCE_FLOW_MAX_PX
    entropy_max_bits: float = COHERENCE_ENTROPY_MAX_BITS
    score_min: float = COHERENCE_SCORE_MIN
    score_drop: float = COHERENCE_SCORE_DROP  # 0 turns the drop test off

    def check(self) -> None:
        for name, value in self.__dict__.items():
            if not math.isfinite(value):
                raise UsageError(f"threshold {name} must be a finite number, got {value}")
        if self.score_drop != 0 and self.score_drop <= 1:
            raise UsageError(f"--score-drop must be above 1 (a factor of decrease), or 0 to turn it off; got {self.score_drop}")


@dataclass
class CoherenceResult:
    """Per-frame signs, the rule and the onset frame (None when the rule never holds long enough)."""

    onset_frame: int | None
    onset_signs: list[str]  # the signs that fired at the onset frame
    rule: str
    rule_signs: list[str]
    persist: int
    n_frames: int
    frame_source: str
    signs: dict[str, dict]
    flags: object  # pyarrow.Table, schema FRAME_FLAGS

    def to_dict(self) -> dict:
        return {
            "onset_frame": self.onset_frame, "collapsed": self.onset_frame is not None, "onset_signs": self.onset_signs,
            "rule": self.rule, "rule_signs": self.rule_signs, "persist": self.persist, "n_frames": self.n_frames,
            "frame_source": self.frame_source, "signs": self.signs, "frames": self.flags.to_pylist(),
        }


def parse_rule(rule: str) -> tuple[str, list[str] | None]:
    """("any" | "all" | "signs", the listed signs or None).

    Raises:
        UsageError: an empty rule or an unknown sign.
    """
    text = rule.strip().lower()
    if text in ("any", "all"):
        return text, None
    listed = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in listed if s not in SIGNS]
    if not listed or unknown:
        raise UsageError(f"--rule must be any, all, or a comma-separated list of {', '.join(SIGNS)}; got {rule!r}")
    return "signs", list(dict.fromkeys(listed))


def _score_collapse(score: np.ndarray, score_min: float, factor: float) -> np.ndarray:
    fired = score < score_min
    if factor == 0:
        return fired
    ref: float | None = None  # the score before the latest big drop, while the score stays that far down
    prev: float | None = None
    for t, s in enumerate(score.tolist()):
        if math.isnan(s):
            continue
        if prev is not None and prev > 0 and s * factor <= prev:
            ref = prev if ref is None else max(ref, prev)
        if ref is not None and s * factor > ref:
            ref = None
        fired[t] |= ref is not None
        prev = s
    return fired


def sign_values(metrics: dict[str, np.ndarray], th: Thresholds) -> dict[str, np.ndarray | None]:
    """Each sign per frame as float (1 fired, 0 not, NaN unknown); None when its metric is absent."""
    tests = {
        "id_drift": lambda v: v < th.id_min,
        "flow_jump": lambda v: v > th.flow_max_px,
        "entropy_jump": lambda v: v > th.entropy_max_bits,
        "score_collapse": lambda v: _score_collapse(v, th.score_min, th.score_drop),
    }
    out: dict[str, np.ndarray | None] = {}
    for sign, test in tests.items():
        values = metrics.get(SIGN_METRIC[sign][0])
        if values is None:
            out[sign] = None
            continue
        fired = test(values).astype(np.float64)
        fired[np.isnan(values)] = np.nan
        out[sign] = fired
    return out


def onset_index(holds: np.ndarray, persist: int) -> int | None:
    """First row i with holds[i : i + persist] all True (None if none)."""
    if holds.size < persist:
        return None
    window = np.convolve(holds.astype(np.int64), np.ones(persist, dtype=np.int64), mode="valid")
    hits = np.flatnonzero(window == persist)
    return int(hits[0]) if hits.size else None


def detect_collapse(
    frame: np.ndarray,
    metrics: dict[str, np.ndarray],
    *,
    thresholds: Thresholds = Thresholds(),
    rule: str = COHERENCE_RULE,
    persist: int = COHERENCE_PERSIST,
    frame_source: str = "column 'frame'",
) -> CoherenceResult:
    """Per-frame collapse signs, the rule per frame and the onset frame.

    Args:
        frame: int64 frame numbers, increasing (one row per frame).
        metrics: metric name (id_match_rate, flow_l2_px, clip_entropy_bits, coherence_score) -> float
            values aligned with ``frame``, NaN where unknown; absent metrics make their sign unknown.
        rule: "any" (some available sign fires), "all" (every available sign fires), or a
            comma-separated list of signs that must all fire.
        persist: the rule must hold on this many consecutive rows for the first of them to be the onset.

    Raises:
        UsageError: bad rule, persist < 1, bad thresholds.
        AnalysisError: the rule names a sign whose metric is absent.
    """
    import pyarrow as pa

    if persist < 1:
        raise UsageError(f"--persist must be at least 1, got {persist}")
    thresholds.check()
    mode, listed = parse_rule(rule)
    values = sign_values(metrics, thresholds)
    available = [s for s in SIGNS if values[s] is not None]
    if listed is not None:
        absent = [s for s in listed if values[s] is None]
        if absent:
            metric, opt = SIGN_METRIC[absent[0]]
            raise AnalysisError(
                f"--rule uses {absent[0]} but the table has no {metric} column",
                hint=f"Metrics found: {', '.join(m for m in metrics) or 'none'}; name the column with {opt}",
            )
    used = listed if listed is not None else available
    stacked = np.stack([values[s] for s in used]) if used else np.zeros((0, frame.size))
    holds = (stacked == 1).any(axis=0) if mode == "any" else (stacked == 1).all(axis=0)
    start = onset_index(holds, persist)
    collapsed = np.zeros(frame.size, dtype=bool) if start is None else np.arange(frame.size) >= start
    columns = {"frame": frame, **{m: metrics.get(m) for m, _ in SIGN_METRIC.values()}}
    for s in SIGNS:
        v = values[s]
        columns[s] = None if v is None else pa.array(v == 1, mask=np.isnan(v))
    columns.update(rule_holds=holds, collapsed=collapsed)
    n = frame.size
    flags = pa.table({k: (pa.nulls(n, FRAME_FLAGS.field(k).type) if v is None else v) for k, v in columns.items()},
                     schema=FRAME_FLAGS)
    signs = {s: _sign_summary(s, values[s], frame, thresholds) for s in SIGNS}
    onset_signs = [] if start is None else [s for s in SIGNS if values[s] is not None and values[s][start] == 1]
    return CoherenceResult(
        None if start is None else int(frame[start]), onset_signs, rule.strip().lower(), list(used), persist, int(n),
        frame_source, signs, flags,
    )


def _sign_summary(sign: str, fired: np.ndarray | None, frame: np.ndarray, th: Thresholds) -> dict:
    metric = SIGN_METRIC[sign][0]
    threshold, direction = {
        "id_drift": (th.id_min, "below"), "flow_jump": (th.flow_max_px, "above"),
        "entropy_jump": (th.entropy_max_bits, "above"), "score_collapse": (th.score_min, "below"),
    }[sign]
    out = {"metric": metric, "threshold": threshold, "fires_when": direction, "available": fired is not None}
    if sign == "score_collapse":
        out["drop_factor"] = th.score_drop
    frames = [] if fired is None else frame[fired == 1].tolist()
    out.update(frames=frames, count=len(frames), first_frame=frames[0] if frames else None,
               unknown=0 if fired is None else int(np.isnan(fired).sum()))
    return out
