"""How the admin API shows times and numbers: times in the console's time zone
(``CONSOLE_TIME_ZONE``, China time by default as spec §0 says; Django's ``TIME_ZONE`` is the same
setting, so the Django admin's lists agree), thousands separators, percentages, dollars and
durations.

Each figure is sent twice where the original's console reads both: the raw number (``…Value`` or
the plain field) and its ``…Display`` string.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from django.utils import timezone

NOTHING = "-"


def console_zone() -> tzinfo:
    """The console's time zone (``TIME_ZONE`` = ``CONSOLE_TIME_ZONE``), read on every call so a
    changed setting (a test's) is followed."""
    return timezone.get_default_timezone()


def console_iso(moment: datetime | None) -> str | None:
    """``2026-11-24T16:00:00+08:00`` (RFC 3339 in the console's zone), or None."""
    if moment is None:
        return None
    return moment.astimezone(console_zone()).isoformat(timespec="seconds")


def console_time(moment: datetime | None) -> str:
    """``2026-11-24 16:00:00`` in the console's zone, or ``-``."""
    if moment is None:
        return NOTHING
    return moment.astimezone(console_zone()).strftime("%Y-%m-%d %H:%M:%S")


def console_midnight(now: datetime) -> datetime:
    """The start of the console's day that contains ``now`` (as an aware UTC datetime)."""
    local = now.astimezone(console_zone())
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    return timezone.make_aware(midnight, console_zone()).astimezone(UTC)


def console_zone_label(now: datetime) -> str:
    """``Asia/Shanghai (UTC+08:00)``: the zone's name and its offset at ``now``."""
    offset = now.astimezone(console_zone()).strftime("%z")
    return f"{console_zone()} (UTC{offset[:3]}:{offset[3:]})"


# The names from before the zone was a setting (issue 38): they follow it too.
china_iso = console_iso
china_time = console_time
china_midnight = console_midnight


def from_epoch(seconds: float | int | None) -> datetime | None:
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(float(seconds), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def relative(moment: datetime | None, *, now: datetime) -> str:
    """``just now``, ``5 minutes ago``, ``in 3 hours``, … or ``-``."""
    if moment is None:
        return NOTHING
    seconds = (now - moment).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 45:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size:
            amount = int(seconds // size)
            text = f"{amount} {unit}{'' if amount == 1 else 's'}"
            return f"in {text}" if future else f"{text} ago"
    return "just now"


def number(value: int | float | None) -> str:
    """``12,345`` (``-`` for no value)."""
    if value is None:
        return NOTHING
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def percent(value: float | None, *, digits: int = 1) -> str:
    """``42.5%`` of a value already in percent."""
    if value is None:
        return NOTHING
    return f"{value:.{digits}f}%"


def ratio_percent(part: float, whole: float) -> float | None:
    """``part`` as a percentage of ``whole`` (None when ``whole`` is 0)."""
    return round(100.0 * part / whole, 2) if whole else None


def usd(value: float | None) -> str:
    """``$1.23``; amounts under a dollar keep four decimals (``$0.0123``)."""
    if value is None:
        return NOTHING
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"


def milliseconds(value: float | int | None) -> str:
    """``850 ms`` / ``1.23 s``."""
    if value is None:
        return NOTHING
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{round(value)} ms"


def with_display(values: dict[str, int | float | None], *, shown=number) -> dict:
    """``{name: value, nameDisplay: shown(value)}`` for each entry."""
    result: dict = {}
    for name, value in values.items():
        result[name] = value
        result[f"{name}Display"] = shown(value)
    return result
