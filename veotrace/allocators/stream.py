"""Requests read as a stream, pass after pass: memory bounded by the live set, never by the trace's length.

A :class:`RequestStream` reads its source once to learn what the windows and the checks need (number of
requests, time span, devices, counts; bad input is refused here, before any replay), then once more for
every policy replayed, handing the requests out in chunks (:meth:`RequestStream.chunks`) that the
replay serves and drops. Only the allocations live at a batch boundary are carried between batches.
A short log (up to ``hold`` requests, a fixed bound) is kept from the first read instead of read again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from veotrace.allocators.builder import RequestBuilder, build_requests, peaks
from veotrace.allocators.conf import TorchConf
from veotrace.allocators.requests import MAX_UNKNOWN_FREES, NO_TIME, Requests
from veotrace.defaults import SIMULATE_HOLD_REQUESTS as HOLD_REQUESTS
from veotrace.replay_limits import check_devices


class RequestStream:
    """Requests from ``open_batches(first)``, an iterable of ``alloc_events/1`` batches read anew at each call
    (``first`` is True for the first read only, so a caller can count what a lenient read skipped once).

    Attributes set by the first pass: ``n`` (requests), ``has_time``, ``t_first``/``t_last`` (ns; with
    time only), ``devices``, ``counts``, ``notes`` and ``releases`` (the recorded runs of releases by kind,
    ``releases.summary``); ``release_conf`` is the settings they were classified under.

    Raises:
        AnalysisError: no allocation with a size, or too many frees of unknown blocks (first pass).
    """

    def __init__(self, open_batches: Callable[[bool], Iterable], *, use_releases: bool = True,
                 max_unknown_frees: float = MAX_UNKNOWN_FREES, key: str = "address", hold: int = HOLD_REQUESTS,
                 conf: TorchConf | None = None) -> None:
        self.open_batches, self.use_releases, self.key = open_batches, use_releases, key
        self.release_conf = conf or TorchConf()
        self.n, self.has_time, self.t_first, self.t_last = 0, True, None, None
        self.held: list[Requests] | None = []
        devices: set[int] = set()
        builder = self._builder()
        for chunk in self._chunks(builder, first=True):
            self.n += len(chunk)
            if self.held is not None:
                self.held = self.held + [chunk] if self.n <= hold else None
            ts = np.frombuffer(chunk.ts_ns, np.int64)
            if self.has_time and len(ts):
                if (ts == NO_TIME).any():
                    self.has_time = False
                else:
                    self.t_first = int(ts[0]) if self.t_first is None else self.t_first
                    self.t_last = int(ts[-1])
            devices.update(chunk.devices)
            check_devices(len(devices))  # before any replay
        done = builder.finish(max_unknown_frees)
        self.counts, self.notes, self.devices, self.releases = done.counts, done.notes, sorted(devices), done.releases
        self.has_time = self.has_time and self.n > 0

    def __len__(self) -> int:
        return self.n

    def _builder(self) -> RequestBuilder:
        return RequestBuilder(use_releases=self.use_releases, key=self.key, conf=self.release_conf)

    def _chunks(self, builder: RequestBuilder, *, first: bool) -> Iterator[Requests]:
        for batch in self.open_batches(first):
            builder.add(batch)
            chunk = builder.take()
            if len(chunk):
                yield chunk
        chunk = builder.take(final=True)
        if len(chunk):
            yield chunk

    def chunks(self) -> Iterator[Requests]:
        """The requests in chunks (each with its ``offset``): held from the first read, or read again."""
        if self.held is not None:
            return iter(self.held)
        return self._chunks(self._builder(), first=False)

    def clock(self, chunk: Requests) -> np.ndarray:
        """The time of every request of a chunk: its timestamp, or its index when the trace has no times."""
        return chunk.clock(self.has_time)


def open_requests(events, policies: list[str], seed, *, max_unknown_frees: float = MAX_UNKNOWN_FREES,
                  use_releases: bool = True, key: str = "address", conf: TorchConf | None = None) -> Requests | RequestStream:
    """The requests of ``events`` (a table, or ``open_batches`` from ``load_trace(whole=False)``): a log is
    streamed; a snapshot (its table feeds validation and seeding) or a run with a tiered policy (lifetimes
    need the whole trace) is built whole. ``conf``: the settings the trace was recorded with (a snapshot's),
    which classify its releases."""
    kw = {"max_unknown_frees": max_unknown_frees, "use_releases": use_releases, "key": key, "conf": conf}
    if callable(events) and not any(p.startswith("tiered") for p in policies):
        return RequestStream(events, **kw)
    if seed is None:  # a log: the same requests whole or streamed (no look at the whole trace first)
        return build_requests(events(True) if callable(events) else events, **kw)
    return build_requests(events, seeds=seed.request_seeds(), peaks=peaks(events),
                          frames=getattr(seed, "release_frames", None), segments=seed.segments, **kw)
