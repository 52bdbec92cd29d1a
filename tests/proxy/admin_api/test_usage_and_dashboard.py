"""The usage records, insights, costs and dashboard numbers of a seeded data set, each checked
against sums computed here independently from the seeded facts (spec §6.6, §6.7, §7.4)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta
from datetime import timezone as fixed_timezone

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from proxy.accounts import AccountView
from proxy.domain.slots import SchedulerSettings
from proxy.models import AccountUsage, RuntimeSettings
from proxy.scheduling import scheduler
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.proxy.admin_api.conftest import data_of, error_of
from tests.proxy.factories import make_account

CHINA = fixed_timezone(timedelta(hours=8))

# USD per million tokens, written out for the models seeded here (spec §7.4's table).
PRICES = {
    "gpt-5.4": {"in": 2.5, "out": 15, "cache": 0.25, "priority": (5, 30, 0.5)},
    "gpt-5.5": {"in": 5, "out": 30, "cache": 0.5, "priority": (12.5, 75, 1.25)},
    "gpt-4o": {"in": 2.5, "out": 10, "cache": None, "priority": None},
}


def expected_cost(model, tier, input_tokens, output_tokens, cached) -> float:
    price = PRICES[model]
    rates, multiplier = (price["in"], price["out"], price["cache"]), 1.0
    if tier == "priority":
        if price["priority"]:
            rates = price["priority"]
        else:
            multiplier = 2.0
    elif tier == "flex":
        multiplier = 0.5
    cached = min(cached, input_tokens)
    if rates[2] is None:
        total = input_tokens * rates[0] + output_tokens * rates[1]
    else:
        total = (input_tokens - cached) * rates[0] + cached * rates[2] + output_tokens * rates[1]
    return total / 1e6 * multiplier


@dataclass
class Success:
    at: datetime
    account: str
    model: str
    tier: str | None
    input: int
    output: int
    cached: int
    first_token: int
    latency: int
    route: str = "/v1/responses"
    key: str | None = None


@pytest.fixture
def seeded(api):
    now = timezone.now()
    midnight = now.astimezone(CHINA).replace(hour=0, minute=0, second=0, microsecond=0)
    midnight = midnight.astimezone(UTC)
    elapsed = now - midnight

    def today(fraction: float) -> datetime:
        return midnight + elapsed * fraction

    make_account(id="acct_a", email="a@example.com", plan_type="plus", status="active")
    make_account(id="acct_b", email="b@example.com", plan_type="pro", status="quota_exhausted")
    make_account(id="acct_c", status="disabled")
    successes = [
        Success(today(0.10), "acct_a", "gpt-5.4", None, 1200, 300, 400, 210, 900, key="key_1"),
        Success(today(0.30), "acct_a", "gpt-5.4", "priority", 5000, 700, 1000, 350, 1500),
        Success(today(0.55), "acct_b", "gpt-5.5", "flex", 800, 100, 0, 120, 600, key="key_1"),
        Success(
            today(0.80),
            "acct_b",
            "gpt-4o",
            "priority",
            3000,
            1000,
            2000,
            90,
            400,
            route="/v1/chat/completions",
        ),
        Success(
            midnight - timedelta(hours=3), "acct_a", "gpt-5.5", None, 10_000, 2000, 5000, 500, 2500
        ),
    ]
    for index, success in enumerate(successes):
        usage_record_create(
            created_at=success.at,
            account_id=success.account,
            model=success.model,
            requested_model=f"alias-{success.model}",
            upstream_model=success.model,
            message="v1 responses completed",
            route=success.route,
            request_id=f"req_{index}",
            client_api_key_id=success.key,
            service_tier=success.tier,
            transport="http_sse",
            input_tokens=success.input,
            output_tokens=success.output,
            cached_tokens=success.cached,
            reasoning_tokens=0,
            first_token_ms=success.first_token,
            latency_ms=success.latency,
            metadata={
                "clientIp": "203.0.113.9",
                "userAgent": "tests/1.0",
                "reasoningEffort": "high",
            },
        )
    errors = [today(0.30), today(0.31), midnight - timedelta(hours=2)]
    for index, moment in enumerate(errors):
        ops_error_log_create(
            created_at=moment,
            message="v1 responses dispatch failed",
            route="/v1/responses",
            account_id="acct_a",
            model="gpt-5.4",
            status_code=503,
            failure_class="upstream_unavailable" if index else "rate_limited",
            request_id=f"err_{index}",
        )
    AccountUsage.objects.create(
        account_id="acct_a",
        request_count=120,
        total_tokens=50_000,
        input_tokens=40_000,
        cached_tokens=10_000,
        last_used_at=today(0.3),
    )
    AccountUsage.objects.create(
        account_id="acct_b",
        request_count=30,
        total_tokens=9_000,
        input_tokens=6_000,
        cached_tokens=600,
        last_used_at=today(0.8),
    )
    return {
        "now": now,
        "midnight": midnight,
        "successes": successes,
        "today": [s for s in successes if s.at >= midnight],
        "yesterday": [s for s in successes if s.at < midnight],
        "errors_today": [moment for moment in errors if moment >= midnight],
        "errors_yesterday": [moment for moment in errors if moment < midnight],
    }


def test_dashboard_cards_equal_sums_of_the_seeded_facts(api, seeded):
    summary = data_of(api.get("/api/admin/dashboard/summary?kind=usage"))
    cards = summary["cards"]
    today, yesterday = seeded["today"], seeded["yesterday"]

    assert cards["accounts"]["totalValue"] == 3
    assert cards["accounts"]["enabledValue"] == 1
    assert cards["accounts"]["abnormalValue"] == 2
    assert cards["traffic"]["todayRequestsValue"] == len(today) + len(seeded["errors_today"])
    assert cards["traffic"]["yesterdayRequestsValue"] == len(yesterday) + len(
        seeded["errors_yesterday"]
    )
    assert cards["traffic"]["totalRequestsValue"] == 150  # lifetime: account_usage
    assert cards["tokens"]["todayTokensValue"] == sum(s.input + s.output for s in today)
    assert cards["tokens"]["yesterdayTokensValue"] == sum(s.input + s.output for s in yesterday)
    assert cards["tokens"]["totalTokensValue"] == 59_000
    assert cards["tokens"]["todayCostUsdValue"] == pytest.approx(
        sum(expected_cost(s.model, s.tier, s.input, s.output, s.cached) for s in today), abs=1e-6
    )
    hit = 100 * sum(s.cached for s in today) / sum(s.input for s in today)
    assert cards["cache"]["todayHitRateValue"] == pytest.approx(hit, abs=0.01)
    assert cards["cache"]["totalHitRateValue"] == pytest.approx(100 * 10_600 / 46_000, abs=0.01)
    assert cards["cache"]["totalCachedTokensValue"] == 10_600
    first_token = sum(s.first_token for s in today) / len(today)
    assert cards["cache"]["averageFirstTokenLatencyMsValue"] == pytest.approx(first_token, abs=0.1)
    assert summary["poolSummary"] == {
        "total": 3,
        "active": 1,
        "expired": 0,
        "quotaExhausted": 1,
        "refreshing": 0,
        "disabled": 1,
        "banned": 0,
    }
    assert summary["rotationStrategy"] == "smart"
    assert [row["id"] for row in summary["accountUsage"]] == ["acct_b", "acct_a"]
    assert summary["accountUsage"][0]["quotaUsedPercent"] == 100.0  # quota_exhausted
    assert summary["accountUsage"][1]["tokens"] == sum(
        s.input + s.output for s in today if s.account == "acct_a"
    )
    assert [row["requestId"] for row in summary["usageRecords"]] == [
        "req_3",
        "req_2",
        "req_1",
        "req_0",
    ]
    assert summary["serviceStatuses"][0]["label"] == "Client version"


def test_the_hourly_trend_and_the_health_timeline(api, seeded):
    summary = data_of(api.get("/api/admin/dashboard/summary"))
    now = seeded["now"]
    trend, timeline = summary["trend"], summary["healthTimeline"]

    assert len(trend["points"]) == now.astimezone(CHINA).hour + 1
    by_hour = {}
    for success in seeded["today"]:
        hour = success.at.astimezone(CHINA).hour
        by_hour.setdefault(hour, [0, 0, 0])
        by_hour[hour][0] += 1
        by_hour[hour][2] += success.input
    for moment in seeded["errors_today"]:
        hour = moment.astimezone(CHINA).hour
        by_hour.setdefault(hour, [0, 0, 0])
        by_hour[hour][1] += 1
    for point in trend["points"]:
        success, errors, input_tokens = by_hour.get(int(point["time"]), [0, 0, 0])
        assert point["requestsValue"] == success + errors
        assert point["errorsValue"] == errors
        assert point["inputTokensValue"] == input_tokens
    assert [item["label"] for item in trend["summary"]] == ["Requests", "Tokens", "Cache hit rate"]

    points = timeline["points"]
    assert len(points) == 96
    slots: dict[int, list[int]] = {}
    for success in seeded["today"]:
        slots.setdefault(int((success.at - seeded["midnight"]).total_seconds() // 900), [0, 0])[
            0
        ] += 1
    for moment in seeded["errors_today"]:
        slots.setdefault(int((moment - seeded["midnight"]).total_seconds() // 900), [0, 0])[1] += 1
    current = int((now - seeded["midnight"]).total_seconds() // 900)
    for index, cell in enumerate(points):
        if index > current:
            assert cell == "0"
            continue
        success, errors = slots.get(index, [0, 0])
        if success + errors == 0:
            assert cell == "1"
        elif success == 0:
            assert cell == "2"
        elif success / (success + errors) < 0.9:
            assert cell == "3"
        else:
            assert cell == "4"  # fewer than 3 successes in every seeded slot
    total = len(seeded["today"]) + len(seeded["errors_today"])
    assert timeline["reliability"] == pytest.approx(100 * len(seeded["today"]) / total, abs=0.01)

    errors_trend = data_of(api.get("/api/admin/dashboard/trend?kind=errors"))
    assert errors_trend["summary"][0]["value"] == str(len(seeded["errors_today"]))
    assert error_of(api.get("/api/admin/dashboard/trend?kind=money"), 400, 40001)


def test_usage_records_have_cost_details_and_every_filter_works(api, seeded):
    records = data_of(api.get("/api/admin/usage/records?pageSize=10"))

    assert records["page"]["total"] == 5
    first = records["items"][0]
    success = seeded["successes"][3]
    assert (first["requestId"], first["accountEmail"], first["clientIp"]) == (
        "req_3",
        "b@example.com",
        "203.0.113.9",
    )
    assert first["reasoningEffort"] == "high" and first["userAgent"] == "tests/1.0"
    cost = first["costDetails"]
    # gpt-4o has no priority prices: the priority tier doubles the list price.
    assert (cost["multiplier"], cost["serviceTierDisplay"]) == (2.0, "Fast")
    assert cost["totalCost"] == pytest.approx(
        expected_cost("gpt-4o", "priority", success.input, success.output, success.cached)
    )
    assert cost["originalCost"] == pytest.approx(cost["totalCost"] / 2)
    assert first["tokenDetails"]["totalTokens"] == success.input + success.output

    def ids(query):
        return [
            item["requestId"]
            for item in data_of(api.get(f"/api/admin/usage/records?{query}"))["items"]
        ]

    assert ids("accountId=acct_b") == ["req_3", "req_2"]
    assert ids("clientApiKeyId=key_1") == ["req_2", "req_0"]
    assert ids("model=gpt-5.5") == ["req_2", "req_4"]
    assert ids("route=/v1/chat/completions") == ["req_3"]
    assert ids("requestId=req_1") == ["req_1"]
    assert ids("search=req_1") == ["req_1"]
    assert ids("search=completed") == ["req_3", "req_2", "req_1", "req_0", "req_4"]
    assert ids("search=203.0.113.9") == []  # never a metadata search
    assert ids("statusCode=200&transport=http_sse&kind=v1.response&provider=openai") == [
        "req_3",
        "req_2",
        "req_1",
        "req_0",
        "req_4",
    ]
    start = seeded["midnight"].isoformat().replace("+00:00", "Z")
    assert len(ids(f"startTime={start}")) == 4
    assert error_of(api.get("/api/admin/usage/records?startTime=yesterday"), 400, 40002)
    assert error_of(api.get("/api/admin/usage/records?statusCode=abc"), 400, 40001)
    detail = data_of(api.get(f"/api/admin/usage/records/detail?id={first['id']}"))
    assert detail["id"] == first["id"] and detail["metadata"]["clientIp"] == "203.0.113.9"
    assert error_of(api.get("/api/admin/usage/records/detail?id=nope"), 404, 40401)


def test_summary_and_insights_equal_the_seeded_sums(api, seeded):
    successes = seeded["successes"]
    summary = data_of(api.get("/api/admin/usage/records/summary"))

    assert summary["totalRequestsValue"] == 5
    assert summary["inputTokensValue"] == sum(s.input for s in successes)
    assert summary["totalTokensValue"] == sum(s.input + s.output for s in successes)
    assert summary["averageLatencyMsValue"] == pytest.approx(
        sum(s.latency for s in successes) / 5, abs=0.1
    )

    models = data_of(api.get("/api/admin/usage/records/insights/models?source=upstream"))
    by_name = {item["name"]: item for item in models}
    assert set(by_name) == {"gpt-5.4", "gpt-5.5", "gpt-4o"}
    for name, item in by_name.items():
        group = [s for s in successes if s.model == name]
        assert item["requestCountValue"] == len(group)
        assert item["actualCostValue"] == pytest.approx(
            sum(expected_cost(s.model, s.tier, s.input, s.output, s.cached) for s in group),
            abs=1e-6,
        )
    requested = data_of(api.get("/api/admin/usage/records/insights/models?source=requested"))
    assert {item["name"] for item in requested} == {
        "alias-gpt-5.4",
        "alias-gpt-5.5",
        "alias-gpt-4o",
    }
    mapping = data_of(api.get("/api/admin/usage/records/insights/models?source=mapping"))
    assert "alias-gpt-5.4 → gpt-5.4" in {item["name"] for item in mapping}
    assert error_of(api.get("/api/admin/usage/records/insights/models?source=x"), 400, 40003)
    endpoints = data_of(api.get("/api/admin/usage/records/insights/endpoints?source=inbound"))
    assert {item["name"]: item["requestCountValue"] for item in endpoints} == {
        "/v1/responses": 4,
        "/v1/chat/completions": 1,
    }
    upstream = data_of(api.get("/api/admin/usage/records/insights/endpoints?source=upstream"))
    assert {item["name"]: item["requestCountValue"] for item in upstream} == {"/codex/responses": 5}
    assert error_of(api.get("/api/admin/usage/records/insights/endpoints?source=x"), 400, 40004)

    trend = data_of(api.get("/api/admin/usage/records/insights/token-trend"))
    by_day = {}
    for success in successes:
        by_day.setdefault(success.at.astimezone(CHINA).date().isoformat(), []).append(success)
    assert [point["date"] for point in trend] == sorted(by_day)
    for point in trend:
        group = by_day[point["date"]]
        assert point["inputTokensValue"] == sum(s.input for s in group)
        assert point["actualCostValue"] == pytest.approx(
            sum(expected_cost(s.model, s.tier, s.input, s.output, s.cached) for s in group),
            abs=1e-6,
        )
    assert data_of(api.get("/api/admin/usage/records/insights/latency-trend")) == trend


def test_ops_errors_with_their_filters(api, seeded):
    errors = data_of(api.get("/api/admin/ops/errors?pageSize=20"))
    assert errors["page"]["total"] == 3

    classes = data_of(api.get("/api/admin/ops/errors?failureClass=rate_limited"))["items"]
    assert [item["requestId"] for item in classes] == ["err_0"]
    assert (
        data_of(api.get("/api/admin/ops/errors?statusCode=503&route=/v1/responses"))["page"][
            "total"
        ]
        == 3
    )
    assert data_of(api.get("/api/admin/ops/errors?clientStatusCode=499"))["page"]["total"] == 0


def test_clearing_usage_records_keeps_the_buckets(api, seeded):
    before = data_of(api.get("/api/admin/dashboard/summary"))["cards"]["traffic"]

    assert data_of(api.post_json("/api/admin/usage/records/delete")) == {"cleared": 5}

    assert data_of(api.get("/api/admin/usage/records"))["page"]["total"] == 0
    after = data_of(api.get("/api/admin/dashboard/summary"))["cards"]["traffic"]
    assert after["todayRequestsValue"] == before["todayRequestsValue"]


def test_usage_records_walk_by_cursor_on_the_keyset(api, seeded):
    seen, cursor = [], None
    while True:
        query = "pageSize=2" + (f"&cursor={cursor}" if cursor else "")
        page = data_of(api.get(f"/api/admin/usage/records?{query}"))
        seen += [item["requestId"] for item in page["items"]]
        cursor = page["page"]["nextCursor"]
        if not cursor:
            break

    assert seen == ["req_3", "req_2", "req_1", "req_0", "req_4"]
    deep = data_of(api.get(f"/api/admin/usage/records?pageSize=2&cursor={cursor or ''}"))
    assert deep["page"]["total"] == 5  # an empty cursor is the first page


def test_the_cursor_query_walks_the_created_id_index(api, seeded):
    from django.db import connection

    from proxy.admin_api.pagination import Keyset, PageRequest, paginate
    from telemetry.queries.usage import FactFilters, usage_records

    captured = []

    def present(rows):
        captured.append(rows)
        return []

    queryset = usage_records(FactFilters())
    request = PageRequest(page=1, page_size=2, cursor=Keyset(seeded["now"], "usage_z"))
    paginate(queryset, time_column="created_at", request=request, present=present)
    sql, params = (
        queryset.order_by("-created_at", "-id")
        .extra(
            where=['("usage_records"."created_at", "usage_records"."id") < (%s, %s)'],
            params=[seeded["now"], "usage_z"],
        )[:3]
        .query.sql_with_params()
    )
    with connection.cursor() as cursor:
        cursor.execute("set local enable_seqscan = off")
        cursor.execute("explain " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "idx_usage_records_created_id" in plan
    assert len(captured[0]) == 2


def _view(account_id: str) -> AccountView:
    """An AccountView for taking a slot: the scheduler's slots are keyed by the id only."""
    values = {field.name: None for field in dataclass_fields(AccountView)}
    return AccountView(**{**values, "id": account_id, "cookies": []})


def test_the_capacity_figures_count_slots_on_eligible_accounts_only(api):
    now = timezone.now()
    RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID).update(
        max_concurrent_per_account=4
    )
    fresh = now + timedelta(days=1)
    ready = [
        make_account(id=f"cap_ready_{index}", access_token_expires_at=fresh) for index in range(2)
    ]
    token_expired = make_account(id="cap_token_expired", access_token_expires_at=now)
    make_account(
        id="cap_quota",
        status="quota_exhausted",
        quota_limit_reached=True,
        quota_cooldown_until=now + timedelta(hours=1),
        access_token_expires_at=fresh,
    )
    make_account(id="cap_disabled", status="disabled", access_token_expires_at=fresh)
    make_account(
        id="cap_cloudflare",
        cloudflare_cooldown_until=now + timedelta(minutes=10),
        access_token_expires_at=fresh,
    )
    settings_now = SchedulerSettings(
        strategy="smart", max_concurrent_per_account=4, request_interval_ms=0
    )

    async def take(account_id: str):
        slot = await scheduler.acquire(_view(account_id), settings_now)
        assert slot is not None
        return slot

    slots = [async_to_sync(take)(ready[0].pk), async_to_sync(take)(token_expired.pk)]
    try:
        info = data_of(api.get("/api/admin/dashboard/summary?kind=usage"))["capacityInfo"]
    finally:
        for slot in slots:
            async_to_sync(scheduler.release)(slot)
    after = data_of(api.get("/api/admin/dashboard/summary?kind=usage"))["capacityInfo"]

    # Two accounts may serve (the others: token past expiry, quota cooldown, disabled,
    # Cloudflare cooldown); 4 slots each; one held on an eligible account (the slot on the
    # account whose token expired is not capacity).
    assert info == {
        "maxConcurrentPerAccount": 4,
        "eligibleAccounts": 2,
        "totalSlots": 2 * 4,
        "usedSlots": 1,
        "availableSlots": 2 * 4 - 1,
    }
    assert after["usedSlots"] == 0 and after["availableSlots"] == 8
