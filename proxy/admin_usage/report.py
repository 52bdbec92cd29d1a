"""The usage page's figures as shown: the names of the groups (account labels or e-mails, key
names, status phrases), the cards, the table rows, the charts' data and the CSV rows, and the
notes that say which table each figure comes from."""

from __future__ import annotations

import http
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from proxy.admin_api.display import milliseconds, number, percent, usd
from proxy.admin_usage.selection import Selection
from proxy.models import Account, ClientApiKey, RuntimeSettings
from proxy.services.runtime_settings import RUNTIME_SETTINGS_DEFAULTS
from telemetry.models import UNKNOWN_DIMENSION
from telemetry.queries.usage_analytics import UsageAnalysis, UsageSums
from telemetry.queries.usage_analytics_sql import SampleRow

BREAKDOWN_LABELS = {
    "model": "Model",
    "account": "Account",
    "key": "Client key",
    "route": "Route",
    "status": "Status",
}
UNKNOWN_NAMES = {
    "model": "(no model)",
    "account": "(no account)",
    "key": "(no key)",
    "route": "(no route)",
    "status": "(no status)",
}
CSV_COLUMNS = (
    "period_start",
    "group",
    "name",
    "requests",
    "succeeded",
    "failed",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "cost_usd",
    "average_latency_ms",
    "average_first_token_ms",
)


def _account_names(ids: set[str]) -> dict[str, str]:
    rows = Account.objects.filter(pk__in=ids).values_list("id", "label", "email")
    return {account_id: label or email or account_id for account_id, label, email in rows}


def _key_names(ids: set[str]) -> dict[str, str]:
    rows = ClientApiKey.objects.filter(pk__in=ids).values_list("id", "name")
    return {key_id: name or key_id for key_id, name in rows}


def _status_name(code: str) -> str:
    try:
        return f"{code} {http.HTTPStatus(int(code)).phrase}"
    except ValueError:
        return code


def group_names(by: str, groups: Iterable[str]) -> dict[str, str]:
    """What a person reads for each group of ``by``: an account's label or e-mail, a key's
    name (a deleted account or key by its id, marked so), a status with its phrase."""
    wanted = set(groups)
    known = wanted - {UNKNOWN_DIMENSION}
    if by == "account":
        found = _account_names(known)
    elif by == "key":
        found = _key_names(known)
    elif by == "status":
        found = {code: _status_name(code) for code in known}
    else:
        found = {name: name for name in known}
    names = {}
    for group in wanted:
        if group == UNKNOWN_DIMENSION:
            names[group] = UNKNOWN_NAMES[by]
        else:
            names[group] = found.get(group) or f"{group} (deleted)"
    return names


def _percentiles(values: tuple[float, ...] | None) -> tuple[str, str, str]:
    if not values:
        return ("-", "-", "-")
    return tuple(milliseconds(value) for value in values)  # type: ignore[return-value]


def _reasoning(sums: UsageSums, sample: SampleRow | None, *, complete: bool) -> str:
    if sums.reasoning_tokens is not None:
        return number(sums.reasoning_tokens)
    if sample is None:
        return "-"
    return number(sample.reasoning_tokens) + ("" if complete else " *")


def _figures(sums: UsageSums, sample: SampleRow | None, *, complete: bool) -> dict:
    latency = _percentiles(sample.latency if sample else None)
    first_token = _percentiles(sample.first_token if sample else None)
    return {
        "requests": number(sums.requests),
        "succeeded": number(sums.success),
        "failed": number(sums.errors),
        "error_rate": percent(sums.error_rate),
        "input": number(sums.input_tokens),
        "output": number(sums.output_tokens),
        "cached": number(sums.cached_tokens),
        "reasoning": _reasoning(sums, sample, complete=complete),
        "cost": usd(sums.actual_cost),
        "latency": milliseconds(sums.average_latency_ms),
        "latency_p50": latency[0],
        "latency_p95": latency[1],
        "latency_p99": latency[2],
        "first_token": milliseconds(sums.average_first_token_ms),
        "first_token_p50": first_token[0],
        "first_token_p95": first_token[1],
        "first_token_p99": first_token[2],
    }


def table_rows(selection: Selection, analysis: UsageAnalysis, names: dict[str, str]) -> list:
    """One row per group, most requests first: its name, the link that filters by it, and
    its figures (display strings)."""
    complete = analysis.sample.complete
    ordered = sorted(analysis.groups.items(), key=lambda item: (-item[1].requests, names[item[0]]))
    return [
        {
            "group": group,
            "name": names[group],
            "filter_query": selection.with_filter(analysis.by, group),
            **_figures(sums, analysis.sample.groups.get(group), complete=complete),
        }
        for group, sums in ordered
    ]


def totals(analysis: UsageAnalysis) -> dict:
    sample = analysis.sample
    overall = SampleRow(
        None, sample.requests, sample.latency, sample.first_token, sample.reasoning_tokens, None
    )
    figures = _figures(analysis.totals, overall, complete=sample.complete)
    figures["list_cost"] = usd(analysis.totals.cost)
    figures["tokens"] = number(analysis.totals.total_tokens)
    return figures


def chart_data(analysis: UsageAnalysis, rows: list) -> dict:
    """The numbers the page's charts plot (read back by the browser test)."""
    series = analysis.series
    usage_range = analysis.usage_range

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    by_group = [analysis.groups[row["group"]] for row in rows]
    return {
        "period": usage_range.period,
        "labels": [usage_range.period_label(index) for index in range(len(series))],
        "requests": [sums.requests for sums in series],
        "errors": [sums.errors for sums in series],
        "input": [sums.input_tokens for sums in series],
        "output": [sums.output_tokens for sums in series],
        "cached": [sums.cached_tokens for sums in series],
        "cost": [round(sums.actual_cost, 6) for sums in series],
        "latency": [rounded(sums.average_latency_ms) for sums in series],
        "firstToken": [rounded(sums.average_first_token_ms) for sums in series],
        "groups": {
            "title": BREAKDOWN_LABELS[analysis.by],
            "labels": [row["name"] for row in rows],
            "requests": [sums.requests for sums in by_group],
            "errors": [sums.errors for sums in by_group],
            "cost": [round(sums.actual_cost, 6) for sums in by_group],
        },
    }


def _day(moment: datetime, analysis: UsageAnalysis) -> str:
    return moment.astimezone(analysis.usage_range.zone).strftime("%Y-%m-%d %H:%M")


def source_notes(analysis: UsageAnalysis, *, now: datetime) -> list[str]:
    """Which table the figures come from, what it cannot say, and how far back it reaches."""
    retention = ("usage_retention_days", "ops_error_retention_days", "bucket_retention_days")
    kept = RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID).values(
        *retention
    ).first() or {name: RUNTIME_SETTINGS_DEFAULTS[name] for name in retention}
    start = analysis.usage_range.start
    notes = []
    if analysis.source == "buckets":
        notes.append(
            "From the 15-minute buckets (request_time_buckets): requests (successes + "
            "failures), tokens, average latencies and the cost, priced per model and service "
            "tier (no long-context surcharge: buckets keep no request sizes). The buckets have "
            "no key, route or status: those breakdowns and filters read the usage records."
        )
        cutoff = now - timedelta(days=kept["bucket_retention_days"])
        if start < cutoff:
            notes.append(
                f"Buckets are kept {kept['bucket_retention_days']} days: nothing before "
                f"{_day(cutoff, analysis)} is left."
            )
    else:
        notes.append(
            "From the usage records (successes) and ops errors (failures): the buckets have no "
            "key, route or status. Each request is priced with its own context size."
        )
        cutoff = now - timedelta(
            days=min(kept["usage_retention_days"], kept["ops_error_retention_days"])
        )
        if start < cutoff:
            notes.append(
                f"Usage records are kept {kept['usage_retention_days']} days and ops errors "
                f"{kept['ops_error_retention_days']} days: requests before "
                f"{_day(cutoff, analysis)} are no longer counted."
            )
    sample = analysis.sample
    what = "Percentiles" if analysis.source == "facts" else "Percentiles and reasoning tokens"
    if sample.complete:
        notes.append(
            f"{what}: all {number(sample.requests)} successful requests of the selection "
            "(usage records)."
        )
    else:
        since = _day(sample.oldest, analysis) if sample.oldest else "-"
        notes.append(
            f"{what} (*): the newest {number(sample.limit)} successful requests of the "
            f"selection (since {since}); the range holds more."
        )
    return notes


# A cell a spreadsheet would run as a formula (OWASP's CSV injection): an account's e-mail comes
# from its token's unverified claims, so a name may start with one of these.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: a leading ``'`` before a formula."""
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


def csv_rows(analysis: UsageAnalysis, names: dict[str, str]) -> Iterator[list]:
    """One row per period and group that had requests, oldest period first (the header is
    ``CSV_COLUMNS``)."""
    usage_range = analysis.usage_range
    for (period, group), sums in sorted(
        analysis.group_series.items(), key=lambda item: (item[0][0], names[item[0][1]])
    ):
        if not sums.requests:
            continue
        start = usage_range.period_starts[period].astimezone(usage_range.zone)
        latency, first_token = sums.average_latency_ms, sums.average_first_token_ms
        yield [
            start.isoformat(),
            spreadsheet_safe(group),
            spreadsheet_safe(names[group]),
            sums.requests,
            sums.success,
            sums.errors,
            sums.input_tokens,
            sums.output_tokens,
            sums.cached_tokens,
            "" if sums.reasoning_tokens is None else sums.reasoning_tokens,
            f"{sums.actual_cost:.6f}",
            "" if latency is None else f"{latency:.1f}",
            "" if first_token is None else f"{first_token:.1f}",
        ]
