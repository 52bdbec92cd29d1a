"""The one clock of the project: business time (``now``, timezone-aware; ``now_ms`` and
``now_seconds`` for the scores and stamps Redis and the upstream see), a monotonic reader for
durations and deadlines, and ``sleep``.

Business time *is* ``django.utils.timezone.now``, looked up on every call (never bound at
import), so a test that moves ``timezone.now`` moves every reading here too, and the code that
calls ``timezone.now()`` directly agrees with this module. ``frozen()`` pins both readers for a
block and lets the test advance them instead of sleeping (``sleep`` then advances them).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from django.utils import timezone

_monotonic: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep


def now() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return timezone.now()


def now_seconds() -> float:
    """``now()`` as seconds since the epoch."""
    return now().timestamp()


def now_ms() -> int:
    """``now()`` as whole milliseconds since the epoch (the scores of Redis claims and slots:
    every process compares them, so they are wall-clock time, not monotonic)."""
    return int(now().timestamp() * 1000)


def monotonic() -> float:
    """Seconds of a clock that never goes back (durations and deadlines within one process;
    meaningless across processes)."""
    return _monotonic()


def sleep(seconds: float) -> None:
    """Wait ``seconds`` (on a frozen clock: advance it by as much, at once)."""
    _sleep(seconds)


class FrozenClock:
    """Both readers pinned; ``advance`` moves them together."""

    def __init__(self, at: datetime, monotonic_at: float) -> None:
        self.at = at
        self.monotonic_at = monotonic_at

    def advance(self, **delta: float) -> datetime:
        step = timedelta(**delta)
        self.at += step
        self.monotonic_at += step.total_seconds()
        return self.at


@contextlib.contextmanager
def frozen(at: datetime | None = None, *, monotonic_at: float = 1_000.0) -> Iterator[FrozenClock]:
    """Pin business time (``timezone.now``, hence ``now()``) at ``at`` (default: the real now)
    and ``monotonic()`` at ``monotonic_at`` for the block, ``sleep`` advancing both (tests):
    this process only, so other processes of the test (and Redis' own TTLs) keep the real
    time."""
    global _monotonic, _sleep
    pinned = FrozenClock(at if at is not None else timezone.now(), monotonic_at)
    saved = timezone.now, _monotonic, _sleep

    def advance(seconds: float) -> None:
        pinned.advance(seconds=seconds)

    timezone.now = lambda: pinned.at
    _monotonic, _sleep = (lambda: pinned.monotonic_at), advance
    try:
        yield pinned
    finally:
        timezone.now, _monotonic, _sleep = saved
