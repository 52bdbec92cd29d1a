"""A usage record or ops error as the admin API shows it, with the cost breakdown of spec §7.4
computed on the spot (never stored)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proxy.admin_api.display import china_iso, china_time, milliseconds, number, usd
from proxy.models import Account
from telemetry.billing import request_cost
from telemetry.models import OpsErrorLog, UsageRecord

TIER_NAMES = {"priority": "Fast", "flex": "Flex", "default": "Default"}


def account_emails(account_ids: Iterable[str | None]) -> dict[str, str | None]:
    ids = {account_id for account_id in account_ids if account_id}
    if not ids:
        return {}
    return dict(Account.objects.filter(pk__in=ids).values_list("id", "email"))


def cost_details(record: UsageRecord) -> dict | None:
    """The cost of one success; None when it reported no tokens at all."""
    if record.input_tokens is None and record.output_tokens is None:
        return None
    cost = request_cost(
        model=record.model,
        service_tier=record.service_tier,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cached_tokens=record.cached_tokens,
    )
    cache_price = cost.rates.cache_read
    return {
        "pricedAs": cost.priced_as,
        "inputCost": cost.input_cost,
        "outputCost": cost.output_cost,
        "cacheReadCost": cost.cache_read_cost,
        "totalCost": cost.total,
        "originalCost": cost.original,
        "inputPrice": cost.rates.input,
        "outputPrice": cost.rates.output,
        "cacheReadPrice": cache_price,
        "serviceTier": cost.service_tier,
        "serviceTierDisplay": TIER_NAMES[cost.service_tier],
        "multiplier": cost.multiplier,
        "inputCostDisplay": usd(cost.input_cost),
        "outputCostDisplay": usd(cost.output_cost),
        "cacheReadCostDisplay": usd(cost.cache_read_cost),
        "totalCostDisplay": usd(cost.total),
        "originalCostDisplay": usd(cost.original),
        "inputPriceDisplay": f"${cost.rates.input:g} / 1M",
        "outputPriceDisplay": f"${cost.rates.output:g} / 1M",
        "cacheReadPriceDisplay": f"${cache_price:g} / 1M" if cache_price is not None else "-",
        "multiplierDisplay": f"×{cost.multiplier:g}",
    }


def _tokens(record: UsageRecord) -> dict:
    values = {
        "inputTokens": record.input_tokens,
        "outputTokens": record.output_tokens,
        "cachedTokens": record.cached_tokens,
        "reasoningTokens": record.reasoning_tokens,
        "totalTokens": (record.input_tokens or 0) + (record.output_tokens or 0),
    }
    details: dict[str, Any] = {}
    for name, value in values.items():
        details[name] = value
        details[f"{name}Display"] = number(value)
    return details


def usage_item(record: UsageRecord, *, emails: dict[str, str | None]) -> dict:
    metadata = record.metadata_json if isinstance(record.metadata_json, dict) else {}
    return {
        "id": record.id,
        "requestId": record.request_id,
        "clientApiKeyId": record.client_api_key_id,
        "kind": record.kind,
        "route": record.route,
        "provider": record.provider,
        "accountId": record.account_id,
        "accountEmail": emails.get(record.account_id) or "",
        "model": record.model,
        "requestedModel": record.requested_model,
        "upstreamModel": record.upstream_model,
        "serviceTier": record.service_tier,
        "statusCode": record.status_code,
        "transport": record.transport,
        "attemptIndex": record.attempt_index,
        "responseId": record.response_id,
        "upstreamRequestId": record.upstream_request_id,
        "latencyMs": record.latency_ms,
        "latencyMsDisplay": milliseconds(record.latency_ms),
        "firstTokenLatencyMs": record.first_token_ms,
        "firstTokenLatencyMsDisplay": milliseconds(record.first_token_ms),
        "inputTokens": record.input_tokens,
        "outputTokens": record.output_tokens,
        "cachedTokens": record.cached_tokens,
        "reasoningTokens": record.reasoning_tokens,
        "tokenDetails": _tokens(record),
        "costDetails": cost_details(record),
        # Shown from the debug metadata (never queried: seed §2.7).
        "clientIp": metadata.get("clientIp"),
        "userAgent": metadata.get("userAgent"),
        "reasoningEffort": metadata.get("reasoningEffort"),
        "message": record.message,
        "metadata": metadata,
        "createdAt": china_iso(record.created_at),
        "createdAtDisplay": china_time(record.created_at),
    }


def ops_error_item(error: OpsErrorLog) -> dict:
    return {
        "id": error.id,
        "requestId": error.request_id,
        "clientApiKeyId": error.client_api_key_id,
        "kind": error.kind,
        "provider": error.provider,
        "accountId": error.account_id,
        "route": error.route,
        "model": error.model,
        "statusCode": error.status_code,
        "clientStatusCode": error.client_status_code,
        "upstreamStatusCode": error.upstream_status_code,
        "transport": error.transport,
        "attemptIndex": error.attempt_index,
        "failureClass": error.failure_class,
        "responseId": error.response_id,
        "upstreamRequestId": error.upstream_request_id,
        "latencyMs": error.latency_ms,
        "latencyMsDisplay": milliseconds(error.latency_ms),
        "message": error.message,
        "metadata": error.metadata_json if isinstance(error.metadata_json, dict) else {},
        "createdAt": china_iso(error.created_at),
        "createdAtDisplay": china_time(error.created_at),
    }
