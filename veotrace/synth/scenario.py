"""A whole multi-source run with planted events at known places, for ``diagnose`` (issue 31).

Written into one folder: an alloc log of ``hours`` hourly windows (``synth.gate``) whose size-class
entropy steps up by ``entropy_step_bits`` from ``step_hour`` on, an ncu details export whose kernels
break at planted launches (``synth.ncu.planted_l2``), and a frame table that loses coherence at
``onset_frame`` (``synth.frames.frame_metrics``). A clean scenario plants nothing (step 0, no break,
no onset), from the same generators and noise.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa


@dataclass
class Scenario:
    """The files written and what was planted in them."""

    folder: Path
    log: Path
    ncu: Path
    frames: Path
    step_hour: float | None
    entropy_step_bits: float
    l2_breaks: dict = field(default_factory=dict)  # kernel -> planted launch positions (in its series)
    onset_frame: int | None = None


def write_scenario(folder: Path, *, seed: int = 0, hours: int = 240, step_hour: int | None = 100,
                   entropy_step_bits: float = 0.2, l2_breaks: int = 2, onset_frame: int | None = 17) -> Scenario:
    """Write the scenario under ``folder`` (created); ``step_hour=None``, ``l2_breaks=0``, ``onset_frame=None``
    plant nothing there."""
    from veotrace.synth.frames import frame_metrics
    from veotrace.synth.gate import gate_log
    from veotrace.synth.ncu import planted_l2

    folder.mkdir(parents=True, exist_ok=True)
    cut = hours if step_hour is None else step_hour
    parts = [gate_log(seed=seed, windows=cut).table]
    if cut < hours:
        late = gate_log(seed=seed + 10_000, windows=hours - cut, shift_bits=entropy_step_bits).table
        parts.append(late.set_column(0, "ts_ns", pa.compute.add(late["ts_ns"], cut * 3600 * 10**9)))
    t = pa.concat_tables(parts)
    log = folder / "alloc.log.csv"
    pa.csv.write_csv(pa.table({"timestamp": t["ts_ns"], "op_type": t["op"].cast(pa.string()),
                               "size_bytes": t["size_bytes"]}), str(log))
    l2 = planted_l2(seed=seed, kernels=2, launches=120, breaks=l2_breaks, sigma=0.5, jump_sigmas=8.0)
    ncu = l2.write_details(folder / "ncu_details.csv")
    cols = frame_metrics(48, onset=onset_frame, noise=0.5, seed=seed)
    frames = folder / "frames.csv"
    with frames.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(cols))
        for row in zip(*(np.asarray(v).tolist() for v in cols.values())):
            w.writerow(row)
    return Scenario(folder, log, ncu, frames, step_hour if cut < hours else None, entropy_step_bits,
                    {k: list(v) for k, v in l2.breaks.items()}, onset_frame)
