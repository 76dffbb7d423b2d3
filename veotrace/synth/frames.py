"""Synthetic data: address/EPE series with a known correlation, and per-frame metrics with a planted collapse."""

from __future__ import annotations

import numpy as np

BASE_ADDRESS = 0x7F00_0000_0000
MEAN_JUMP_BYTES = 4 << 20
SD_JUMP_BYTES = 256 << 10


def address_epe_series(n: int = 48, *, rho: float = 0.6, phi: float = 0.0, k: int = 1, seed: int = 0):
    """Frame addresses and per-transition EPE whose jump/EPE correlation is ``rho``.

    Both series are AR(1) with coefficient ``phi`` driven by innovations of correlation ``rho``, so
    the stationary correlation of jump and EPE is exactly ``rho``.

    Returns:
        (addresses uint64 (n,) or (n, k), epe float (n-1,), truth) with truth = {"rho", "jump_bytes"}.
    """
    rng = np.random.default_rng(seed)
    m = n - 1
    cov = np.array([[1.0, rho], [rho, 1.0]])
    e = rng.multivariate_normal([0.0, 0.0], cov, size=m + 200)
    z = np.zeros_like(e)
    for t in range(1, len(e)):  # burn-in of 200 so the start is stationary
        z[t] = phi * z[t - 1] + e[t]
    z = z[200:] / np.sqrt(1 / (1 - phi * phi))
    jump = np.round(MEAN_JUMP_BYTES + SD_JUMP_BYTES * z[:, 0]).astype(np.uint64)
    epe = 1.5 + 0.4 * z[:, 1]
    signs = rng.choice([-1, 1], size=m)
    addr = np.empty(n, dtype=np.uint64)
    addr[0] = BASE_ADDRESS
    for i in range(m):
        addr[i + 1] = addr[i] + jump[i] if signs[i] > 0 else addr[i] - jump[i]
    if k > 1:  # k tensors laid out at fixed offsets: every tensor jumps by the same amount
        addr = addr[:, None] + (np.arange(k, dtype=np.uint64) * np.uint64(1 << 20))[None, :]
    return addr, epe, {"rho": rho, "jump_bytes": jump}


def frame_metrics(n: int = 48, *, onset: int | None = 18, noise: float = 0.0, blip: int | None = None, seed: int = 0) -> dict:
    """Per-frame metrics (frame, id_match_rate, flow_l2_px, clip_entropy_bits, coherence_score).

    Every sign fires from ``onset`` on (None: never); ``blip`` plants a one-frame flow spike that
    ``--persist`` > 1 must ignore. ``noise`` scales Gaussian noise kept within the thresholds' margins.
    """
    rng = np.random.default_rng(seed)
    frames = np.arange(n)
    bad = np.zeros(n, bool) if onset is None else frames >= onset
    jitter = lambda scale: noise * scale * np.clip(rng.standard_normal(n), -2, 2)  # noqa: E731
    cols = {
        "frame": frames,
        "id_match_rate": np.where(bad, 0.40, 0.90) + jitter(0.05),
        "flow_l2_px": np.where(bad, 15.0, 3.0) + jitter(1.0),
        "clip_entropy_bits": np.where(bad, 3.6, 2.0) + jitter(0.1),
        "coherence_score": np.where(bad, 0.009, 0.124) + jitter(0.002),
    }
    if blip is not None:
        cols["flow_l2_px"][blip] = 20.0
    return cols
