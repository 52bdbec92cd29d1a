"""The date ranges of the usage pages: today, the last 7 or 30 days, or a custom span of whole
days, in one time zone, cut into the periods their charts plot (hours for one day, days for
more).

Days start at local midnight of the zone (a zone's 23- or 25-hour days are kept as they are);
every period start is an aware datetime, so a query can compare ``bucket_start`` or
``created_at`` with them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

RANGE_NAMES = ("today", "7d", "30d", "custom")
RANGE_LABELS = {"today": "Today", "7d": "Last 7 days", "30d": "Last 30 days", "custom": "Custom"}
# A custom range covers at most this many days (a year and a leap day).
MOST_CUSTOM_DAYS = 366


class RangeError(ValueError):
    """A range that cannot be shown (unknown name, bad dates, too long); the message says why."""


@dataclass(frozen=True)
class UsageRange:
    """Whole local days ``first_day``..``last_day`` of ``zone``: the instants [start, end) and
    the starts of the periods (``period`` = "hour" or "day") the charts plot, oldest first.
    ``period_starts`` ends at the period that holds ``now`` when the range runs up to today."""

    name: str
    zone: tzinfo
    first_day: date
    last_day: date
    start: datetime
    end: datetime
    period: str
    period_starts: tuple[datetime, ...]

    @property
    def label(self) -> str:
        if self.name == "custom":
            if self.first_day == self.last_day:
                return self.first_day.isoformat()
            return f"{self.first_day.isoformat()} – {self.last_day.isoformat()}"
        return RANGE_LABELS[self.name]

    @property
    def days(self) -> int:
        return (self.last_day - self.first_day).days + 1

    def period_label(self, index: int) -> str:
        """``14:00`` for an hour, ``2026-03-05`` for a day (local time)."""
        moment = self.period_starts[index].astimezone(self.zone)
        return moment.strftime("%H:%M") if self.period == "hour" else moment.date().isoformat()

    def previous(self) -> UsageRange:
        """The range of as many days just before this one (what "yesterday" is to today)."""
        length = timedelta(days=self.days)
        return _whole_days(
            self.name,
            self.zone,
            self.first_day - length,
            self.last_day - length,
            now=None,
        )


def local_midnight(day: date, zone: tzinfo) -> datetime:
    """The first instant of ``day`` in ``zone``, as an aware UTC datetime."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def _whole_days(
    name: str, zone: tzinfo, first_day: date, last_day: date, *, now: datetime | None
) -> UsageRange:
    start = local_midnight(first_day, zone)
    end = local_midnight(last_day + timedelta(days=1), zone)
    # Plotted up to the period that holds now (a range ending today has no future periods).
    plot_end = end if now is None or now >= end else max(now, start + timedelta(microseconds=1))
    starts: list[datetime] = []
    if first_day == last_day:
        period = "hour"
        moment = start
        while moment < plot_end:
            starts.append(moment)
            moment += timedelta(hours=1)
    else:
        period = "day"
        day = first_day
        while day <= last_day:
            moment = local_midnight(day, zone)
            if moment >= plot_end:
                break
            starts.append(moment)
            day += timedelta(days=1)
    return UsageRange(
        name=name,
        zone=zone,
        first_day=first_day,
        last_day=last_day,
        start=start,
        end=end,
        period=period,
        period_starts=tuple(starts) or (start,),
    )


def _date(value: str | None, what: str) -> date:
    try:
        return date.fromisoformat((value or "").strip())
    except ValueError:
        raise RangeError(f"{what} must be a date (YYYY-MM-DD)") from None


def usage_range(
    name: str | None,
    *,
    now: datetime,
    zone: tzinfo,
    first_day: str | None = None,
    last_day: str | None = None,
) -> UsageRange:
    """The range ``name`` (today when empty) as of ``now`` in ``zone``; a custom range from the
    dates ``first_day`` to ``last_day`` (inclusive, YYYY-MM-DD). Raises RangeError."""
    name = name or "today"
    today = now.astimezone(zone).date()
    if name == "today":
        return _whole_days(name, zone, today, today, now=now)
    if name in ("7d", "30d"):
        days = 7 if name == "7d" else 30
        return _whole_days(name, zone, today - timedelta(days=days - 1), today, now=now)
    if name != "custom":
        raise RangeError("range must be one of today, 7d, 30d, custom")
    first, last = _date(first_day, "the first day"), _date(last_day, "the last day")
    if first > last:
        raise RangeError("the first day is after the last day")
    if (last - first).days + 1 > MOST_CUSTOM_DAYS:
        raise RangeError(f"a custom range covers at most {MOST_CUSTOM_DAYS} days")
    # Year 1 or 9999 cannot be turned into instants (nor can the range before it): a message,
    # not an OverflowError. The ledger holds nothing before 1970.
    earliest, latest = (
        date(1970, 1, 1) + timedelta(days=MOST_CUSTOM_DAYS),
        today + timedelta(days=366),
    )
    if first < earliest or last > latest:
        raise RangeError(f"a custom range lies between {earliest} and {latest}")
    return _whole_days(name, zone, first, last, now=now)
