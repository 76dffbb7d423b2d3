"""Seeded Nsight Compute exports (details page and raw page) with planted L2 shifts, with the answer.

Each kernel's launches form regimes. At every planted break the L2 hit rate steps by
``jump_sigmas * sigma`` (or by 5-15 points when ``sigma`` is 0, the clean case), and the regime's
other L2 metrics change with it, so the rule presets have a known answer at each break:

- ``lts__throughput.avg.pct_of_peak_sustained_elapsed``: 80 or 50 (% of peak) per regime;
- ``lts__t_sectors.sum`` / ``lts__t_requests.sum``: 4 or 1 sectors per request (128 B or 32 B);
- ``lts__t_sectors_op_read.sum``: a per-launch read-sector level, x1 or x4 per regime.

Launches of all kernels interleave in ncu ID order; each kernel's series keeps its own order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HIT = "lts__t_sector_hit_rate.pct"
THROUGHPUT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
SECTORS = "lts__t_sectors.sum"
REQUESTS = "lts__t_requests.sum"
READ_SECTORS = "lts__t_sectors_op_read.sum"
DURATION = "gpu__time_duration.sum"
#: metric -> unit as ncu writes it.
METRICS = {HIT: "%", THROUGHPUT: "%", SECTORS: "sector", REQUESTS: "request", READ_SECTORS: "sector", DURATION: "ns"}
SECTION = "Command line profiler metrics"
LEADING = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
           "Grid Size", "Device", "CC")
DETAILS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
KERNEL_NAMES = ("sgemm_128x64_nn(float const*, float*, int)", "reduce_sum<256>(float*, int)",
                "<unnamed>::saxpy_kernel(float, const float *, float *, int)", "layernorm_fwd", "softmax_bwd",
                "attention_qk", "conv2d_3x3", "embedding_gather")


@dataclass
class PlantedL2:
    """Per kernel: the series of every metric (launch order), launch IDs and the planted breaks.

    ``breaks[k]`` are 0-based positions in kernel k's series of the first launch of each new regime;
    ``rules[k][j]`` the rule presets that hold at break j (names as in ``analysis.l2rules``).
    """

    kernels: list[str]
    ids: dict[str, np.ndarray]
    series: dict[str, dict[str, np.ndarray]]
    breaks: dict[str, list[int]]
    rules: dict[str, list[list[str]]]
    sigma: float
    order: np.ndarray = field(repr=False)  # kernel index of each launch, in ID order

    def miss_rate(self, kernel: str) -> np.ndarray:
        return 100.0 - self.series[kernel][HIT]

    def _launches(self):
        pos = dict.fromkeys(self.kernels, 0)
        for launch, k in enumerate(self.order.tolist()):
            name = self.kernels[k]
            yield launch, name, pos[name]
            pos[name] += 1

    def details_lines(self, *, separators: bool = True) -> list[str]:
        """The lines of ``ncu --csv`` (details page, ncu 2025+ header), app output and ==PROF== first."""
        out = ["Starting...", "==PROF== Connected to process 4242 (/usr/bin/python3)",
               "==PROF== Disconnected from process 4242", _q(LEADING + DETAILS)]
        for launch, name, i in self._launches():
            lead = _lead(launch, name)
            for metric, unit in METRICS.items():
                out.append(lead + "," + _q((SECTION, metric, unit, _num(self.series[name][metric][i], separators))))
        return out

    def raw_lines(self, *, separators: bool = True) -> list[str]:
        """The lines of ``ncu --csv --page raw``: header, units row, one row per launch."""
        names = list(METRICS)
        out = ["==PROF== Connected to process 4242 (/usr/bin/python3)", _q(LEADING + tuple(names)),
               _q(("",) * len(LEADING) + tuple(METRICS[m] for m in names))]
        for launch, name, i in self._launches():
            out.append(_lead(launch, name) + "," + _q(_num(self.series[name][m][i], separators) for m in names))
        return out

    def write_details(self, path: Path, **kw) -> Path:
        path.write_text("\n".join(self.details_lines(**kw)) + "\n")
        return path

    def write_raw(self, path: Path, **kw) -> Path:
        path.write_text("\n".join(self.raw_lines(**kw)) + "\n")
        return path


def _q(fields) -> str:
    return ",".join(f'"{f}"' for f in fields)


def _lead(launch: int, kernel: str) -> str:
    return _q((launch, 4242, "python3", "127.0.0.1", kernel, 1, 7, "(256, 1, 1)", "(1024, 1, 1)", 0, "8.0"))


def _num(v: float, separators: bool) -> str:
    return f"{v:,.4f}" if separators else f"{v:.4f}"


def _break_positions(rng: np.random.Generator, n: int, k: int, min_gap: int) -> list[int]:
    """k sorted break positions in (0, n) with every regime at least min_gap long."""
    if k == 0:
        return []
    slack = n - (k + 1) * min_gap
    if slack < 0:
        raise ValueError(f"{k} breaks with regimes of {min_gap} do not fit in {n} launches")
    cuts = np.sort(rng.integers(0, slack + 1, k))
    return [int(c + (j + 1) * min_gap) for j, c in enumerate(cuts)]


def planted_l2(
    *, seed: int = 0, kernels: int = 3, launches: int | list[int] = 300, breaks: int | list[int] = 3,
    sigma: float = 0.0, jump_sigmas: float = 2.0, min_gap: int = 20,
) -> PlantedL2:
    """Kernels with planted L2 regimes (see module docstring).

    Args:
        launches: launches per kernel (one number or one per kernel).
        breaks: planted breaks per kernel.
        sigma: noise standard deviation of the hit rate (points of %); 0 = clean data.
        jump_sigmas: hit-rate step at a break, in units of sigma (when sigma > 0).
        min_gap: fewest launches in a regime.
    """
    rng = np.random.default_rng(seed)
    names = [KERNEL_NAMES[i % len(KERNEL_NAMES)] + ("" if i < len(KERNEL_NAMES) else f"_{i}") for i in range(kernels)]
    ns = [launches] * kernels if isinstance(launches, int) else list(launches)
    ks = [breaks] * kernels if isinstance(breaks, int) else list(breaks)
    series, bkps, rules, ids = {}, {}, {}, {}
    for name, n, k in zip(names, ns, ks):
        pos = _break_positions(rng, n, k, min_gap)
        edges = [0, *pos, n]
        regimes = len(edges) - 1
        steps = (jump_sigmas * sigma if sigma > 0 else rng.uniform(5, 15, regimes)) * np.ones(regimes)
        hit_levels = np.empty(regimes)
        hit_levels[0] = rng.uniform(45, 55)
        for j in range(1, regimes):  # step up or down, staying inside (20, 80)
            sign = rng.choice((-1.0, 1.0)) if 30 < hit_levels[j - 1] < 70 else (1.0 if hit_levels[j - 1] <= 30 else -1.0)
            hit_levels[j] = hit_levels[j - 1] + sign * steps[j]
        thr = rng.choice((80.0, 50.0), regimes)
        spr = rng.choice((4.0, 1.0), regimes)  # sectors per request
        rd = rng.choice((1.0, 4.0), regimes)
        reps = np.diff(edges)
        hit = np.repeat(hit_levels, reps) + (rng.normal(0, sigma, n) if sigma > 0 else 0.0)
        requests = np.repeat(rng.uniform(9e4, 1.1e5, regimes).round(), reps)
        s = {HIT: hit.round(4), THROUGHPUT: np.repeat(thr, reps), REQUESTS: requests,
             SECTORS: requests * np.repeat(spr, reps), READ_SECTORS: np.repeat(rd * 5e4, reps),
             DURATION: np.repeat(rng.uniform(5e3, 5e4, regimes).round(), reps)}
        series[name] = s
        bkps[name] = pos
        rules[name] = [_rules_at(thr, spr, rd, j) for j in range(1, regimes)]
    order = np.concatenate([np.full(n, i) for i, n in enumerate(ns)])
    rng.shuffle(order)
    for i, name in enumerate(names):
        ids[name] = np.flatnonzero(order == i)
    return PlantedL2(names, ids, series, bkps, rules, sigma, order)


def _rules_at(thr, spr, rd, j: int) -> list[str]:
    fired = []
    if thr[j - 1] >= 65 > thr[j]:  # the rule needs the crossing at the break
        fired.append("l2_throughput_low")
    if spr[j - 1] * 32 >= 128 and spr[j] * 32 <= 32:
        fired.append("bytes_per_request_drop")
    if rd[j] >= 3 * rd[j - 1]:
        fired.append("read_sector_slope_rise")
    return fired
