"""Render layer: the rich summary of `veotrace correlate` (headline, coefficients, lags, baseline)."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import rows_table, summary_table


def _ci(lo: float, hi: float) -> str:
    return f"[{lo:.3f}, {hi:.3f}]"


def render_correlate(con: Console, result, *, pairs, comparison=None, max_rows: int = 40) -> None:
    """Draw a ``CorrelationResult`` (and an optional ``GroupComparison``) on ``con``."""
    con.print(result.headline())
    items = [("pairs", result.n), ("effective n", round(result.n_eff, 1)),
             ("mean jump", f"{result.mean_jump_bytes / 1024:,.1f} KiB"), ("mean EPE", f"{result.mean_epe_px:.4g} px")]
    if pairs.dropped_nonfinite:
        items.append(("dropped (NaN/inf)", pairs.dropped_nonfinite))
    con.print(summary_table("Address jump vs EPE", items))
    rows = []
    for name, c in (("Pearson r", result.pearson), ("Spearman rho", result.spearman)):
        rows.append({"name": name, "r": f"{c.r:.3f}", "ci": _ci(c.ci_low, c.ci_high), "p": c.p,
                     "boot": _ci(c.boot_ci_low, c.boot_ci_high), "perm": c.perm_p})
    table, _ = rows_table("", rows, [("name", "statistic"), ("r", "value"), ("ci", "95% CI (Fisher)"), ("p", "p"),
                                     ("boot", f"95% CI (block bootstrap, L={result.block_len})"), ("perm", "p (block permutation)")], max_rows=0)
    con.print(table)
    con.print(f"resamples {result.resamples}, seed {result.seed}; block methods allow for autocorrelated frames")
    if result.lags:
        table, footer = rows_table("Correlation by lag (EPE lag frames after the jump)", result.lags,
                                   [("lag", "lag"), ("n", "n"), ("r", "r"), ("p", "p")], max_rows=max_rows)
        con.print(table)
        if footer:
            con.print(footer)
    if comparison is not None:
        rows = []
        for label, key, diff, scale in (("mean jump (KiB)", "mean_jump_bytes", comparison.diff_jump_bytes, 1024),
                                        ("mean EPE (px)", "mean_epe_px", comparison.diff_epe_px, 1)):
            rows.append({"what": label, "run": comparison.run[key] / scale, "base": comparison.baseline[key] / scale,
                         "diff": diff["diff"] / scale, "ci": _ci(diff["ci_low"] / scale, diff["ci_high"] / scale), "p": diff["p"]})
        table, _ = rows_table("Run vs baseline (Welch 95% CI of run - baseline)", rows,
                              [("what", ""), ("run", "run"), ("base", "baseline"), ("diff", "difference"), ("ci", "95% CI"), ("p", "p")], max_rows=0)
        con.print(table)
