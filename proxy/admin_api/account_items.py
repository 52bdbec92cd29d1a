"""An account as the admin API shows it (spec §6.3 and the console's fields): identity and
status, quota windows with the usage counted locally inside each, per-model usage in the
longest window, today's burn against its daily burn cap, and the eligibility verdict. Never
its tokens.

Usage inside a window comes from ``request_time_buckets`` (seed §2.10: window distributions are
read from the buckets); without a known window, from ``account_usage``'s window counters. A page
of accounts costs a fixed number of queries (usage rows, two bucket sums, last errors, today's
burns, one Redis MGET of refresh leases), whatever its size.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from proxy.admin_api.display import (
    china_iso,
    china_time,
    percent,
    ratio_percent,
    relative,
    usd,
    with_display,
)
from proxy.admin_api.eligibility import eligibility_verdict
from proxy.admin_api.quota_windows import QuotaWindow, quota_windows
from proxy.daily_burn import daily_burns
from proxy.models import Account, AccountUsage
from proxy.runtime_state.refresh_leases import refresh_leases_held
from telemetry.billing import request_cost
from telemetry.queries.buckets import AccountWindow, BucketSums, bucket_usage_in_windows
from telemetry.queries.usage import latest_error_by_account

FALLBACK_WINDOW_KEY = "account-usage-window"


def _window_usage(sums: BucketSums | None) -> dict:
    sums = sums or BucketSums()
    return with_display(
        {
            "requestCount": sums.requests,
            "inputTokens": sums.input_tokens,
            "outputTokens": sums.output_tokens,
            "cachedTokens": sums.cached_tokens,
            "totalTokens": sums.total_tokens,
        }
    )


def _window_item(window: QuotaWindow, sums: BucketSums | None) -> dict:
    used = window.used_percent
    if window.used is not None and window.limit is not None:
        used_display = f"{window.used} / {window.limit}"
    else:
        used_display = f"{percent(used, digits=0)} used"
    return {
        "key": window.key,
        "group": window.group,
        "windowSeconds": window.window_seconds,
        "labelDisplay": window.label,
        "usedPercent": used,
        "usedPercentDisplay": percent(used, digits=0),
        "limitReached": window.limit_reached,
        "resetAt": china_iso(window.reset_at),
        "resetAtDisplay": china_time(window.reset_at),
        "windowUsedDisplay": used_display,
        "localUsage": _window_usage(sums),
    }


def _longest(windows: list[QuotaWindow]) -> QuotaWindow | None:
    timed = [window for window in windows if window.window_seconds]
    return max(timed, key=lambda window: window.window_seconds or 0) if timed else None


def _fallback_window_start(usage: AccountUsage | None) -> datetime | None:
    if usage is None:
        return None
    if usage.window_reset_at and usage.limit_window_seconds:
        return usage.window_reset_at - timedelta(seconds=usage.limit_window_seconds)
    return usage.window_started_at


def _model_items(rows: dict[tuple, BucketSums], *, now: datetime) -> list[dict]:
    """Per model (tiers added up), most requests first."""
    by_model: dict[str, list[tuple[str, BucketSums]]] = defaultdict(list)
    for (_, _, model, tier), sums in rows.items():
        by_model[model].append((tier, sums))
    items = []
    for model, tiers in by_model.items():
        success = sum(sums.success for _, sums in tiers)
        requests = sum(sums.requests for _, sums in tiers)
        input_tokens = sum(sums.input_tokens for _, sums in tiers)
        output_tokens = sum(sums.output_tokens for _, sums in tiers)
        cached = sum(sums.cached_tokens for _, sums in tiers)
        cost = sum(
            request_cost(
                model=model,
                service_tier=tier,
                input_tokens=sums.input_tokens,
                output_tokens=sums.output_tokens,
                cached_tokens=sums.cached_tokens,
            ).total
            for tier, sums in tiers
        )
        last = max((sums.last_updated for _, sums in tiers if sums.last_updated), default=None)
        success_rate = ratio_percent(success, requests)
        items.append(
            {
                "model": model,
                **with_display(
                    {
                        "requestCount": requests,
                        "inputTokens": input_tokens,
                        "outputTokens": output_tokens,
                        "cachedTokens": cached,
                        "totalTokens": input_tokens + output_tokens,
                    }
                ),
                "successRate": success_rate,
                "successRateDisplay": percent(success_rate),
                "totalCostUsd": round(cost, 6),
                "totalCostUsdDisplay": usd(cost),
                "lastUsedAt": china_iso(last),
                "lastUsedAtDisplay": relative(last, now=now),
            }
        )
    return sorted(items, key=lambda item: (-item["requestCount"], item["model"]))


def _usage_block(
    *,
    usage: AccountUsage | None,
    window_sums: BucketSums | None,
    models: list[dict],
    window: QuotaWindow | None,
    since: datetime | None,
    now: datetime,
) -> dict:
    if window_sums is not None:
        requests, input_tokens = window_sums.requests, window_sums.input_tokens
        output_tokens, cached = window_sums.output_tokens, window_sums.cached_tokens
        source = "request_time_buckets"
    else:
        requests = usage.window_request_count if usage else 0
        input_tokens = usage.window_input_tokens if usage else 0
        output_tokens = usage.window_output_tokens if usage else 0
        cached = usage.window_cached_tokens if usage else 0
        source = "account_usage"
    last_used = usage.last_used_at if usage else None
    return {
        **with_display(
            {
                "requestCount": requests,
                "inputTokens": input_tokens,
                "outputTokens": output_tokens,
                "cachedTokens": cached,
                "totalTokens": input_tokens + output_tokens,
                "createdTokens": max(0, input_tokens - cached),
                "readTokens": cached,
            }
        ),
        "windowKey": window.key if window else None,
        "windowStartedAt": china_iso(since),
        "source": source,
        "lifetimeRequestCount": usage.request_count if usage else 0,
        "lifetimeTotalTokens": usage.total_tokens if usage else 0,
        "lastUsedAt": china_iso(last_used),
        "lastUsedAtDisplay": relative(last_used, now=now),
        "models": models,
    }


def account_items(accounts: list[Account], *, now: datetime) -> list[dict]:
    """The API items of ``accounts`` (a page), in order."""
    ids = [account.pk for account in accounts]
    usages = {usage.account_id: usage for usage in AccountUsage.objects.filter(account_id__in=ids)}
    refreshing = refresh_leases_held(ids)
    last_errors = latest_error_by_account(ids)
    burns = daily_burns(ids, now=now)
    windows_of = {account.pk: quota_windows(account.quota_json) for account in accounts}

    bucket_windows: list[AccountWindow] = []
    longest_of: dict[str, tuple[QuotaWindow | None, datetime | None]] = {}
    for account in accounts:
        for window in windows_of[account.pk]:
            start = window.started_at(now=now)
            if start is not None:
                bucket_windows.append(AccountWindow(account.pk, window.key, start))
        longest = _longest(windows_of[account.pk])
        since = longest.started_at(now=now) if longest else None
        if since is None:
            since = _fallback_window_start(usages.get(account.pk))
            if since is not None:
                bucket_windows.append(AccountWindow(account.pk, FALLBACK_WINDOW_KEY, since))
        longest_of[account.pk] = (longest, since)
    window_sums = bucket_usage_in_windows(bucket_windows)
    model_windows = [
        AccountWindow(account_id, longest.key if longest else FALLBACK_WINDOW_KEY, since)
        for account_id, (longest, since) in longest_of.items()
        if since is not None
    ]
    model_rows = bucket_usage_in_windows(model_windows, by_model=True)
    models_of: dict[str, dict[tuple, BucketSums]] = defaultdict(dict)
    for key, sums in model_rows.items():
        models_of[key[0]][key] = sums

    items = []
    for account in accounts:
        usage = usages.get(account.pk)
        windows = windows_of[account.pk]
        longest, since = longest_of[account.pk]
        longest_key = longest.key if longest else FALLBACK_WINDOW_KEY
        is_refreshing = account.pk in refreshing
        items.append(
            {
                "id": account.pk,
                # The console calls .trim() on it: a string, never null.
                "email": account.email or "",
                "accountId": account.chatgpt_account_id,
                "userId": account.chatgpt_user_id,
                "label": account.label,
                "planType": account.plan_type,
                "hasRefreshToken": bool(account.refresh_token),
                "status": account.status,
                "displayStatus": "refreshing" if is_refreshing else account.status,
                "tokenRefreshing": is_refreshing,
                "accessTokenExpiresAt": china_iso(account.access_token_expires_at),
                "accessTokenExpiresAtDisplay": china_time(account.access_token_expires_at),
                "nextRefreshAt": china_iso(account.next_refresh_at),
                "addedAt": china_iso(account.added_at),
                "addedAtDisplay": china_time(account.added_at),
                "updatedAt": china_iso(account.updated_at),
                "updatedAtDisplay": china_time(account.updated_at),
                "quota": {
                    "refreshedAt": china_iso(account.quota_fetched_at),
                    "refreshedAtDisplay": china_time(account.quota_fetched_at),
                    "limitReached": account.quota_limit_reached,
                    "verifyRequired": account.quota_verify_required,
                    "cooldownUntil": china_iso(account.quota_cooldown_until),
                    "cooldownUntilDisplay": china_time(account.quota_cooldown_until),
                    "windows": [
                        _window_item(window, window_sums.get((account.pk, window.key)))
                        for window in windows
                    ],
                },
                "usage": _usage_block(
                    usage=usage,
                    window_sums=window_sums.get((account.pk, longest_key))
                    if since is not None
                    else None,
                    models=_model_items(models_of.get(account.pk, {}), now=now),
                    window=longest,
                    since=since,
                    now=now,
                ),
                "dailyBurn": burns[account.pk].as_item(iso=china_iso),
                "eligibility": eligibility_verdict(
                    account,
                    windows=windows,
                    refreshing=is_refreshing,
                    last_error=last_errors.get(account.pk),
                    daily_burn=burns[account.pk],
                    now=now,
                ),
            }
        )
    return items
