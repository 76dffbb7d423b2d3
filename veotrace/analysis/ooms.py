"""Out-of-memory errors the trace recorded (PyTorch's ``oom`` trace entries): device, time, request, free.

``OomTap`` watches the batches an analysis reads as they pass (a dictionary lookup per batch; a
filter only in a batch that holds an ``oom``), so that the OOMs come with any command's single
read of a long log. A snapshot also records the device's free bytes at each OOM (``device_free``),
which the readers' ``alloc_events`` table has no column for; the caller passes them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa


class OomTap:
    """Collects the ``oom`` rows of the batches it passes on, and the start of the trace (the earliest
    time of the first timed batch: readers give a log's batches in file order and a snapshot's by time)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.first_ns: int | None = None

    def tap(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.see(batch)
            yield batch

    def see(self, batch: pa.RecordBatch | pa.Table) -> None:
        import pyarrow.compute as pc

        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.see(b)
            return
        if not batch.num_rows or "op" not in batch.schema.names:
            return
        if self.first_ns is None and "ts_ns" in batch.schema.names:  # the first timed batch only: off the hot path
            self.first_ns = pc.min(batch.column("ts_ns")).as_py()
        op = batch.column("op")
        values = op.dictionary if pa.types.is_dictionary(op.type) else None
        if values is not None and "oom" not in values.to_pylist():
            return
        hits = batch.filter(pc.equal(op.cast(pa.string()) if values is not None else op, "oom"))
        cols = hits.schema.names
        for r in hits.to_pylist():
            self.rows.append({"device": r.get("device") or 0, "ts_ns": r.get("ts_ns"), "request_bytes": r.get("size_bytes"),
                              "stream": r.get("stream") if "stream" in cols else None})

    def ooms(self, device_free: Mapping[tuple, int | None] | None = None) -> list[dict]:
        """The OOMs in trace order: device, ts_ns, seconds since the first event, request and (where the
        trace recorded it: ``device_free`` by (device, ts_ns, request)) the device's free bytes."""
        out = []
        for r in self.rows:
            t = None if r["ts_ns"] is None or self.first_ns is None else (r["ts_ns"] - self.first_ns) / 1e9
            free = (device_free or {}).get((r["device"], r["ts_ns"], r["request_bytes"]))
            out.append({"device": r["device"], "ts_ns": r["ts_ns"], "t_s": t, "request_bytes": r["request_bytes"],
                        "device_free_bytes": free})
        return out


def oom_text(o: dict) -> str:
    """One recorded OOM in words: device, when, the request and the device's free bytes."""
    from veotrace.analysis.timescale import fmt_duration

    def gib(n: int | None) -> str:
        if n is None:
            return "unknown"
        return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"

    when = f"{fmt_duration(o['t_s'])} after the first event, " if o["t_s"] is not None else ""
    return f"device {o['device']}, {when}a request of {gib(o['request_bytes'])} with {gib(o['device_free_bytes'])} free"


def oom_lines(ooms: list[dict]) -> list[str]:
    """One stderr line per recorded OOM (the terminal's view; the JSON holds the same numbers)."""
    return [f"Recorded OOM: {oom_text(o)}" for o in ooms]


def with_device_free(ooms: list[dict], device_free: Mapping[tuple, int | None]) -> list[dict]:
    """``ooms`` with the device's free bytes filled in from a snapshot's entries (by device, ts_ns, request)."""
    return [dict(o, device_free_bytes=device_free.get((o["device"], o["ts_ns"], o["request_bytes"]),
                                                      o["device_free_bytes"])) for o in ooms]


def oom_verdict(o: dict) -> str:
    """Which policies would have served a recorded OOM's request (``allocators.oomprobe``), in words."""
    w = o.get("what_if") or {}
    if not w.get("evaluated"):
        return "not replayed"
    rows = w.get("policies") or []
    if w.get("budget_bytes") is None or not rows:
        return "no verdict (budget unknown)"
    if w.get("reproduced") is False:  # the model fits what the real run could not: its verdicts do not stand
        return "not reproduced: the torch model under the settings in use serves it within the budget, so no verdict"
    ok = [r["policy"] for r in rows if r["avoids"]]
    if ok:
        return f"avoided by {', '.join(ok)}"
    ideal = next((r for r in rows if r["policy"] == "ideal"), None)
    if ideal is None:
        return f"no policy avoids it (of {len(rows)} replayed)"
    return (f"no policy avoids it: the live bytes alone with the request need "
            f"{_gib(ideal['reserved_with_request_bytes'])}, over the {_gib(w['budget_bytes'])} budget")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
