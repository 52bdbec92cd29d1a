"""What the dispatch asks of a key's policy: before scheduling, may this request run
(``refusal``); after its report, what it used (``settle_later``).

A request whose key has no policy costs nothing here (no Redis, no PostgreSQL). With one: the
allowed-models check needs no store; the counters are one Lua call (plus, once a minute per
key with a budget, one spend query and one Redis write).

**Budget reservations.** With a budget, each admitted request reserves an estimate of its
cost until it is settled to the real cost (``counters``), so that requests admitted side by
side cannot together pass the budget by more than one request's cost. The estimate is the
larger of

* the body's input at the model's price: ``body bytes / 4`` tokens (about what a tokenizer
  makes of English text and JSON; an image's base64 counts more than it costs), uncached, with
  the service tier's multiplier — the part of the cost the request itself shows;
* the key's recent cost per request (``cost_hint``: the month's average cost per request from
  ``usage_records`` at first, then each settled cost, following a new peak at once and
  decaying by an eighth of the gap per cheaper request) — what the body cannot show: the
  output (the Codex upstream refuses ``max_output_tokens``, so nothing bounds it in advance)
  and a continuation's stored history (``previous_response_id``).

A request is refused for the reservations only while the spend **plus what the requests in
flight reserved** has reached the budget: a request alone (nothing else in flight) is admitted
whenever the spend is under the budget, whatever its estimate, so an estimate never makes a
request impossible that fits it — it can only make it wait for the key's own requests in
flight (429 ``key_budget_reserved``, ``Retry-After: 1``). The bound holds when estimates are at
least the real costs; a request that costs more than its estimate passes the budget by the
difference, as before.
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
from proxy.policies.counters import Periods
from proxy.policies.rules import (
    day_label,
    month_label,
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


# Bytes of a request body per input token, for the reservation's estimate (see above).
BODY_BYTES_PER_TOKEN = 4


def body_estimate_micro(request: DispatchRequest) -> int:
    """What ``request``'s body alone will cost as input, in micro-USD (its output and any
    stored history are the key's cost hint's part)."""
    tier = request.body.get("service_tier")
    cost = request_cost(
        model=request.model,
        service_tier=tier if isinstance(tier, str) else None,
        input_tokens=request.body_bytes // BODY_BYTES_PER_TOKEN,
        output_tokens=0,
        cached_tokens=0,
    )
    return round(cost.total * 1_000_000)


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
    estimate = body_estimate_micro(request) if policy.has_budget else 0

    async def admit() -> counters.Verdict:
        return await counters.admit(
            policy, request.admission_id, periods, at_ms=at_ms, estimate_micro=estimate
        )

    verdict = await admit()
    if verdict.verdict == "cold":
        spend = await sync_to_async(key_spend, thread_sensitive=False)(policy.key_id, now=now)
        await counters.seed_spend(
            policy,
            periods,
            day_micro=spend.day_micro,
            month_micro=spend.month_micro,
            typical_cost_micro=spend.typical_cost_micro,
        )
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
            policy, in_flight_member(request), periods, tokens=tokens, cost_micro=cost
        )
    )


async def await_pending_settlements() -> None:
    """Wait for the settlements scheduled so far (tests, graceful stop)."""
    await affinity.await_pending_writes()
