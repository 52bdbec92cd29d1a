"""What the dispatch asks of a key's policy: before scheduling, may this request run
(``refusal``); after its report, what it used (``settle_later``). Before that, the /v1 handler
admits a request from its headers alone (``admit_before_body``: the admission the dispatch
then takes over, issue 35 item 4), and the client WebSocket asks of a frame that will wait
whether it would be admitted (``refusal_on_arrival``, read-only).

A request whose key has no policy costs nothing here (no Redis, no PostgreSQL). With one: the
allowed-models check needs no store; the counters are one Lua call (plus, with a budget, a
cold admission's reads and one Redis write: below).

**Budget reservations.** With a budget, each admitted request reserves an estimate of its
cost until it is settled to the real cost (``counters``), so that requests admitted side by
side cannot together pass the budget by more than one request's cost; how the estimate is made
— before the body and after it — and what the bound assumes: ``proxy.policies.estimate``. A
request admitted before its body was read reserves what the headers allow (the key's
high-water and the largest prior of the models it may name: its short list of allowed models,
else the model of its latest request in this process, ``recent_models``); once its body is
known the dispatch raises the reservation to the estimate of its model (one more Lua call, only
when that is the larger or may be: ``counters.confirm``), checking the budgets again as an
admission would — so the bound holds as for a request admitted after its body.

A request is refused for the reservations only while the spend **plus what the requests in
flight reserved** has reached the budget: a request alone (nothing else in flight) is admitted
whenever the spend is under the budget, whatever its estimate — it can only be made to wait for
the key's own requests in flight (429 ``key_budget_reserved``, ``Retry-After: 1``).

A cold admission (with a budget: the spend, the key's cost high-water or a model's not in
Redis) reads what is missing from ``usage_records`` (one grouped spend query; one or two for
the key's high-water, once per budget window; one for the models', when missing or due for
their refresh every ``MODEL_COST_REFRESH_SECONDS`` — one admission in the pool claims each
refresh), seeds it and asks again (``_with_history_cached``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from proxy.domain import early_admission
from proxy.domain.client_errors import ClientError
from proxy.domain.dispatch_types import DispatchRequest
from proxy.domain.early_admission import EarlyAdmission, new_admission_id
from proxy.domain.key_policy import (
    KeyPolicy,
    day_label,
    day_start,
    month_label,
    month_start,
    next_day_start,
    next_month_start,
)
from proxy.ledger import affinity
from proxy.policies import counters, recent_models
from proxy.policies.cost_history import key_highest_cost_micro, pool_highest_costs_micro
from proxy.policies.counters import Estimates, Periods, Seed
from proxy.policies.estimate import (
    estimate_known_from,
    estimates_after_body,
    estimates_before_body,
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


def _read_seed(
    policy: KeyPolicy, estimates: Estimates, verdict: counters.Verdict, *, now: datetime
) -> Seed:
    """What a cold admission found missing (``verdict``), from the usage rows."""
    day = month = key_high = None
    if verdict.missing & counters.MISSING_SPEND:
        spend = key_spend(policy.key_id, now=now)
        day, month = spend.day_micro, spend.month_micro
    if verdict.missing & counters.MISSING_KEY_HIGH:
        since = day_start(now) if policy.daily_budget_micro is not None else month_start(now)
        key_high = key_highest_cost_micro(policy.key_id, since=since, now=now)
    wanted = {
        model: high
        for model, high in zip(estimates.models, verdict.model_highs, strict=False)
        if high in (counters.HIGH_MISSING, counters.HIGH_DUE)
    }
    return Seed(
        day_micro=day,
        month_micro=month,
        key_high_micro=key_high,
        model_highs=pool_highest_costs_micro(wanted, now=now) if wanted else {},
        refreshed_models=frozenset(m for m, high in wanted.items() if high == counters.HIGH_DUE),
    )


async def _with_history_cached(
    policy: KeyPolicy,
    now: datetime,
    periods: Periods,
    estimates: Estimates,
    call: Callable[[], Awaitable[counters.Verdict]],
) -> counters.Verdict:
    """``call``'s verdict; when something it needs was not cached (``cold``: a spend, a
    high-water, a model's due refresh), it is computed from ``usage_records``, seeded, and
    ``call`` asked once more."""
    verdict = await call()
    if verdict.verdict == "cold":
        values = await sync_to_async(_read_seed, thread_sensitive=False)(
            policy, estimates, verdict, now=now
        )
        await counters.seed(policy, periods, values)
        verdict = await call()
    return verdict


async def refusal(request: DispatchRequest) -> Refusal | None:
    """None when the key's policy lets ``request`` run (it then counts and holds an in-flight
    slot, with its budget reservation, until ``settle_later``), else why not. Called once per
    dispatch, before scheduling. An admission made before the body was read
    (``request.early_admission``) is taken over rather than made again: the request counts
    once."""
    policy = request.key_policy
    if policy is None:
        return None
    if not policy.allows_model(request.model):
        return Refusal(MODEL_NOT_ALLOWED)
    if policy.has_budget:  # what the key's next request reserves before its body
        recent_models.remember(policy.key_id, request.model)
    now = timezone.now()
    early = request.early_admission
    if early is not None and early.take_over():
        refused = await _take_over(request, early, now)
        if refused is not None or request.key_admitted:
            return refused
        # The early admission had lapsed (its member older than the slot TTL): admitted anew
        # under the same id, so its requests-window entry stays one.
    periods = periods_of(now)
    at_ms = int(now.timestamp() * 1000)
    estimates = estimates_after_body(request)

    async def admit() -> counters.Verdict:
        return await counters.admit(
            policy, request.admission_id, periods, at_ms=at_ms, estimates=estimates
        )

    verdict = await _with_history_cached(policy, now, periods, estimates, admit)
    if verdict.admitted:
        request.key_admitted = True
        request.key_reserved_micro = verdict.reserved_micro
        return None
    if verdict.verdict == "cold":  # the cache vanished again at once (a flush): let it run
        logger.warning("key policy spend cache unavailable; request admitted without budget")
        return None
    return _refusal_of(verdict)


async def _take_over(
    request: DispatchRequest, early: EarlyAdmission, now: datetime
) -> Refusal | None:
    """Make ``early`` the request's admission. No Redis call unless its member must change:
    with a budget, the estimate for the body and model now known may be more than the
    admission reserved (the reservation is raised, the budgets checked again — refused, the
    admission is undone); and a body that took half a slot TTL to arrive has its member
    refreshed before the dispatch's keep-alive would first beat. The member gone (lapsed), the
    request is left not admitted (``key_admitted`` false) and no refusal is returned."""
    policy = early.policy
    request.admission_id = early.admission_id
    request.key_admitted = True
    request.key_reserved_micro = early.reserved_micro
    known = estimate_known_from(request, early)
    fresh = early.age_seconds() < settings.SCHEDULER_SLOT_TTL_SECONDS / 2
    if known is not None and known <= early.reserved_micro and fresh:
        return None
    periods = periods_of(now)
    at_ms = int(now.timestamp() * 1000)
    estimates = estimates_after_body(request)

    async def confirm() -> counters.Verdict:
        return await counters.confirm(
            policy, early.admission_id, early.member, periods, at_ms=at_ms, estimates=estimates
        )

    verdict = await _with_history_cached(policy, now, periods, estimates, confirm)
    if verdict.admitted:
        request.key_reserved_micro = verdict.reserved_micro
        return None
    if verdict.verdict == "cold":  # flushed again at once: it keeps what it reserved
        return None
    request.key_admitted = False
    return None if verdict.verdict == "gone" else _refusal_of(verdict)


async def admit_before_body(policy: KeyPolicy) -> EarlyAdmission | Refusal | None:
    """Admit a request of ``policy``'s key from its headers alone (the requests and tokens
    windows, the concurrency, the budgets; the body and its model are not known yet, so the
    reservation is what the headers allow — ``estimate.estimates_before_body`` — until the
    dispatch raises it). The admission, or the refusal to answer before a byte of the body is
    read; None when it could not be decided here (the dispatch admits as usual)."""
    now = timezone.now()
    periods = periods_of(now)
    at_ms = int(now.timestamp() * 1000)
    admission_id = new_admission_id()
    estimates = estimates_before_body(policy)

    async def admit() -> counters.Verdict:
        return await counters.admit(policy, admission_id, periods, at_ms=at_ms, estimates=estimates)

    verdict = await _with_history_cached(policy, now, periods, estimates, admit)
    if verdict.admitted:
        return EarlyAdmission(
            policy,
            admission_id,
            verdict.reserved_micro,
            key_high_micro=verdict.key_high_micro,
            model_highs=dict(zip(estimates.models, verdict.model_highs, strict=False)),
        )
    if verdict.verdict == "cold":
        return None
    return _refusal_of(verdict)


async def withdraw_if_not_taken(early: EarlyAdmission) -> None:
    """Give ``early`` back unless a dispatch took it (never raises: a member that could not be
    removed lapses after the slot TTL, like a crashed worker's)."""
    if not early.withdraw():
        return
    try:
        await counters.withdraw(early.policy, early.admission_id, early.member)
    except Exception:
        logger.warning("key policy admission not given back; it lapses", exc_info=True)


async def refusal_on_arrival(
    policy: KeyPolicy | None, model: str, *, following: DispatchRequest | None
) -> Refusal | None:
    """For a client WebSocket frame that will wait for the socket's running request
    (``following``): would its key's policy admit it now? The allowed models (``model``
    alias-resolved), then a read-only look at the counters in which the running request's own
    in-flight entry does not count (the frame runs only after it). Writes nothing: the frame is
    admitted for real when it runs."""
    if policy is None:
        return None
    if not policy.allows_model(model):
        return Refusal(MODEL_NOT_ALLOWED)
    now = timezone.now()
    verdict = await counters.peek(
        policy,
        periods_of(now),
        at_ms=int(now.timestamp() * 1000),
        not_counting=in_flight_member(following) if following is not None else None,
    )
    if verdict.admitted or verdict.verdict == "cold":
        return None
    return _refusal_of(verdict)


def _refusal_of(verdict: counters.Verdict) -> Refusal:
    return Refusal(_REFUSALS[verdict.verdict], verdict.retry_after_seconds)


def in_flight_member(request: DispatchRequest) -> str | None:
    """``request``'s member of its key's in-flight ZSET, or None when it holds none."""
    if request.key_policy is None or not request.key_admitted:
        return None
    return early_admission.in_flight_member(request.admission_id, request.key_reserved_micro)


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
            # What in_flight_member(request) gives an admitted request with a policy.
            early_admission.in_flight_member(request.admission_id, request.key_reserved_micro),
            periods,
            model=request.model,
            tokens=tokens,
            cost_micro=cost,
        )
    )


async def await_pending_settlements() -> None:
    """Wait for the settlements scheduled so far (tests, graceful stop)."""
    await affinity.await_pending_writes()
