"""``dashboard/summary``: the hourly trend's points carry numbers in hours without traffic as
the original's do (its console plots them)."""

from __future__ import annotations

from datetime import timedelta
from datetime import timezone as fixed_timezone

from django.utils import timezone

from telemetry.services.ledger import usage_record_create
from tests.proxy.admin_api.conftest import data_of
from tests.telemetry.month_of_facts import midnight

CHINA = fixed_timezone(timedelta(hours=8))
NUMBERS_IN_EVERY_HOUR = (
    "cacheHitRateValue",
    "latencyValue",
    "minLatencyValue",
    "maxLatencyValue",
    "successRateValue",
)


def test_hours_without_traffic_carry_numbers_not_null(api):
    summary = data_of(api.get("/api/admin/dashboard/summary"))
    latency = data_of(api.get("/api/admin/dashboard/trend?kind=latency"))

    for points in (summary["trend"]["points"], latency["points"]):
        assert len(points) == timezone.now().astimezone(CHINA).hour + 1
        for point in points:
            for name in NUMBERS_IN_EVERY_HOUR:
                assert point[name] == 0.0 and isinstance(point[name], float), (name, point)


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
