"""A whole multi-source run with planted events at known places, for ``diagnose`` (issue 31).

Written into one folder:
- an alloc log (wall-clock times, from ``LOG_EPOCH_NS``) of ``hours`` hourly windows (``synth.gate``)
  whose size-class entropy steps up by ``entropy_step_bits`` from ``step_hour`` on;
- an Nsight Systems SQLite export of one hour of the run from ``nsys_hour`` on, on its own clock (ns
  since its session started ``NSYS_LEAD_S`` before that hour, as ``nsys profile`` records), with the
  log's allocations of that hour as its CUDA memory events (the same sizes and addresses: the shared
  events ``diagnose`` aligns the two clocks on) and kernels; from ``burst_s`` into that hour, a burst of
  ``burst_events`` allocations within one second, in the log and the export alike;
- an ncu details export whose kernels break at planted launches (``synth.ncu.planted_l2``);
- a frame table that loses coherence at ``onset_frame`` (``synth.frames.frame_metrics``).
A clean scenario plants nothing (step 0, no burst, no break, no onset), from the same generators and noise.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

#: The log's clock at its first event: 2026-01-01 00:00 UTC, in ns (a wall clock, as loggers write).
LOG_EPOCH_NS = 1_767_225_600 * 10**9
#: Seconds the nsys session ran before the profiled hour began (its clock's zero is the session's start).
NSYS_LEAD_S = 7.25
_BASE_ADDRESS = 0x7F00_0000_0000


@dataclass
class Scenario:
    """The files written and what was planted in them (times in seconds from the log's first event)."""

    folder: Path
    log: Path
    ncu: Path
    frames: Path
    step_hour: float | None
    entropy_step_bits: float
    l2_breaks: dict = field(default_factory=dict)  # kernel -> planted launch positions (in its series)
    onset_frame: int | None = None
    nsys: Path | None = None
    nsys_offset_ns: int | None = None  # the log's clock minus the export's
    burst_at_s: float | None = None  # the planted allocation burst's first event


def write_scenario(folder: Path, *, seed: int = 0, hours: int = 240, step_hour: int | None = 100,
                   entropy_step_bits: float = 0.2, l2_breaks: int = 2, onset_frame: int | None = 17,
                   nsys_hour: int | None = 150, burst_s: float | None = 1800.0, burst_events: int = 400) -> Scenario:
    """Write the scenario under ``folder`` (created); ``step_hour=None``, ``burst_s=None``, ``l2_breaks=0``,
    ``onset_frame=None`` plant nothing there; ``nsys_hour=None`` writes no nsys export."""
    from veotrace.synth.frames import frame_metrics
    from veotrace.synth.gate import gate_log
    from veotrace.synth.ncu import planted_l2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 50_000)
    cut = hours if step_hour is None else step_hour
    parts = [gate_log(seed=seed, windows=cut).table]
    if cut < hours:
        late = gate_log(seed=seed + 10_000, windows=hours - cut, shift_bits=entropy_step_bits).table
        parts.append(late.set_column(0, "ts_ns", pa.compute.add(late["ts_ns"], cut * 3600 * 10**9)))
    t = pa.concat_tables(parts)
    ts, size = t["ts_ns"].to_numpy(), t["size_bytes"].to_numpy()
    burst_at = None
    if nsys_hour is not None and burst_s is not None:  # sizes as the hour's own, packed into one second
        burst_at = nsys_hour * 3600 + burst_s
        hour = (ts >= nsys_hour * 3600 * 10**9) & (ts < (nsys_hour + 1) * 3600 * 10**9)
        extra = rng.choice(size[hour], burst_events)
        at = np.sort(round(burst_at * 1e9) + rng.integers(0, 10**9, burst_events))
        at[0] = round(burst_at * 1e9)
        order = np.argsort(np.concatenate([ts, at]), kind="stable")
        ts, size = np.concatenate([ts, at])[order], np.concatenate([size, extra])[order]
    address = _BASE_ADDRESS + np.cumsum(size) - size  # each allocation its own range, end to end (no free gap)
    log = folder / "alloc.log.csv"
    pa.csv.write_csv(pa.table({"timestamp": ts + LOG_EPOCH_NS, "op_type": pa.array(["alloc"] * ts.size),
                               "size_bytes": size, "address": address}), str(log))
    nsys = offset = None
    if nsys_hour is not None:
        nsys, offset = _nsys(folder / "profile.sqlite", seed, ts, size, address, nsys_hour)
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
                    {k: list(v) for k, v in l2.breaks.items()}, onset_frame, nsys, offset, burst_at)


def _nsys(path: Path, seed: int, ts: np.ndarray, size: np.ndarray, address: np.ndarray,
          hour: int) -> tuple[Path, int]:
    """The export of ``hour``: the log's allocations of that hour as memory events on the session's clock."""
    from veotrace.synth.nsys import write_export

    lo, hi = hour * 3600 * 10**9, (hour + 1) * 3600 * 10**9
    inside = (ts >= lo) & (ts < hi)
    zero = LOG_EPOCH_NS + lo - round(NSYS_LEAD_S * 1e9)  # the log's clock at the session's start
    n = int(inside.sum())
    rows = {"start": ts[inside] + LOG_EPOCH_NS - zero, "op": np.zeros(n, np.int64), "bytes": size[inside],
            "address": address[inside], "device": np.zeros(n, np.int64), "stream": np.full(n, 7),
            "mem_kind": np.full(n, 2)}
    write_export(path, seed=seed, generation="2024.6", kernels=300, memcpys=10, memsets=5, devices=1,
                 span_ns=hi - lo, memory_rows=rows)
    return path, zero
