"""Seeded writers of a live log for following (issue 29): allocs and frees at a rate with bursts, written in
steps to a folder that rotates the ways loggers do, returning the files in the order they were written."""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HEADER = b"timestamp,op_type,size_bytes\n"
#: The ways a writer rotates, in turn.
ROTATIONS = ("size", "rename", "copytruncate", "compress")


def feed_rows(*, seconds: float, rate: float = 200.0, seed: int = 0, t0_ns: int = 1_700_000_000_000_000_000,
              burst_every_s: float = 20.0, burst_events: int = 400) -> np.ndarray:
    """Rows (ts_ns, op 0=alloc 1=free, size_bytes) in time order: Poisson arrivals at ``rate`` per second,
    plus a burst of ``burst_events`` within 50 ms every ``burst_every_s`` seconds; sizes 4 KiB .. 4 MiB."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * seconds)
    ts = np.sort(rng.uniform(0, seconds, n))
    bursts = np.arange(burst_every_s / 2, seconds, burst_every_s)
    extra = (bursts[:, None] + rng.uniform(0, 0.05, (bursts.size, burst_events))).ravel()
    ts = np.sort(np.concatenate([ts, extra]))
    ts_ns = t0_ns + np.round(ts * 1e9).astype(np.int64)
    ops = (rng.uniform(size=ts.size) < 0.45).astype(np.int64)
    sizes = (4096 << rng.integers(0, 11, ts.size)) + rng.integers(0, 4096, ts.size)
    return np.stack([ts_ns, ops, sizes], axis=1)


def lines(rows: np.ndarray, *, jsonl: bool = False) -> bytes:
    """The CSV lines (no header), or JSON Lines, of ``rows``."""
    op = (b"alloc", b"free")
    if jsonl:
        return b"".join(b'{"timestamp": %d, "op_type": "%s", "size_bytes": %d}\n' % (t, op[o], s)
                        for t, o, s in rows.tolist())
    return b"".join(b"%d,%s,%d\n" % (t, op[o], s) for t, o, s in rows.tolist())


@dataclass
class RotatingWriter:
    """A logger writing ``app.log`` in ``folder``, rotating after every ``rotate_bytes``, in turn by
    ROTATIONS: size (a new numbered file: ``app-0003.log`` is written next), rename (``app.log`` ->
    ``app.log.N``, a new ``app.log``), copytruncate (copied to ``app.log.N``, then emptied) and compress
    (renamed, and the previous rotated file gzipped into ``.gz`` and removed). ``jsonl``: JSON Lines, no
    header; a CSV log gets its header again when it starts empty (after copytruncate too, as a handler that
    writes the header at position 0 does)."""

    folder: Path
    rotate_bytes: int = 1 << 16
    kinds: tuple[str, ...] = ROTATIONS
    jsonl: bool = False
    csv_header: bytes = HEADER
    written: int = 0
    n: int = 0
    current: Path = field(init=False)
    #: The files holding the log, oldest text first (updated as they are renamed, copied, compressed).
    order: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.current = self.folder / "app.log"
        self.current.write_bytes(self.header)
        self.order.append(self.current)

    @property
    def header(self) -> bytes:
        return b"" if self.jsonl else self.csv_header

    def write(self, data: bytes) -> None:
        """Append whole or partial lines; rotate at a line end once the file passed ``rotate_bytes``."""
        with open(self.current, "ab") as fh:
            fh.write(data)
        self.written += len(data)
        if self.written >= self.rotate_bytes and data.endswith(b"\n"):
            self.rotate(self.kinds[self.n % len(self.kinds)])

    def rotate(self, kind: str) -> None:
        self.n += 1
        self.written = 0
        rotated = self.folder / f"app.log.{self.n}"
        if kind == "size":
            self.current = self.folder / f"app-{self.n:04d}.log"
            self.current.write_bytes(self.header)
            self.order.append(self.current)
            return
        if kind == "copytruncate":
            shutil.copyfile(self.current, rotated)
            os.truncate(self.current, 0)
            if self.header:
                with open(self.current, "ab") as fh:
                    fh.write(self.header)
            self.order[-1:] = [rotated, self.current]
            return
        os.rename(self.current, rotated)
        self.order[-1] = rotated
        if kind == "compress":
            self._compress_previous(rotated)
        self.current.write_bytes(self.header)
        self.order.append(self.current)

    def _compress_previous(self, keep: Path) -> None:
        for i, p in enumerate(self.order):
            if p != keep and p.parent == self.folder and p.name.startswith("app.log.") and not p.name.endswith(".gz"):
                gz = p.with_name(p.name + ".gz")
                with open(p, "rb") as src, gzip.open(gz, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                p.unlink()
                self.order[i] = gz
                return

    def files(self) -> list[Path]:
        """The log's files now, oldest text first (a file without a row yet is left out: it holds nothing)."""
        return [p for p in self.order if p.exists() and p.stat().st_size > len(self.header)]


def steps(rows: np.ndarray, *, seconds_per_step: float, jsonl: bool = False) -> Iterator[tuple[float, bytes]]:
    """(simulated time, lines) of ``rows`` cut into steps of ``seconds_per_step`` of their time."""
    if not len(rows):
        return
    t0 = int(rows[0, 0])
    step_ns = round(seconds_per_step * 1e9)
    k = (rows[:, 0] - t0) // step_ns
    cuts = np.flatnonzero(np.diff(k)) + 1
    for part in np.split(rows, cuts):
        yield (int(part[0, 0]) - t0) / 1e9, lines(part, jsonl=jsonl)


class FeedClock:
    """Simulated time for ``live.follow`` (its ``now`` and ``sleep``): each sleep writes the next of ``parts``
    ((time, lines), as ``steps`` gives them) with ``writer``; once all are written, time only passes."""

    def __init__(self, writer: RotatingWriter | None, parts) -> None:
        self.t = 0.0
        self.parts = iter(parts)
        self.writer = writer

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        part = next(self.parts, None)
        if part is not None:
            self.writer.write(part[1])
