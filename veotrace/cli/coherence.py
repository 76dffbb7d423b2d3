"""`veotrace coherence`: at which frame did a long video generation lose coherence, and by which signs?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace import defaults as d
from veotrace.cli.app import app
from veotrace.cli.common import (
    FormatOpt,
    OutputFormat,
    OutputOpt,
    PlotOpt,
    PlotSizeOpt,
    RowsOpt,
    show,
    user_errors,
)


def _col(flag: str, metric: str):
    return typer.Option(flag, help=f"Column holding {metric} [default: {metric}, optional].")


@app.command("coherence")
def coherence_command(
    frames: Annotated[Path, typer.Argument(help="Per-frame metrics table: CSV, Parquet, JSON Lines, or a generation service's JSON {\"frames\": [...]}.")],
    frame_col: Annotated[str | None, typer.Option("--frame-col", help="Column of frame numbers [default: 'frame' if present, else row order from 0].")] = None,
    id_col: Annotated[str | None, _col("--id-col", "id_match_rate")] = None,
    flow_col: Annotated[str | None, _col("--flow-col", "flow_l2_px")] = None,
    entropy_col: Annotated[str | None, _col("--entropy-col", "clip_entropy_bits")] = None,
    score_col: Annotated[str | None, _col("--score-col", "coherence_score")] = None,
    id_min: Annotated[float, typer.Option("--id-min", help="ID drift when the ID match rate is below this.")] = d.COHERENCE_ID_MIN,
    flow_max: Annotated[float, typer.Option("--flow-max", help="Flow jump when the mean flow is above this (px).")] = d.COHERENCE_FLOW_MAX_PX,
    entropy_max: Annotated[float, typer.Option("--entropy-max", help="Entropy jump when the CLIP entropy is above this (bits).")] = d.COHERENCE_ENTROPY_MAX_BITS,
    score_min: Annotated[float, typer.Option("--score-min", help="Score collapse when the coherence score is below this.")] = d.COHERENCE_SCORE_MIN,
    score_drop: Annotated[float, typer.Option("--score-drop", help="... or when it drops this many times between frames and stays down (0 = off).")] = d.COHERENCE_SCORE_DROP,
    rule: Annotated[str, typer.Option("--rule", help="any, all, or signs that must all fire: id_drift,flow_jump,entropy_jump,score_collapse.")] = d.COHERENCE_RULE,
    persist: Annotated[int, typer.Option("--persist", help="The rule must hold this many consecutive frames for an onset.")] = d.COHERENCE_PERSIST,
    fail_on_collapse: Annotated[bool, typer.Option("--fail-on-collapse", help="Exit 3 when a collapse onset is found (for CI; input errors exit 1, usage errors 2).")] = False,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
    rows: RowsOpt = 40,
    plot: PlotOpt = None,
    plot_size: PlotSizeOpt = None,
) -> None:
    """At which frame a long video generation lost coherence: ID drift, flow jump, entropy jump and score collapse per frame.

    FRAMES is a per-frame metrics table with any of id_match_rate, flow_l2_px, clip_entropy_bits and
    coherence_score. --fail-on-collapse exits 3 when an onset is found.
    """
    with user_errors():
        from veotrace.runs.coherence import coherence

        result = coherence(frames, frame_col=frame_col, id_col=id_col, flow_col=flow_col, entropy_col=entropy_col,
                           score_col=score_col, id_min=id_min, flow_max=flow_max, entropy_max=entropy_max,
                           score_min=score_min, score_drop=score_drop, rule=rule, persist=persist,
                           fail_on_collapse=fail_on_collapse)
        show(result, fmt, output, rows=rows, plot=plot, plot_size=plot_size)
