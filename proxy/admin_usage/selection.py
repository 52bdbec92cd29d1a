"""What the usage page is asked for, read from its query string: the range, the breakdown and
the filters. A value that cannot be one is dropped with a message for the page (the page
still answers, with the default in its place)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from urllib.parse import urlencode

from django.http import QueryDict

from telemetry.queries.usage_analytics import (
    DIMENSIONS,
    STATUS_FAILED,
    STATUS_SUCCEEDED,
    AnalyticsFilters,
)
from telemetry.queries.usage_ranges import RangeError, UsageRange, usage_range

LONGEST_VALUE = 256
FILTER_NAMES = ("model", "account", "key", "route", "status")


@dataclass(frozen=True)
class Selection:
    range_name: str
    first_day: str  # the custom range's dates as asked (YYYY-MM-DD), "" otherwise
    last_day: str
    by: str
    filters: AnalyticsFilters
    usage_range: UsageRange
    problems: tuple[str, ...] = ()

    def query(self, **changes: str | None) -> str:
        """This selection's query string with ``changes`` (None or "" removes a parameter)."""
        values: dict[str, str | None] = {"range": self.range_name, "by": self.by}
        if self.range_name == "custom":
            values.update(start=self.first_day, end=self.last_day)
        for name in FILTER_NAMES:
            values[name] = getattr(self.filters, name)
        values.update(changes)
        return urlencode({name: value for name, value in values.items() if value})

    def with_filter(self, name: str, value: str | None) -> str:
        return self.query(**{name: value})


def _status(value: str) -> str | None:
    if value in (STATUS_SUCCEEDED, STATUS_FAILED):
        return value
    if value.isascii() and value.isdigit() and 100 <= int(value) <= 599:
        return str(int(value))
    return None


def selection_from(query: QueryDict, *, now: datetime, zone: tzinfo) -> Selection:
    """The selection of ``query`` as of ``now`` in ``zone``."""
    problems: list[str] = []
    range_name = query.get("range") or "today"
    first_day, last_day = query.get("start") or "", query.get("end") or ""
    try:
        chosen = usage_range(range_name, now=now, zone=zone, first_day=first_day, last_day=last_day)
    except RangeError as error:
        problems.append(f"Range not shown: {error}. Showing today.")
        range_name, first_day, last_day = "today", "", ""
        chosen = usage_range("today", now=now, zone=zone)
    if range_name != "custom":
        first_day, last_day = "", ""
    by = query.get("by") or "model"
    if by not in DIMENSIONS:
        problems.append(f"There is no breakdown by {by[:40]!r}: by model.")
        by = "model"
    filters = AnalyticsFilters()
    for name in FILTER_NAMES:
        value = (query.get(name) or "").strip()
        if not value:
            continue
        if len(value) > LONGEST_VALUE:
            problems.append(f"The {name} filter is too long: left out.")
            continue
        if name == "status":
            status = _status(value)
            if status is None:
                problems.append("The status filter is ok, failed or an HTTP status: left out.")
                continue
            value = status
        filters = replace(filters, **{name: value})
    return Selection(
        range_name=range_name,
        first_day=first_day,
        last_day=last_day,
        by=by,
        filters=filters,
        usage_range=chosen,
        problems=tuple(problems),
    )
