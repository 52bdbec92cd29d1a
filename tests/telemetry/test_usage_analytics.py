"""Usage analytics over a month of ledger facts: the bucket figures (model, account), the fact
breakdowns (key, route, status), filters, the percentile sample and the costs — each compared
with sums computed here from the facts that were written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.utils import timezone

from telemetry.models import UNKNOWN_DIMENSION
from telemetry.queries.usage_analytics import AnalyticsFilters, usage_analysis
from telemetry.queries.usage_ranges import RangeError, usage_range
from tests.telemetry.month_of_facts import MODELS, ROUTES, midnight, write_month_of_facts

ACCOUNTS = ("acct_a", "acct_b", "acct_c")
KEYS = ("key_one", "key_two", "key_three")
# USD per million tokens (spec §7.4) of the two seeded models: input, output, cache read.
PRICES = {"gpt-5.4": (2.5, 15, 0.25), "gpt-5.5": (5, 30, 0.5)}


@pytest.fixture
def month(db):
    return write_month_of_facts(timezone.now(), account_ids=ACCOUNTS, key_ids=KEYS)


def percentile(values: list[int], fraction: float) -> float:
    """PostgreSQL's percentile_cont: linear between the two nearest ranks."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def cost(fact) -> float:
    price_in, price_out, price_cache = PRICES[fact.model]
    cached = min(fact.cached_tokens, fact.input_tokens)
    usd = (
        (fact.input_tokens - cached) * price_in
        + cached * price_cache
        + fact.output_tokens * price_out
    ) / 1e6
    return usd * (0.5 if fact.service_tier == "flex" else 1.0)


def test_the_ranges_are_whole_local_days_cut_into_hours_or_days():
    now = datetime(2026, 3, 29, 15, 40, tzinfo=UTC)
    berlin = ZoneInfo("Europe/Berlin")  # 2026-03-29 is 23 hours long there

    today = usage_range("today", now=now, zone=berlin)
    week = usage_range("7d", now=now, zone=UTC)
    month = usage_range("30d", now=now, zone=UTC)
    custom = usage_range("custom", now=now, zone=UTC, first_day="2026-01-01", last_day="2026-01-31")

    assert today.start == datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    assert today.end == datetime(2026, 3, 29, 22, 0, tzinfo=UTC)
    assert today.period == "hour"
    # 00:00 … 17:00 Berlin time (now is 17:40 summer time): 02:00 does not exist that day.
    assert [today.period_label(index) for index in range(len(today.period_starts))] == [
        f"{hour:02d}:00" for hour in range(18) if hour != 2
    ]
    assert (week.first_day.isoformat(), week.last_day.isoformat()) == ("2026-03-23", "2026-03-29")
    assert week.period == "day" and len(week.period_starts) == 7
    assert month.start == datetime(2026, 2, 28, tzinfo=UTC) and len(month.period_starts) == 30
    assert custom.end == datetime(2026, 2, 1, tzinfo=UTC) and len(custom.period_starts) == 31
    assert custom.label == "2026-01-01 – 2026-01-31"
    assert week.previous().first_day.isoformat() == "2026-03-16"
    for name, first, last, message in (
        ("year", None, None, "range must be one of today, 7d, 30d, custom"),
        ("custom", "2026-02-01", "2026-01-01", "the first day is after the last day"),
        ("custom", "2025-01-01", "2026-03-01", "a custom range covers at most 366 days"),
        ("custom", "yesterday", "2026-03-01", "the first day must be a date (YYYY-MM-DD)"),
    ):
        with pytest.raises(RangeError) as refused:
            usage_range(name, now=now, zone=UTC, first_day=first, last_day=last)
        assert str(refused.value) == message


@pytest.mark.parametrize("name", ["today", "7d", "30d"])
def test_the_bucket_figures_equal_the_facts_they_were_written_from(month, name):
    chosen = usage_range(name, now=month.now, zone=UTC)
    successes = month.successes_between(chosen.start, chosen.end)
    failures = month.failures_between(chosen.start, chosen.end)

    analysis = usage_analysis(chosen, by="account")

    assert analysis.source == "buckets"
    totals = analysis.totals
    assert (totals.success, totals.errors) == (len(successes), len(failures))
    assert totals.input_tokens == sum(fact.input_tokens for fact in successes)
    assert totals.output_tokens == sum(fact.output_tokens for fact in successes)
    assert totals.cached_tokens == sum(fact.cached_tokens for fact in successes)
    assert totals.reasoning_tokens is None  # the buckets do not keep them
    assert totals.average_latency_ms == pytest.approx(
        sum(fact.latency_ms for fact in successes) / len(successes)
    )
    assert totals.actual_cost == pytest.approx(sum(cost(fact) for fact in successes))
    for account in ACCOUNTS:
        mine = [fact for fact in successes if fact.account_id == account]
        errors = [fact for fact in failures if fact.account_id == account]
        assert analysis.groups[account].requests == len(mine) + len(errors)
        assert analysis.groups[account].output_tokens == sum(fact.output_tokens for fact in mine)
    for index, start in enumerate(chosen.period_starts):
        end = (
            chosen.period_starts[index + 1] if index + 1 < len(chosen.period_starts) else chosen.end
        )
        assert analysis.series[index].requests == len(month.successes_between(start, end)) + len(
            month.failures_between(start, end)
        )
    # The sample holds every success of the range (far fewer than its limit).
    assert analysis.sample.complete and analysis.sample.requests == len(successes)
    assert analysis.sample.reasoning_tokens == sum(fact.reasoning_tokens for fact in successes)
    latencies = [fact.latency_ms for fact in successes]
    assert analysis.sample.latency == pytest.approx(
        tuple(percentile(latencies, fraction) for fraction in (0.5, 0.95, 0.99))
    )


def test_a_year_old_range_is_read_from_the_buckets_with_nothing_in_it(month):
    chosen = usage_range(
        "custom", now=month.now, zone=UTC, first_day="2020-01-01", last_day="2020-12-31"
    )

    analysis = usage_analysis(chosen)

    assert analysis.totals.requests == 0 and analysis.groups == {}
    assert len(analysis.series) == 366
    assert analysis.sample.requests == 0 and analysis.sample.latency is None


def test_key_route_and_status_come_from_the_facts(month):
    chosen = usage_range("30d", now=month.now, zone=UTC)
    successes = month.successes_between(chosen.start, chosen.end)
    failures = month.failures_between(chosen.start, chosen.end)

    by_key = usage_analysis(chosen, by="key")
    by_route = usage_analysis(chosen, by="route")
    by_status = usage_analysis(chosen, by="status")

    assert by_key.source == by_route.source == by_status.source == "facts"
    assert set(by_key.groups) == set(KEYS)
    for key in KEYS:
        mine = [fact for fact in successes if fact.client_api_key_id == key]
        sums = by_key.groups[key]
        assert sums.success == len(mine)
        assert sums.errors == len([fact for fact in failures if fact.client_api_key_id == key])
        assert sums.reasoning_tokens == sum(fact.reasoning_tokens for fact in mine)
        assert sums.actual_cost == pytest.approx(sum(cost(fact) for fact in mine))
        first_tokens = [fact.first_token_ms for fact in mine]
        assert by_key.sample.groups[key].first_token[0] == pytest.approx(
            percentile(first_tokens, 0.5)
        )
    assert {route: sums.requests for route, sums in by_route.groups.items()} == {
        route: len([fact for fact in successes + failures if fact.route == route])
        for route in ROUTES
    }
    assert {code: sums.requests for code, sums in by_status.groups.items()} == {
        "200": len(successes),
        "502": len([fact for fact in failures if fact.status_code == 502]),
        "429": len([fact for fact in failures if fact.status_code == 429]),
    }
    assert by_status.groups["502"].error_rate == 100.0
    assert by_key.totals.requests == by_route.totals.requests == len(successes) + len(failures)


def test_filters_narrow_the_selection(month):
    chosen = usage_range("30d", now=month.now, zone=UTC)

    def count(**filters) -> int:
        return usage_analysis(chosen, filters=AnalyticsFilters(**filters)).totals.requests

    def seeded(successes=True, failures=True, **equal) -> int:
        found = month.successes_between(chosen.start, chosen.end, **equal) if successes else []
        if failures:
            found += month.failures_between(chosen.start, chosen.end, **equal)
        return len(found)

    assert count(model="gpt-5.5") == seeded(model="gpt-5.5")
    assert count(account="acct_b") == seeded(account_id="acct_b")
    assert count(model="gpt-5.4", account="acct_c") == seeded(model="gpt-5.4", account_id="acct_c")
    assert count(key="key_two") == seeded(client_api_key_id="key_two")
    assert count(route=ROUTES[1]) == seeded(route=ROUTES[1])
    assert count(status="ok") == seeded(failures=False)
    assert count(status="failed") == seeded(successes=False)
    assert count(status="502") == seeded(successes=False, status_code=502)
    assert count(key="key_two", model="gpt-5.4") == seeded(
        client_api_key_id="key_two", model="gpt-5.4"
    )
    assert count(key=UNKNOWN_DIMENSION) == 0  # every seeded request has a key
    assert count(model="gpt-9") == 0
    assert usage_analysis(chosen, filters=AnalyticsFilters(key="key_two")).source == "facts"
    assert usage_analysis(chosen, filters=AnalyticsFilters(model="gpt-5.5")).source == "buckets"
    assert count() > max(count(model=model) for model in MODELS)


def test_the_percentiles_come_from_the_newest_records_when_the_range_holds_more(month):
    chosen = usage_range("30d", now=month.now, zone=UTC)
    newest = sorted(
        month.successes_between(chosen.start, chosen.end), key=lambda fact: fact.created_at
    )[-10:]

    analysis = usage_analysis(chosen, sample_limit=10)

    sample = analysis.sample
    assert (sample.requests, sample.complete) == (10, False)
    assert sample.oldest == newest[0].created_at
    assert sample.latency[1] == pytest.approx(percentile([f.latency_ms for f in newest], 0.95))
    assert sample.reasoning_tokens == sum(fact.reasoning_tokens for fact in newest)
    # The counts themselves are never sampled.
    assert analysis.totals.success == len(month.successes_between(chosen.start, chosen.end))


def test_a_range_in_another_zone_starts_at_its_midnight(month):
    tokyo = ZoneInfo("Asia/Tokyo")
    chosen = usage_range("7d", now=month.now, zone=tokyo)
    start, end = (
        midnight(month.now, tokyo, days_back=6),
        midnight(month.now, tokyo) + timedelta(days=1),
    )

    analysis = usage_analysis(chosen)

    assert (chosen.start, chosen.end) == (start, end)
    assert analysis.totals.requests == len(month.successes_between(start, end)) + len(
        month.failures_between(start, end)
    )
    assert (
        analysis.usage_range.period_label(0)
        == (month.now.astimezone(tokyo).date() - timedelta(days=6)).isoformat()
    )


def test_buckets_and_facts_agree_on_every_day(month):
    """The per-day figures of a model breakdown (buckets) and of a route breakdown (facts) are
    the same requests counted twice."""
    chosen = usage_range("30d", now=month.now, zone=UTC)

    from_buckets = usage_analysis(chosen, by="model")
    from_facts = usage_analysis(chosen, by="route")

    assert [sums.requests for sums in from_buckets.series] == [
        sums.requests for sums in from_facts.series
    ]
    assert [sums.input_tokens for sums in from_buckets.series] == [
        sums.input_tokens for sums in from_facts.series
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "select coalesce(sum(success_count + error_count), 0) from request_time_buckets"
            " where bucket_start >= %s and bucket_start < %s",
            [chosen.start, chosen.end],
        )
        assert from_buckets.totals.requests == cursor.fetchone()[0]
