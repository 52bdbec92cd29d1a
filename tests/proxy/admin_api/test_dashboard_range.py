"""``dashboard/summary``: the range tabs' figures (``range``), computed here from the seeded facts
in China days; and the hourly trend's points, which carry numbers in hours without traffic as
the original's do (its console plots them)."""

from __future__ import annotations

from datetime import timedelta
from datetime import timezone as fixed_timezone

import pytest
from django.utils import timezone

from telemetry.services.ledger import usage_record_create
from tests.proxy.admin_api.conftest import data_of, error_of
from tests.proxy.usage_month import seed_month
from tests.telemetry.month_of_facts import midnight

CHINA = fixed_timezone(timedelta(hours=8))
PRICES = {"gpt-5.4": (2.5, 15, 0.25), "gpt-5.5": (5, 30, 0.5)}
NUMBERS_IN_EVERY_HOUR = (
    "cacheHitRateValue",
    "latencyValue",
    "minLatencyValue",
    "maxLatencyValue",
    "successRateValue",
)


def _cost(fact) -> float:
    price_in, price_out, price_cache = PRICES[fact.model]
    cached = min(fact.cached_tokens, fact.input_tokens)
    usd = (fact.input_tokens - cached) * price_in + cached * price_cache
    usd += fact.output_tokens * price_out
    return usd / 1e6 * (0.5 if fact.service_tier == "flex" else 1.0)


def test_hours_without_traffic_carry_numbers_not_null(api):
    summary = data_of(api.get("/api/admin/dashboard/summary"))
    latency = data_of(api.get("/api/admin/dashboard/trend?kind=latency"))

    for points in (summary["trend"]["points"], latency["points"]):
        assert len(points) == timezone.now().astimezone(CHINA).hour + 1
        for point in points:
            for name in NUMBERS_IN_EVERY_HOUR:
                assert point[name] == 0.0 and isinstance(point[name], float), (name, point)
    # The dashboard's own range points say "not measured" where nothing was.
    assert {point["latencyValue"] for point in summary["range"]["points"]} == {None}


def test_an_hour_with_traffic_keeps_its_figures_and_the_others_say_zero(api):
    now = timezone.now()
    first_hour = midnight(now, CHINA) + (now - midnight(now, CHINA)) / 60
    usage_record_create(
        created_at=first_hour,
        account_id="acct_x",
        model="gpt-5.4",
        message="v1 responses completed",
        input_tokens=1000,
        cached_tokens=250,
        output_tokens=10,
        first_token_ms=300,
        latency_ms=900,
    )

    points = data_of(api.get("/api/admin/dashboard/summary"))["trend"]["points"]

    hour = first_hour.astimezone(CHINA).hour
    busy = points[hour]
    assert (busy["cacheHitRateValue"], busy["latencyValue"], busy["successRateValue"]) == (
        25.0,
        300.0,
        100.0,
    )
    for point in points[:hour] + points[hour + 1 :]:
        assert [point[name] for name in NUMBERS_IN_EVERY_HOUR] == [0.0] * 5


@pytest.mark.parametrize(("name", "days"), [("today", 1), ("7d", 7), ("30d", 30)])
def test_the_range_tabs_add_up_the_china_days(api, name, days):
    month = seed_month(timezone.now()).facts
    start = midnight(month.now, CHINA, days_back=days - 1)
    end = midnight(month.now, CHINA) + timedelta(days=1)
    successes = month.successes_between(start, end)
    failures = month.failures_between(start, end)
    before = (start - timedelta(days=days), start)

    summary = data_of(api.get(f"/api/admin/dashboard/summary?range={name}"))

    chosen = summary["range"]
    assert chosen["name"] == name and chosen["timeZone"] == "Asia/Shanghai"
    assert chosen["period"] == ("hour" if name == "today" else "day")
    cards = chosen["cards"]
    assert cards["requestsValue"] == len(successes) + len(failures)
    assert cards["errorsValue"] == len(failures)
    assert cards["tokensValue"] == sum(fact.input_tokens + fact.output_tokens for fact in successes)
    assert cards["costUsdValue"] == pytest.approx(sum(_cost(fact) for fact in successes), abs=1e-6)
    assert chosen["previous"]["cards"]["requestsValue"] == len(
        month.successes_between(*before)
    ) + len(month.failures_between(*before))
    points = chosen["points"]
    assert sum(point["requestsValue"] for point in points) == cards["requestsValue"]
    if name == "today":
        assert len(points) == month.now.astimezone(CHINA).hour + 1
        assert chosen["previous"]["label"] == "yesterday"
    else:
        assert len(points) == days
        assert points[0]["time"] == start.astimezone(CHINA).date().isoformat()
    # The original console's cards stay today's whatever the tab.
    today = month.successes_between(midnight(month.now, CHINA), end)
    assert summary["cards"]["traffic"]["todayRequestsValue"] == len(today) + len(
        month.failures_between(midnight(month.now, CHINA), end)
    )


def test_a_custom_range_of_china_days(api):
    month = seed_month(timezone.now()).facts
    last = month.now.astimezone(CHINA).date() - timedelta(days=10)
    first = last - timedelta(days=4)
    start, end = midnight(month.now, CHINA, days_back=14), midnight(month.now, CHINA, days_back=9)

    chosen = data_of(
        api.get(f"/api/admin/dashboard/summary?range=custom&startDate={first}&endDate={last}")
    )["range"]

    assert (chosen["label"], chosen["firstDay"], chosen["lastDay"]) == (
        f"{first} – {last}",
        first.isoformat(),
        last.isoformat(),
    )
    assert [point["time"] for point in chosen["points"]] == [
        (first + timedelta(days=index)).isoformat() for index in range(5)
    ]
    assert chosen["cards"]["requestsValue"] == len(month.successes_between(start, end)) + len(
        month.failures_between(start, end)
    )


def test_a_range_that_cannot_be_shown_is_refused(api):
    summary = "/api/admin/dashboard/summary"
    assert error_of(api.get(f"{summary}?range=year"), 400, 40001) == (
        "range must be today|7d|30d|custom"
    )
    assert error_of(
        api.get(f"{summary}?range=custom&startDate=soon&endDate=2026-01-01"), 400, 40002
    ) == ("the first day must be a date (YYYY-MM-DD)")
    assert error_of(
        api.get(f"{summary}?range=custom&startDate=2024-01-01&endDate=2026-01-01"), 400, 40002
    ) == ("a custom range covers at most 366 days")
