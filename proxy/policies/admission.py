"""What the dispatch asks of a key's policy: before scheduling, may this request run
(``refusal``); after its report, what it used (``settle_later``).

A request whose key has no policy costs nothing here (no Redis, no PostgreSQL). With one: the
allowed-models check needs no store; the counters are one Lua call (plus, with a budget, a
cold admission's reads and one Redis write: below).

**Budget reservations.** With a budget, each admitted request reserves an estimate of its
cost until it is settled to the real cost (``counters``), so that requests admitted side by
side cannot together pass the budget by more than one request's cost; how the estimate is made
and what the bound assumes: ``proxy.policies.estimate``. A request is refused for the
reservations only while the spend **plus what the requests in flight reserved** has reached
the budget: a request alone (nothing else in flight) is admitted whenever the spend is under
the budget, whatever its estimate — it can only be made to wait for the key's own requests in
flight (429 ``key_budget_reserved``, ``Retry-After: 1``).

A cold admission (with a budget: the spend, the key's cost high-water or the model's not in
Redis) reads what is missing from ``usage_records`` (one grouped spend query; one or two for
the key's high-water, once per budget window; one for the model's, when it is missing or due
for its refresh every ``MODEL_COST_REFRESH_SECONDS`` — one admission in the pool claims each
refresh), seeds it and asks again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from asgiref.sync import sync_to_async
from django.utils import timezone

from proxy.dispatch.client_errors import ClientError
from proxy.dispatch.types import DispatchRequest
from proxy.ledger import affinity
from proxy.policies import counters
from proxy.policies.cost_history import key_highest_cost_micro, pool_highest_cost_micro
from proxy.policies.counters import Estimates, Periods, Seed
from proxy.policies.estimate import body_estimate_micro, default_estimate_micro
from proxy.policies.rules import (
    KeyPolicy,
    day_label,
    day_start,
    month_label,
    month_start,
    next_day_start,
    next_month_start,
)
from proxy.policies.spend import key_spend
from telemetry.billing import request_cost
from telemetry.services.facts import UsageFact

logger = logging.getLogger(__name__)

MODEL_NOT_ALLOWED = ClientError(
    403,
    "invalid_request_error",
    "model_not_allowed",
    "This API key is not allowed to use this model",
)
_REFUSALS = {
    "requests": ClientError(
        429,
        "rate_limit_error",
        "key_rate_limited",
        "This API key is over its requests-per-minute limit",
    ),
    "tokens": ClientError(
        429,
        "rate_limit_error",
        "key_tokens_limited",
        "This API key is over its tokens-per-minute limit",
    ),
    "concurrency": ClientError(
        429,
        "rate_limit_error",
        "key_concurrency_limited",
        "This API key has as many requests in flight as its policy allows",
    ),
    "day_reserved": ClientError(
        429,
        "rate_limit_error",
        "key_budget_reserved",
        "This API key's requests in flight hold the rest of its daily budget; retry when "
        "they finish",
    ),
    "month_reserved": ClientError(
        429,
        "rate_limit_error",
        "key_budget_reserved",
        "This API key's requests in flight hold the rest of its monthly budget; retry when "
        "they finish",
    ),
    "day_budget": ClientError(
        429,
        "insufficient_quota",
        "key_budget_exceeded",
        "This API key has reached its daily budget (resets at 00:00 UTC)",
    ),
    "month_budget": ClientError(
        429,
        "insufficient_quota",
        "key_budget_exceeded",
        "This API key has reached its monthly budget (resets on the 1st, 00:00 UTC)",
    ),
}


@dataclass(frozen=True)
class Refusal:
    error: ClientError
    retry_after_seconds: int | None = None


def periods_of(now: datetime) -> Periods:
    return Periods(
        day=day_label(now),
        month=month_label(now),
        next_day_ms=int(next_day_start(now).timestamp() * 1000),
        next_month_ms=int(next_month_start(now).timestamp() * 1000),
    )


def _estimates(request: DispatchRequest) -> Estimates:
    if request.key_policy is None or not request.key_policy.has_budget:
        return Estimates(model=request.model)
    return Estimates(
        model=request.model,
        body_micro=body_estimate_micro(request),
        default_micro=default_estimate_micro(request),
    )


def _read_seed(policy: KeyPolicy, model: str, missing: int, *, now: datetime) -> Seed:
    """What a cold admission found ``missing`` (``counters.MISSING_*``), from the usage rows."""
    day = month = key_high = model_high = None
    if missing & counters.MISSING_SPEND:
        spend = key_spend(policy.key_id, now=now)
        day, month = spend.day_micro, spend.month_micro
    if missing & counters.MISSING_KEY_HIGH:
        since = day_start(now) if policy.daily_budget_micro is not None else month_start(now)
        key_high = key_highest_cost_micro(policy.key_id, since=since, now=now)
    refreshed = bool(missing & counters.STALE_MODEL_HIGH)  # never with MISSING_MODEL_HIGH
    if missing & (counters.MISSING_MODEL_HIGH | counters.STALE_MODEL_HIGH):
        model_high = pool_highest_cost_micro(model, now=now)
    return Seed(
        day_micro=day,
        month_micro=month,
        key_high_micro=key_high,
        model_high_micro=model_high,
        model_high_refreshed=refreshed,
    )


async def refusal(request: DispatchRequest) -> Refusal | None:
    """None when the key's policy lets ``request`` run (it then counts and holds an in-flight
    slot, with its budget reservation, until ``settle_later``), else why not. Called once per
    dispatch, before scheduling."""
    policy = request.key_policy
    if policy is None:
        return None
    if not policy.allows_model(request.model):
        return Refusal(MODEL_NOT_ALLOWED)
    now = timezone.now()
    periods = periods_of(now)
    at_ms = int(now.timestamp() * 1000)
    estimates = _estimates(request)

    async def admit() -> counters.Verdict:
        return await counters.admit(
            policy, request.admission_id, periods, at_ms=at_ms, estimates=estimates
        )

    verdict = await admit()
    if verdict.verdict == "cold":
        values = await sync_to_async(_read_seed, thread_sensitive=False)(
            policy, request.model, verdict.missing, now=now
        )
        await counters.seed(policy, periods, request.model, values)
        verdict = await admit()
    if verdict.admitted:
        request.key_admitted = True
        request.key_reserved_micro = verdict.reserved_micro
        return None
    if verdict.verdict == "cold":  # the cache vanished again at once (a flush): let it run
        logger.warning("key policy spend cache unavailable; request admitted without budget")
        return None
    return Refusal(_REFUSALS[verdict.verdict], verdict.retry_after_seconds)


def in_flight_member(request: DispatchRequest) -> str | None:
    """``request``'s member of its key's in-flight ZSET, or None when it holds none."""
    if request.key_policy is None or not request.key_admitted:
        return None
    return counters.in_flight_member(request.admission_id, request.key_reserved_micro)


def _cost_micro(usage: UsageFact) -> int:
    cost = request_cost(
        model=usage.model,
        service_tier=usage.service_tier,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
    )
    return round(cost.total * 1_000_000)


def settle_later(request: DispatchRequest, usage: UsageFact | None) -> None:
    """After the report: free the request's in-flight slot and budget reservation, count its
    tokens and real cost (the usage row the ledger writes, so the cache agrees with a later
    recomputation) — on every exit: an answer, an error, a client gone. Goes with
    the next batch of after-response writes (``proxy.ledger.affinity``): the report is frozen
    in a synchronous ``finally``."""
    policy = request.key_policy
    if policy is None or not request.key_admitted:
        return
    tokens = cost = 0
    if usage is not None:
        tokens = (usage.input_tokens or 0) + (usage.output_tokens or 0)
        cost = _cost_micro(usage)
    periods = periods_of(timezone.now())
    affinity.submit_call(
        counters.settle_call(
            policy,
            in_flight_member(request),
            periods,
            model=request.model,
            tokens=tokens,
            cost_micro=cost,
        )
    )


async def await_pending_settlements() -> None:
    """Wait for the settlements scheduled so far (tests, graceful stop)."""
    await affinity.await_pending_writes()
