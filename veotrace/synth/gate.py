"""Seeded alloc logs for the gate: a known per-window entropy level, trend, shift and autocorrelated noise.

Window k's size classes are drawn from a discretised Gaussian over the 11 classes (4 KiB ... 4 MiB)
whose width gives entropy ``target_bits[k]``:

    target = base + shift + drift * t + extra_slope * (t - T/2) + AR(1) noise,   t = hours since start

so ``shift`` moves the mean (from hour ``shift_from_hour`` on: a step), ``extra_slope`` tilts the trend about the middle of the run without
moving the mean, and the AR(1) noise (lag-1 correlation ``ar``, standard deviation ``noise_bits``)
makes consecutive windows dependent, as in real jobs. Two logs with different seeds and the same
other arguments are "the same process"; ``events_per_window`` sets the multinomial sampling noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.synth.alloc import NS, class_size

_CLASSES = np.arange(2, 13)
_SIGMAS = np.geomspace(0.02, 60.0, 4000)


def _probs(sigma: np.ndarray) -> np.ndarray:
    z = (_CLASSES[None, :] - 7.0) / sigma[:, None]
    p = np.exp(-0.5 * z * z)
    return p / p.sum(axis=1, keepdims=True)


def _entropy(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log2(p), 0.0).sum(axis=1)


_H_OF_SIGMA = _entropy(_probs(_SIGMAS))  # increasing in sigma, 0 ... log2(11)


@dataclass
class GateLog:
    """The log (ALLOC_EVENTS columns ``ts_ns``, ``op``, ``size_bytes``; alloc only) and its ground truth."""

    table: pa.Table
    window_s: float
    target_bits: np.ndarray  # the entropy of each window's class distribution (before sampling)

    def write_csv(self, path: Path) -> Path:
        """Write the log as a canonical CSV log (timestamp ns, op_type, size_bytes)."""
        import pyarrow.csv as pacsv

        t = self.table
        pacsv.write_csv(pa.table({"timestamp": t["ts_ns"], "op_type": t["op"].cast(pa.string()),
                                  "size_bytes": t["size_bytes"]}), str(path))
        return Path(path)


def gate_log(
    *, seed: int = 0, windows: int = 240, window_s: float = 3600.0, events_per_window: int = 300,
    base_bits: float = 2.0, shift_bits: float = 0.0, drift_bits_per_hour: float = 0.0,
    extra_slope_bits_per_hour: float = 0.0, ar: float = 0.5, noise_bits: float = 0.08, shift_from_hour: float = 0.0,
) -> GateLog:
    """A seeded log of ``windows`` windows of ``window_s`` seconds (see the module docstring)."""
    rng = np.random.default_rng(seed)
    hours = np.arange(windows) * window_s / 3600.0
    noise = np.empty(windows)
    noise[0] = rng.normal(0.0, noise_bits)
    innov = rng.normal(0.0, noise_bits * np.sqrt(1 - ar * ar), windows)
    for k in range(1, windows):
        noise[k] = ar * noise[k - 1] + innov[k]
    span = hours[-1] if windows > 1 else 0.0
    target = (base_bits + shift_bits * (hours >= shift_from_hour) + drift_bits_per_hour * hours
              + extra_slope_bits_per_hour * (hours - span / 2) + noise)
    target = np.clip(target, _H_OF_SIGMA[0], _H_OF_SIGMA[-1])
    sigma = np.interp(target, _H_OF_SIGMA, _SIGMAS)
    p = _probs(sigma)
    counts = rng.multinomial(events_per_window, p)  # (windows, 11)
    cls = np.repeat(np.tile(_CLASSES, windows), counts.ravel())
    win = np.repeat(np.arange(windows), events_per_window)
    w_ns = int(window_s * NS)
    ts = win * w_ns + rng.integers(0, w_ns, win.size)
    ts[0] = 0  # the first event opens window 0 (windows start at the run's first event)
    op = pa.DictionaryArray.from_arrays(pa.array(np.zeros(win.size, np.int32)), pa.array(["alloc"]))
    table = pa.table({"ts_ns": pa.array(ts, pa.int64()), "op": op,
                      "size_bytes": pa.array(class_size(rng, cls), pa.int64())})
    return GateLog(table, window_s, _entropy(p))
