"""Run `coherence`: a per-frame metrics table -> collapse signs per frame and the frame the collapse starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veotrace import defaults as d
from veotrace.errors import EXIT_CHECK_FAILED
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class CoherenceRun(RunResult):
    """``coherence``'s result: ``value`` is the ``CoherenceResult``."""

    command = "coherence"

    def tables(self) -> dict[str, Any]:
        return {"flags": self.value.flags}

    def headline(self) -> list[tuple[str, Any]]:
        res = self.value
        return [("onset frame", res.onset_frame if res.onset_frame is not None else "none"),
                ("signs at onset", ", ".join(res.onset_signs) or "-"), ("frames", res.n_frames)]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.coherence import render_coherence

        render_coherence(console, self.value, max_rows=max_rows)


def coherence(frames, *, frame_col: str | None = None, id_col: str | None = None, flow_col: str | None = None,
              entropy_col: str | None = None, score_col: str | None = None, id_min: float = d.COHERENCE_ID_MIN,
              flow_max: float = d.COHERENCE_FLOW_MAX_PX, entropy_max: float = d.COHERENCE_ENTROPY_MAX_BITS,
              score_min: float = d.COHERENCE_SCORE_MIN, score_drop: float = d.COHERENCE_SCORE_DROP,
              rule: str = d.COHERENCE_RULE, persist: int = d.COHERENCE_PERSIST,
              fail_on_collapse: bool = False) -> CoherenceRun:
    """At which frame a long video generation lost coherence: ID drift, flow jump, entropy jump and score collapse.

    Args:
        frames: a per-frame metrics table (CSV, Parquet, JSON Lines, or a generation service's JSON).
        frame_col, id_col, flow_col, entropy_col, score_col: the columns to read (default: the metrics' names).
        id_min, flow_max, entropy_max, score_min, score_drop: when each sign fires.
        rule: ``"any"``, ``"all"``, or the signs that must all fire.
        persist: consecutive frames the rule must hold for an onset.
        fail_on_collapse: exit code 3 when an onset is found.
    """
    from veotrace.analysis.frames.coherence import Thresholds, detect_collapse
    from veotrace.sources.frames import read_frame_metrics

    frames = Path(frames)
    names = {m: c for m, c in (("id_match_rate", id_col), ("flow_l2_px", flow_col),
                               ("clip_entropy_bits", entropy_col), ("coherence_score", score_col)) if c}
    table = read_frame_metrics(frames, frame_column=frame_col, names=names)
    thresholds = Thresholds(id_min, flow_max, entropy_max, score_min, score_drop)
    result = detect_collapse(table.frame, table.metrics, thresholds=thresholds, rule=rule, persist=persist,
                             frame_source=table.frame_source)
    run = CoherenceRun(result, [], common.input_files([frames]))
    if fail_on_collapse and result.onset_frame is not None:
        run.closing.append(f"Collapse: onset at frame {result.onset_frame} ({', '.join(result.onset_signs)}; rule "
                           f"{result.rule}, persist {result.persist}); exit {EXIT_CHECK_FAILED} because of --fail-on-collapse")
        run.exit_code = EXIT_CHECK_FAILED
    return run
