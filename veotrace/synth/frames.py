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


#: Healthy and collapsed level of each metric; the thresholds in analysis/defaults.py lie between.
LEVELS = {  # metric: (healthy, collapsed, noise scale)
    "id_match_rate": (0.90, 0.40, 0.05),
    "flow_l2_px": (3.0, 15.0, 1.0),
    "clip_entropy_bits": (2.0, 3.6, 0.1),
    "coherence_score": (0.124, 0.009, 0.002),
}
SIGN_OF = {"id_match_rate": "id_drift", "flow_l2_px": "flow_jump", "clip_entropy_bits": "entropy_jump",
           "coherence_score": "score_collapse"}


def frame_metrics(
    n: int = 48,
    *,
    onset: int | None = 18,
    noise: float = 0.0,
    blip: int | None = None,
    signs: tuple[str, ...] | None = None,
    seed: int = 0,
) -> dict:
    """Per-frame metrics (frame, id_match_rate, flow_l2_px, clip_entropy_bits, coherence_score).

    The planted signs (``signs``; None = all four) fire from row ``onset`` on (None: never), the
    others stay healthy throughout; ``blip`` plants a one-frame flow spike that ``--persist`` > 1
    must ignore. ``noise`` scales Gaussian noise clipped at 2 sd, which keeps every value on its
    side of the default thresholds (and one-frame score ratios below the default drop factor).
    """
    rng = np.random.default_rng(seed)
    frames = np.arange(n)
    bad = np.zeros(n, bool) if onset is None else frames >= onset
    cols: dict = {"frame": frames}
    for metric, (good, collapsed, scale) in LEVELS.items():
        planted = signs is None or SIGN_OF[metric] in signs
        level = np.where(bad & planted, collapsed, good)
        cols[metric] = level + noise * scale * np.clip(rng.standard_normal(n), -2, 2)
    if blip is not None:
        cols["flow_l2_px"][blip] = 20.0
    return cols


def frame_rows(cols: dict) -> list[dict]:
    """The columns of ``frame_metrics`` as one dict per frame (JSON Lines rows, a service's "frames")."""
    names = list(cols)
    return [dict(zip(names, values)) for values in zip(*(np.asarray(cols[k]).tolist() for k in names))]


def generation_response(cols: dict, *, job_id: str = "gen-0001", model: str = "video-gen-synthetic") -> dict:
    """A generation service's JSON answer carrying per-frame metrics: {"job_id", "model", "frames": [...]}."""
    return {"job_id": job_id, "model": model, "num_frames": len(cols["frame"]), "frames": frame_rows(cols)}
