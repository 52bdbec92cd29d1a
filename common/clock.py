"""The one clock of the project: business time (``now``, timezone-aware; ``now_ms`` and
``now_seconds`` for the scores and stamps Redis and the upstream see) and a monotonic reader for
durations and deadlines.

Business time *is* ``django.utils.timezone.now``, looked up on every call (never bound at
import), so a test that moves ``timezone.now`` moves every reading here too, and the code that
calls ``timezone.now()`` directly agrees with this module. ``frozen()`` pins both readers for a
block and lets the test advance them instead of sleeping.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from django.utils import timezone

_monotonic: Callable[[], float] = time.monotonic


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
    and ``monotonic()`` at ``monotonic_at`` for the block (tests): this process only, so other
    processes of the test (and Redis' own TTLs) keep the real time."""
    global _monotonic
    pinned = FrozenClock(at if at is not None else timezone.now(), monotonic_at)
    saved_wall, saved_monotonic = timezone.now, _monotonic
    timezone.now = lambda: pinned.at
    _monotonic = lambda: pinned.monotonic_at  # noqa: E731
    try:
        yield pinned
    finally:
        timezone.now, _monotonic = saved_wall, saved_monotonic
