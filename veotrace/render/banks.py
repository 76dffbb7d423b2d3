"""Terminal view of `veotrace banks`: the summary and the first warp's per-bank map."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import rows_table, summary_table


def render_banks(console: Console, result: dict) -> None:
    s, w = result["summary"], result["warps"][0]
    items = [("access", result["params"]["source"]), ("warps", s["warps"]),
             ("conflict degree (worst)", s["max_conflict_degree"]), ("conflict degree (mean)", s["mean_conflict_degree"]),
             ("wavefronts (first warp)", f"{w['wavefronts']} (ideal {w['ideal_wavefronts']})"),
             ("32-byte sectors fetched", s["sectors"]), ("bytes used", s["bytes_used"]),
             ("bytes fetched", s["bytes_fetched"]), ("efficiency", s["efficiency"])]
    console.print(summary_table("Bank conflicts and sectors", items))
    rows = [{"bank": b, "threads": t, "words": n} for b, (t, n) in enumerate(zip(w["bank_threads"], w["bank_words"])) if t]
    table, _ = rows_table("Banks used by the first warp", rows, [("bank", "bank"), ("threads", "threads"),
                          ("words", "distinct words")], max_rows=0)
    console.print(table)
