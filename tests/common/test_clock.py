"""The one clock: business time follows ``timezone.now``; ``frozen`` pins and advances both
readers, and gives them back."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from common import clock

AT = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


def test_business_time_is_timezone_now_read_at_each_call(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: AT)

    assert clock.now() == AT
    assert clock.now_ms() == int(AT.timestamp() * 1000)
    assert clock.now_seconds() == AT.timestamp()


def test_frozen_pins_both_readers_and_advance_moves_them_together():
    with clock.frozen(AT, monotonic_at=50.0) as frozen:
        pinned = (clock.now(), timezone.now(), clock.monotonic())
        frozen.advance(seconds=90)
        advanced = (clock.now(), clock.monotonic())

    assert pinned == (AT, AT, 50.0)
    assert advanced == (AT + timedelta(seconds=90), 140.0)


def test_after_frozen_the_real_clocks_are_back():
    with clock.frozen(AT):
        pass

    assert abs(clock.now_seconds() - time.time()) < 5
    assert abs(clock.monotonic() - time.monotonic()) < 1


def test_sleep_on_a_frozen_clock_advances_it_at_once():
    with clock.frozen(AT, monotonic_at=0.0):
        started = time.monotonic()
        clock.sleep(3600)
        slept = (clock.now(), clock.monotonic(), time.monotonic() - started)

    assert slept[:2] == (AT + timedelta(hours=1), 3600.0)
    assert slept[2] < 1
