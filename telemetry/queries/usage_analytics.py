"""Usage analytics over a date range (``telemetry.queries.usage_ranges``): requests, errors,
tokens, cost and latency in total, per period and per group of one breakdown.

Where each figure comes from (seed 004 §5.1):

* breakdown by model or account, filtered by model or account at most — the 15-minute buckets
  (``request_time_buckets``): requests = successes + errors, tokens and latencies of successes,
  the cost priced per model and service tier of each bucket (no long-context surcharge: buckets
  keep no request sizes). Any range the buckets still hold.
* breakdown by key, route or status, or a filter on one of them — the facts (``usage_records``
  for successes, ``ops_error_logs`` for failures): the buckets have no key, route or status.
  Only as far back as the facts are kept; every request priced with its own context size.
* percentiles of latency and first token, and the reasoning tokens a bucket does not keep —
  the newest ``SAMPLE_LIMIT`` (20,000) usage records of the selection (all of them when there are
  fewer; ``Sample.complete`` says which).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from telemetry.billing import prices_for, tier_of, tokens_cost
from telemetry.models import UNKNOWN_DIMENSION
from telemetry.queries.buckets import SumReadings
from telemetry.queries.usage_analytics_sql import (
    FactCondition,
    FactSelection,
    SampleRow,
    bucket_rows,
    ops_fact_rows,
    usage_fact_rows,
    usage_sample_rows,
)
from telemetry.queries.usage_ranges import UsageRange

DIMENSIONS = ("model", "account", "key", "route", "status")
BUCKET_DIMENSIONS = ("model", "account")
SAMPLE_LIMIT = 20_000
STATUS_SUCCEEDED = "ok"
STATUS_FAILED = "failed"


@dataclass(frozen=True)
class AnalyticsFilters:
    """Exact values to keep (None: any). ``status``: "ok" (successes), "failed" (failures) or
    an HTTP status code as text; the unknown dimension (``__unknown__``) matches NULL facts."""

    model: str | None = None
    account: str | None = None
    key: str | None = None
    route: str | None = None
    status: str | None = None

    @property
    def needs_facts(self) -> bool:
        return bool(self.key or self.route or self.status)

    def conditions(self) -> list[FactCondition]:
        """The equalities both fact tables are read with (the status's table choice aside)."""
        columns = {"model": "model", "account": "account_id", "key": "client_api_key_id"}
        conditions = []
        for name, column in (*columns.items(), ("route", "route")):
            value = getattr(self, name)
            if value:
                conditions.append(
                    FactCondition(column, None if value == UNKNOWN_DIMENSION else value)
                )
        if self.status and self.status not in (STATUS_SUCCEEDED, STATUS_FAILED):
            conditions.append(FactCondition("status_code", int(self.status)))
        return conditions


@dataclass
class UsageSums(SumReadings):
    """Counts, token sums, latency sums and cost of some requests. ``reasoning_tokens`` is None
    where the source does not keep them (buckets)."""

    success: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int | None = None
    first_token_sum: int = 0
    first_token_count: int = 0
    latency_sum: int = 0
    latency_count: int = 0
    max_latency_ms: int = 0
    min_latency_ms: int | None = None
    cost: float = 0.0  # USD before the tier multipliers
    actual_cost: float = 0.0  # USD with them

    @property
    def error_rate(self) -> float | None:
        """Failures per request in percent; None without requests."""
        return 100.0 * self.errors / self.requests if self.requests else None

    @property
    def cache_hit_rate(self) -> float | None:
        return 100.0 * self.cached_tokens / self.input_tokens if self.input_tokens else None

    def add(self, other: UsageSums) -> None:
        """Add ``other`` in (written out: it runs for every row of a year of buckets)."""
        self.success += other.success
        self.errors += other.errors
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        if other.reasoning_tokens is not None:
            self.reasoning_tokens = (self.reasoning_tokens or 0) + other.reasoning_tokens
        self.first_token_sum += other.first_token_sum
        self.first_token_count += other.first_token_count
        self.latency_sum += other.latency_sum
        self.latency_count += other.latency_count
        self.max_latency_ms = max(self.max_latency_ms, other.max_latency_ms)
        if other.min_latency_ms is not None and (
            self.min_latency_ms is None or other.min_latency_ms < self.min_latency_ms
        ):
            self.min_latency_ms = other.min_latency_ms
        self.cost += other.cost
        self.actual_cost += other.actual_cost


def _priced(
    sums: UsageSums,
    *,
    model: str,
    service_tier: str | None,
    long_context: bool,
    capped_cached: int,
) -> UsageSums:
    priced_as, prices = prices_for(model)
    cost = tokens_cost(
        priced_as=priced_as,
        prices=prices,
        tier=tier_of(service_tier),
        long_context=long_context,
        input_tokens=sums.input_tokens,
        cached_tokens=min(capped_cached, sums.input_tokens),
        output_tokens=sums.output_tokens,
    )
    sums.cost, sums.actual_cost = cost.original, cost.total
    return sums


@dataclass(frozen=True)
class Sample:
    """Percentiles (p50, p95, p99 in ms) from the newest ``requests`` usage records of the
    selection (at most ``limit``): all of them when ``complete``, else those since ``oldest``."""

    limit: int
    requests: int
    complete: bool
    oldest: datetime | None
    latency: tuple[float, ...] | None
    first_token: tuple[float, ...] | None
    reasoning_tokens: int
    groups: dict[str, SampleRow] = field(default_factory=dict)


@dataclass
class UsageAnalysis:
    """What one selection adds up to: in total, per period of the range (``series[i]`` is
    ``usage_range.period_starts[i]``), per group of ``by``, and per (period, group)."""

    usage_range: UsageRange
    by: str
    filters: AnalyticsFilters
    source: str  # "buckets" | "facts"
    totals: UsageSums
    series: list[UsageSums]
    groups: dict[str, UsageSums]
    group_series: dict[tuple[int, str], UsageSums]
    seen: dict[str, set[str]]  # model / account values in the range before filtering
    sample: Sample


def _bucket_pieces(usage_range: UsageRange, by: str, filters: AnalyticsFilters, seen):
    rows = bucket_rows(
        start=usage_range.start, end=usage_range.end, period_starts=usage_range.period_starts
    )
    for period, account, model, tier, *counts in rows:
        seen["model"].add(model)
        seen["account"].add(account)
        if filters.model and model != filters.model:
            continue
        if filters.account and account != filters.account:
            continue
        success, errors, input_tokens, output_tokens, cached, *latencies = counts
        sums = UsageSums(success, errors, input_tokens, output_tokens, cached, None, *latencies)
        group = model if by == "model" else account
        yield (
            period,
            group,
            _priced(sums, model=model, service_tier=tier, long_context=False, capped_cached=cached),
        )


def _fact_pieces(usage_range: UsageRange, by: str, filters: AnalyticsFilters, seen):
    selection = FactSelection(
        start=usage_range.start,
        end=usage_range.end,
        period_starts=usage_range.period_starts,
        by=by,
        conditions=filters.conditions(),
    )
    if filters.status != STATUS_FAILED:
        for period, group, model, tier, long_context, *counts in usage_fact_rows(selection):
            seen["model"].add(model)
            requests, input_tokens, output_tokens, cached, capped, reasoning, *latencies = counts
            sums = UsageSums(
                requests, 0, input_tokens, output_tokens, cached, reasoning, *latencies
            )
            yield (
                period,
                group,
                _priced(
                    sums,
                    model=model,
                    service_tier=tier,
                    long_context=long_context,
                    capped_cached=capped,
                ),
            )
    if filters.status != STATUS_SUCCEEDED:
        for period, group, errors in ops_fact_rows(selection):
            yield period, group, UsageSums(errors=errors, reasoning_tokens=0)


NO_SAMPLE = Sample(0, 0, True, None, None, None, 0)


def _sample(usage_range: UsageRange, by: str, filters: AnalyticsFilters, limit: int) -> Sample:
    if filters.status == STATUS_FAILED:
        return NO_SAMPLE
    rows = usage_sample_rows(
        start=usage_range.start,
        end=usage_range.end,
        by=by,
        conditions=filters.conditions(),
        limit=limit,
    )
    overall = next(row for row in rows if row.group is None)
    return Sample(
        limit=limit,
        requests=overall.requests,
        complete=overall.requests < limit,
        oldest=overall.oldest,
        latency=overall.latency,
        first_token=overall.first_token,
        reasoning_tokens=overall.reasoning_tokens,
        groups={row.group: row for row in rows if row.group is not None},
    )


def usage_analysis(
    usage_range: UsageRange,
    *,
    by: str = "model",
    filters: AnalyticsFilters | None = None,
    sample_limit: int | None = None,
    with_sample: bool = True,
) -> UsageAnalysis:
    """The selection's figures (module docstring: which table each comes from); percentiles
    from the newest ``sample_limit`` (``SAMPLE_LIMIT``) records, none without ``with_sample``.
    ``by`` is one of ``DIMENSIONS``. One to three queries; raises ValueError for an unknown
    ``by``."""
    if by not in DIMENSIONS:
        raise ValueError(f"unknown breakdown {by!r}")
    filters = filters or AnalyticsFilters()
    seen: dict[str, set[str]] = {"model": set(), "account": set()}
    facts = by not in BUCKET_DIMENSIONS or filters.needs_facts
    pieces = (_fact_pieces if facts else _bucket_pieces)(usage_range, by, filters, seen)
    totals = UsageSums()
    series = [UsageSums() for _ in usage_range.period_starts]
    groups: dict[str, UsageSums] = defaultdict(UsageSums)
    group_series: dict[tuple[int, str], UsageSums] = defaultdict(UsageSums)
    for period, group, sums in pieces:
        # A row past the last plotted period (a clock ahead of ours) counts in the last one.
        index = min(max(period, 0), len(series) - 1)
        for target in (series[index], groups[group], group_series[(index, group)]):
            target.add(sums)
    for sums in series:
        totals.add(sums)
    return UsageAnalysis(
        usage_range=usage_range,
        by=by,
        filters=filters,
        source="facts" if facts else "buckets",
        totals=totals,
        series=series,
        groups=dict(groups),
        group_series=dict(group_series),
        seen=seen,
        sample=(
            _sample(usage_range, by, filters, sample_limit or SAMPLE_LIMIT)
            if with_sample
            else NO_SAMPLE
        ),
    )


def bucket_range_totals(usage_range: UsageRange) -> UsageSums:
    """Everything the buckets hold for the range, priced per model and tier."""
    totals = UsageSums()
    seen: dict[str, set[str]] = {"model": set(), "account": set()}
    for _, _, sums in _bucket_pieces(usage_range, "model", AnalyticsFilters(), seen):
        totals.add(sums)
    return totals
