"""Live layer: the follow loop: poll the tail, feed the lines, emit what completed, checkpoint, and stop.

It stops when the consumer says so (``--until``), when nothing was read for ``idle_s`` seconds (the
writer is gone: ``--idle-timeout``; a target that does not exist yet is waited for as long), or on
Ctrl-C; then it reads the files' partial last lines and lets the consumer print the rest. The clock
and the sleep are parameters, so that tests run on simulated time without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from veotrace.errors import VeotraceError
from veotrace.live.tail import Lines, Tail


class Consumer(Protocol):
    """What the loop feeds: an analysis' open windows and its printer."""

    def feed(self, lines: Lines) -> None: ...

    def after_poll(self) -> str | None:
        """Emit what completed and checkpoint; why to stop (``"until"``, gate's ``"failed"``), else None."""
        ...

    def finish(self, reason: str) -> None:
        """Emit what is left at the end of following (``reason``: idle, until, interrupted)."""
        ...


@dataclass
class Clock:
    """The loop's time: ``now()`` in seconds and ``sleep(s)`` (a fake in tests)."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def follow(tail: Tail, consumer: Consumer, *, poll_s: float, idle_s: float | None,
           note: Callable[[str], None], clock: Clock | None = None) -> str:
    """Follow until stopped; returns why: ``"idle"``, ``"interrupted"`` or the consumer's reason (``"until"``).

    Raises:
        VeotraceError: the target did not appear within ``idle_s``.
    """
    clock = clock or Clock()
    last = clock.now()
    waiting = False
    reason = "interrupted"
    try:
        while True:
            if not tail.exists() and not waiting:
                waiting = True
                note(f"Waiting for {tail.target} to appear"
                     + (f" (up to --idle-timeout {idle_s:g} s)" if idle_s is not None else " (Ctrl-C to stop)"))
            got = False
            for lines in tail.poll():
                got = True
                consumer.feed(lines)
            stop = consumer.after_poll()
            if stop:
                reason = stop
                break
            now = clock.now()
            if got:
                last = now
            if idle_s is not None and now - last >= idle_s:
                if not tail.exists():
                    raise VeotraceError(f"the follow target did not appear within --idle-timeout {idle_s:g} s",
                                        path=tail.target, hint="Check the path, or give a longer --idle-timeout")
                reason = "idle"
                break
            clock.sleep(poll_s)
    except KeyboardInterrupt:
        reason = "interrupted"
    for lines in tail.close():
        consumer.feed(lines)
    consumer.finish(reason)
    return reason
