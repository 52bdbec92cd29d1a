"""A key policy's counters in Redis, shared by every process (keys in ``proxy.redis_keys``).

* requests per minute — a **sliding** 60 s window: a ZSET of admission times; the retry-after
  is exact (when the oldest admission in the window turns 60 s old);
* tokens per minute — a **fixed** 60 s window aligned to the minute (epoch): the tokens of
  the requests that finished in it (their usage); the retry-after is the window's end;
* concurrency — a ZSET of the requests in flight, scored by start (heartbeated while they
  run, ``proxy.scheduling.keep_alive``), members older than the slot TTL (a crashed worker's)
  dropped on admission; a request refused for it is told to retry after 1 s (no one knows
  when a request ends);
* spend today / this month (UTC) — micro-USD counters cached for 60 s: when missing the
  admission says so and the caller computes them from ``usage_records`` (``spend``) and
  seeds them (SET NX), then every settled request adds its cost;
* budget reservations — with a budget, each admitted request reserves an estimate of its
  cost (``estimate``), written into its in-flight member (``<admission id>:<micro USD>``):
  the reservation lives and dies with the in-flight entry (settled with it, dropped with it
  after the slot TTL when its worker crashed, gone with it after a FLUSHALL). A request is
  admitted while the spend plus the reservations of the requests in flight is under the
  budget, so requests admitted side by side cannot all pass a budget that has room for one;
  each is settled to its real cost at the end. The estimate's history is kept beside them:
  the key's high-water in its budget window (``cost_high``) and each model's in the pool
  (``model_cost``), seeded from ``usage_records`` when missing (``cost_history``) and raised,
  never lowered, by settlements; a model's is also recomputed every 5 minutes (its 7-day
  window slides), by the one admission that claims the refresh.

Admission is **one** Lua call (``counter_scripts``: checks first, then the writes, so a
refusal changes nothing but the removal of a crashed worker's stale members; a ``cold`` answer
may claim a model's refresh); settlement is one more, after the response. The same script also
answers, without writing, whether a request would be admitted (``peek``: a client WebSocket
frame that waits behind the socket's running request), and raises the reservation of a request
admitted before its body was read once its body and model are known (``confirm``: issue 35
item 4, ``proxy.domain.early_admission``); ``withdraw`` undoes an admission no dispatch took over.
After a FLUSHALL every counter starts from zero and the spend is recomputed from PostgreSQL:
nothing breaks, nothing goes negative, no reservation is left behind.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from redis.commands.core import AsyncScript

from common import clock
from proxy import redis_keys
from proxy.domain.key_policy import WINDOW_SECONDS, KeyPolicy, tokens_window_start
from proxy.loop_resources import async_redis
from proxy.policies.counter_scripts import ADMIT_LUA, SETTLE_LUA
from proxy.runtime_state.script_calls import ScriptCall

logger = logging.getLogger(__name__)

WINDOW_MS = WINDOW_SECONDS * 1000
TOKENS_KEY_TTL_SECONDS = 2 * WINDOW_SECONDS
SPEND_TTL_SECONDS = 60
CONCURRENCY_RETRY_AFTER_MS = 1000
NO_LIMIT = -1
# A model's high-water in the pool is computed again from the usage rows this often (its 7-day
# window slides; keys without a policy do not settle here), and raised by settlements meanwhile.
# One admission claims each refresh (the others keep reserving the copy), so a busy pool runs
# the 7-day query once per period, not once per request that finds it due.
MODEL_COST_REFRESH_SECONDS = 300
# The copy itself lives longer: it is dropped only by a pool idle that long, or a FLUSHALL.
MODEL_COST_TTL_SECONDS = 24 * 3600
# No one request reserves more than $10,000 (keeps the member's number an exact integer).
MAX_RESERVATION_MICRO = 10_000 * 1_000_000

# No client of their own: each call passes one (redis-py's stubs want one here all the same).
_SCRIPTS = {
    "admit": AsyncScript(None, ADMIT_LUA.encode()),  # type: ignore[arg-type]
    "settle": AsyncScript(None, SETTLE_LUA.encode()),  # type: ignore[arg-type]
}


def _limit(value: int | None) -> int:
    return NO_LIMIT if value is None else value


def slot_ttl_ms() -> int:
    return settings.SCHEDULER_SLOT_TTL_SECONDS * 1000


# What a ``cold`` admission found missing (bits of ``Verdict.missing``).
MISSING_SPEND = 1
MISSING_KEY_HIGH = 2
MISSING_MODEL_HIGH = 4
STALE_MODEL_HIGH = 8  # present, but due for its refresh (this admission claimed it)
# A candidate model's high-water in ``Verdict.model_highs`` of a ``cold`` admission.
HIGH_MISSING = -1
HIGH_DUE = -2


@dataclass(frozen=True)
class Verdict:
    """What the admission said: ``verdict`` (``ok`` when admitted) and, for a refusal, the
    seconds after which the same request would pass (rounded up, at least 1). Admitted (or
    ``cold``), with a budget: the micro-USD it reserved, and the high-waters it read — the
    key's and each candidate model's (``model_highs``, in ``Estimates.models`` order; 0 = the
    pool has no history of it; cold: ``HIGH_MISSING`` / ``HIGH_DUE``); ``cold``, what is
    missing (``MISSING_*``)."""

    verdict: str
    retry_after_seconds: int = 0
    reserved_micro: int = 0
    missing: int = 0
    key_high_micro: int = 0
    model_highs: tuple[int, ...] = ()

    @property
    def admitted(self) -> bool:
        return self.verdict == "ok"


@dataclass(frozen=True)
class Periods:
    """The spend periods of one moment (UTC) and their ends, in epoch ms."""

    day: str
    month: str
    next_day_ms: int
    next_month_ms: int


def high_water_period(policy: KeyPolicy, periods: Periods) -> tuple[str, int]:
    """The key's budget window its cost high-water is kept for — the day with a daily budget,
    else the month — and that window's end (epoch ms)."""
    if policy.daily_budget_micro is not None:
        return f"day:{periods.day}", periods.next_day_ms
    return f"month:{periods.month}", periods.next_month_ms


def _reservation(micro: int) -> int:
    return max(0, min(micro, MAX_RESERVATION_MICRO))


@dataclass(frozen=True)
class Estimates:
    """What a request brings to its reservation (``estimate``), in micro-USD: its own part (the
    body's input; 0 before the body is read) and the candidate models whose prior counts —
    the request's model once its body is known, the key's allowed models before — each with
    the default that stands for it when the pool has no history of it."""

    own_micro: int = 0
    models: tuple[str, ...] = ()
    defaults_micro: tuple[int, ...] = ()


NO_ESTIMATES = Estimates()  # a key without a budget, or a look that reserves nothing


async def admit(
    policy: KeyPolicy,
    admission_id: str,
    periods: Periods,
    *,
    at_ms: int,
    estimates: Estimates = NO_ESTIMATES,
) -> Verdict:
    """One Lua call: the budgets (the spend, then the spend with the reservations of the
    requests in flight), the sliding requests window, the tokens window and the concurrency
    are checked; when all pass the request is counted and holds an in-flight slot
    (``admission_id``) reserving the largest of its own estimate, the key's cost high-water
    and the candidate models' priors. Verdict ``cold`` = with a budget, a spend or a
    high-water is not cached (or a model's is due): nothing was written."""
    return await _run_admission("admit", policy, admission_id, periods, at_ms, estimates)


async def peek(
    policy: KeyPolicy, periods: Periods, *, at_ms: int, not_counting: str | None = None
) -> Verdict:
    """Would a request be admitted now? The admission's checks in one Lua call that writes
    nothing; the in-flight member ``not_counting`` (the running request the asking one will
    follow) is left out of the concurrency and the reservations. A spend that is not cached
    passes (the admission itself computes it)."""
    return await _run_admission(
        "peek", policy, "", periods, at_ms, NO_ESTIMATES, own=not_counting or ""
    )


async def confirm(
    policy: KeyPolicy,
    admission_id: str,
    member: str,
    periods: Periods,
    *,
    at_ms: int,
    estimates: Estimates,
) -> Verdict:
    """For a request admitted before its body was read (in-flight ``member``): refresh the
    member and, with a budget, raise its reservation to the estimate now that its body and
    model are known (``estimates``) when that is larger, after checking the budgets again. One
    Lua call. Refused, the admission is undone (it counts for nothing); ``gone``: the member
    had lapsed (older than the slot TTL) and the request is admitted by no one; ``cold``: a
    spend or a high-water is not cached (or the model's is due)."""
    return await _run_admission(
        "confirm", policy, admission_id, periods, at_ms, estimates, own=member
    )


async def withdraw(policy: KeyPolicy, admission_id: str, member: str) -> None:
    """Undo an admission that no dispatch took over (its request ended before: a 400, a 404,
    the client gone while sending the body): its in-flight member and its entry in the
    requests window go, so it counts for nothing. One round trip."""
    redis = await async_redis.get()
    async with redis.pipeline(transaction=False) as pipeline:
        pipeline.zrem(redis_keys.key_policy_in_flight(policy.key_id), member)
        pipeline.zrem(redis_keys.key_policy_requests(policy.key_id), admission_id)
        await pipeline.execute()


async def _run_admission(
    mode: str,
    policy: KeyPolicy,
    admission_id: str,
    periods: Periods,
    at_ms: int,
    estimates: Estimates,
    *,
    own: str = "",
) -> Verdict:
    key_id = policy.key_id
    window_start = tokens_window_start(at_ms)
    period, _ = high_water_period(policy, periods)
    keys = [
        redis_keys.key_policy_requests(key_id),
        redis_keys.key_policy_tokens(key_id, window_start),
        redis_keys.key_policy_in_flight(key_id),
        redis_keys.key_policy_spend(key_id, f"day:{periods.day}"),
        redis_keys.key_policy_spend(key_id, f"month:{periods.month}"),
        redis_keys.key_policy_cost_high(key_id, period),
    ]
    args: list[Any] = [
        at_ms,
        WINDOW_MS,
        _limit(policy.requests_per_minute),
        _limit(policy.tokens_per_minute),
        _limit(policy.max_concurrent_requests),
        _limit(policy.daily_budget_micro),
        _limit(policy.monthly_budget_micro),
        admission_id,
        slot_ttl_ms(),
        (window_start + WINDOW_SECONDS) * 1000,
        periods.next_day_ms,
        periods.next_month_ms,
        _reservation(estimates.own_micro),
        mode,
        own,
        MODEL_COST_REFRESH_SECONDS * 1000,
    ]
    for model, default in zip(estimates.models, estimates.defaults_micro, strict=True):
        keys.append(redis_keys.key_policy_model_cost(model))
        keys.append(redis_keys.key_policy_model_cost_refresh(model))
        args.append(_reservation(default))
    redis = await async_redis.get()
    verdict, second, reserved, key_high, highs = await _SCRIPTS["admit"](
        keys=keys, args=args, client=redis
    )
    verdict = verdict.decode() if isinstance(verdict, bytes) else str(verdict)
    read: dict[str, Any] = {
        "key_high_micro": int(key_high),
        "model_highs": tuple(int(h) for h in highs),
    }
    if verdict == "cold":
        return Verdict(verdict, missing=int(second), **read)
    refused = verdict not in ("ok", "gone")
    seconds = max(1, math.ceil(int(second) / 1000)) if refused else 0
    return Verdict(verdict, seconds, int(reserved), **read)


@dataclass(frozen=True)
class Seed:
    """What a cold admission computed from ``usage_records`` (micro-USD); None = not computed
    (it was not missing). ``model_highs``: the candidate models' high-waters computed;
    ``refreshed_models``: those whose copy was there but due, and is replaced (its 7-day
    window moved on: it may go down)."""

    day_micro: int | None = None
    month_micro: int | None = None
    key_high_micro: int | None = None
    model_highs: dict[str, int] = field(default_factory=dict)
    refreshed_models: frozenset[str] = frozenset()


async def seed(policy: KeyPolicy, periods: Periods, values: Seed) -> None:
    """Cache what was computed from PostgreSQL, each with SET NX (a value another process
    seeded, and the settlements since, win) — but a refresh of a model's, which replaces it:
    the spend for 60 s, the key's high-water until its window ends, a model's for
    ``MODEL_COST_TTL_SECONDS``, due again in ``MODEL_COST_REFRESH_SECONDS``. One round
    trip."""
    key_id = policy.key_id
    redis = await async_redis.get()
    async with redis.pipeline(transaction=False) as pipeline:
        for label, micro in (
            (f"day:{periods.day}", values.day_micro),
            (f"month:{periods.month}", values.month_micro),
        ):
            if micro is not None:
                pipeline.set(
                    redis_keys.key_policy_spend(key_id, label),
                    micro,
                    nx=True,
                    ex=SPEND_TTL_SECONDS,
                )
        if values.key_high_micro is not None:
            period, ends_ms = high_water_period(policy, periods)
            pipeline.set(
                redis_keys.key_policy_cost_high(key_id, period),
                values.key_high_micro,
                nx=True,
                pxat=ends_ms,
            )
        for model, micro in values.model_highs.items():
            pipeline.set(
                redis_keys.key_policy_model_cost(model),
                micro,
                nx=model not in values.refreshed_models,
                ex=MODEL_COST_TTL_SECONDS,
            )
            # A first seed is fresh for a period too (a refresh's claim is already there).
            pipeline.set(
                redis_keys.key_policy_model_cost_refresh(model),
                1,
                nx=True,
                ex=MODEL_COST_REFRESH_SECONDS,
            )
        await pipeline.execute()


def settle_call(
    policy: KeyPolicy,
    member: str,
    periods: Periods,
    *,
    model: str,
    tokens: int,
    cost_micro: int,
) -> ScriptCall:
    """The call that settles an ended request: its in-flight ``member`` (slot and reservation)
    is freed, its tokens count in the current window, its real cost is added to the cached
    spend and raises the model's high-water (and, with a budget, the key's) where it is
    dearer (a failure leaves the member to its TTL)."""
    key_id = policy.key_id
    period, _ = high_water_period(policy, periods)
    keys = [
        redis_keys.key_policy_in_flight(key_id),
        redis_keys.key_policy_tokens(key_id, tokens_window_start(clock.now_ms())),
        redis_keys.key_policy_spend(key_id, f"day:{periods.day}"),
        redis_keys.key_policy_spend(key_id, f"month:{periods.month}"),
        redis_keys.key_policy_cost_high(key_id, period),
        redis_keys.key_policy_model_cost(model),
    ]
    args = [
        member,
        max(0, tokens),
        max(0, cost_micro),
        TOKENS_KEY_TTL_SECONDS,
        1 if policy.has_budget else 0,
    ]
    return ScriptCall(_SCRIPTS["settle"], keys, args, what="key policy settlement")


def queue_heartbeat(pipeline, policy: KeyPolicy, member: str, *, at_ms: int) -> None:
    """Add to ``pipeline`` the commands that keep a running request's in-flight ``member``
    alive: its score (the last sign of life) and the ZSET's TTL move on. ZADD XX: a member
    already settled is not brought back."""
    key = redis_keys.key_policy_in_flight(policy.key_id)
    pipeline.zadd(key, {member: at_ms}, xx=True)
    pipeline.pexpire(key, slot_ttl_ms())


@dataclass(frozen=True)
class LiveUsage:
    """A key's counters as they stand (for the consoles); spend None = not cached now."""

    requests_last_minute: int
    tokens_this_minute: int
    in_flight: int
    day_spend_micro: int | None
    month_spend_micro: int | None


def live_usage(redis, key_id: str, periods: Periods, *, at_ms: int) -> LiveUsage:
    """Read the counters with the synchronous client ``redis`` (one pipeline, no writes)."""
    pipeline = redis.pipeline(transaction=False)
    pipeline.zcount(redis_keys.key_policy_requests(key_id), f"({at_ms - WINDOW_MS}", "+inf")
    pipeline.get(redis_keys.key_policy_tokens(key_id, tokens_window_start(at_ms)))
    pipeline.zcount(redis_keys.key_policy_in_flight(key_id), f"({at_ms - slot_ttl_ms()}", "+inf")
    pipeline.get(redis_keys.key_policy_spend(key_id, f"day:{periods.day}"))
    pipeline.get(redis_keys.key_policy_spend(key_id, f"month:{periods.month}"))
    requests, tokens, in_flight, day, month = pipeline.execute()
    return LiveUsage(
        requests_last_minute=int(requests),
        tokens_this_minute=int(tokens or 0),
        in_flight=int(in_flight),
        day_spend_micro=None if day is None else int(day),
        month_spend_micro=None if month is None else int(month),
    )
