"""A key policy's counters in Redis, shared by every process (keys in ``proxy.redis_keys``).

* requests per minute — a **sliding** 60 s window: a ZSET of admission times; the retry-after
  is exact (when the oldest admission in the window turns 60 s old);
* tokens per minute — a **fixed** 60 s window aligned to the minute (epoch): the tokens of
  the requests that finished in it (their usage); the retry-after is the window's end;
* concurrency — a ZSET of the requests in flight, scored by start (heartbeated while they
  run, ``proxy.dispatch.keep_alive``), members older than the slot TTL (a crashed worker's)
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
  the key's high-water in its budget window (``cost_high``) and the model's in the pool
  (``model_cost``), seeded from ``usage_records`` when missing (``cost_history``) and raised,
  never lowered, by settlements; the model's is also recomputed every 5 minutes (its 7-day
  window slides), by the one admission that claims the refresh.

Admission is **one** Lua call (checks first, then the writes, so a refusal changes nothing but
the removal of a crashed worker's stale members; a ``cold`` answer may claim the model's
refresh); settlement is one more, after the response.
After a FLUSHALL every counter starts from zero and the spend is recomputed from PostgreSQL:
nothing breaks, nothing goes negative, no reservation is left behind.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from redis.commands.core import AsyncScript

from proxy import redis_keys
from proxy.loop_resources import async_redis
from proxy.policies.rules import WINDOW_SECONDS, KeyPolicy, tokens_window_start
from proxy.runtime_state.script_calls import ScriptCall

logger = logging.getLogger(__name__)

WINDOW_MS = WINDOW_SECONDS * 1000
TOKENS_KEY_TTL_SECONDS = 2 * WINDOW_SECONDS
SPEND_TTL_SECONDS = 60
CONCURRENCY_RETRY_AFTER_MS = 1000
NO_LIMIT = -1
# The model's high-water in the pool is computed again from the usage rows this often (its 7-day
# window slides; keys without a policy do not settle here), and raised by settlements meanwhile.
# One admission claims each refresh (the others keep reserving the copy), so a busy pool runs
# the 7-day query once per period, not once per request that finds it due.
MODEL_COST_REFRESH_SECONDS = 300
# The copy itself lives longer: it is dropped only by a pool idle that long, or a FLUSHALL.
MODEL_COST_TTL_SECONDS = 24 * 3600
# No one request reserves more than $10,000 (keeps the member's number an exact integer).
MAX_RESERVATION_MICRO = 10_000 * 1_000_000

# KEYS: requests, tokens (current window), in flight, spend day, spend month, the key's cost
#       high-water (its budget window), the model's cost high-water in the pool, its refresh
#       claim
# ARGV: now_ms, window_ms, rpm, tpm, concurrency, day budget, month budget (-1 = none),
#       admission id, slot ttl ms, tokens window end ms, next day ms, next month ms,
#       the body's estimate, the default estimate (the model's prior when the pool has no
#       history of it), micro-USD, the model's refresh period ms
# Returns {verdict, retry_after_ms (cold: what is missing, MISSING_* bits), reserved micro-USD};
# verdict: ok | cold | day_budget | month_budget | day_reserved | month_reserved | requests |
# tokens | concurrency.
_ADMIT = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local rpm, tpm, concurrency = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local day_budget, month_budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local slot_ttl = tonumber(ARGV[9])
-- A crashed worker's requests (no heartbeat for a slot TTL) hold no slot and no reservation.
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - slot_ttl)
local estimate = 0
if day_budget >= 0 or month_budget >= 0 then
  local day = redis.call('GET', KEYS[4])
  local month = redis.call('GET', KEYS[5])
  local key_high = redis.call('GET', KEYS[6])
  local model_high = redis.call('GET', KEYS[7])
  local missing = 0
  if (day_budget >= 0 and not day) or (month_budget >= 0 and not month) then missing = 1 end
  if not key_high then missing = missing + 2 end
  if not model_high then
    missing = missing + 4
  elseif redis.call('SET', KEYS[8], '1', 'NX', 'PX', tonumber(ARGV[15])) then
    missing = missing + 8  -- due for its refresh, and this admission is the one to do it
  end
  if missing > 0 then return {'cold', missing, 0} end
  day, month = tonumber(day or '0'), tonumber(month or '0')
  if day_budget >= 0 and day >= day_budget then
    return {'day_budget', tonumber(ARGV[11]) - now, 0}
  end
  if month_budget >= 0 and month >= month_budget then
    return {'month_budget', tonumber(ARGV[12]) - now, 0}
  end
  local reserved = 0
  for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    reserved = reserved + (tonumber(string.match(member, ':(%d+)$')) or 0)
  end
  if day_budget >= 0 and day + reserved >= day_budget then
    return {'day_reserved', 1000, 0}
  end
  if month_budget >= 0 and month + reserved >= month_budget then
    return {'month_reserved', 1000, 0}
  end
  local prior = tonumber(model_high)
  if prior <= 0 then prior = tonumber(ARGV[14]) end  -- no history of the model in the pool
  estimate = math.max(tonumber(ARGV[13]), tonumber(key_high), prior)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if rpm >= 0 and redis.call('ZCARD', KEYS[1]) >= rpm then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {'requests', tonumber(oldest[2]) + window - now, 0}
end
if tpm >= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= tpm then
  return {'tokens', tonumber(ARGV[10]) - now, 0}
end
if concurrency >= 0 and redis.call('ZCARD', KEYS[3]) >= concurrency then
  return {'concurrency', 1000, 0}
end
redis.call('ZADD', KEYS[1], now, ARGV[8])
redis.call('PEXPIRE', KEYS[1], window)
redis.call('ZADD', KEYS[3], now, ARGV[8] .. ':' .. string.format('%d', estimate))
redis.call('PEXPIRE', KEYS[3], slot_ttl)
return {'ok', 0, estimate}
"""

# KEYS: in flight, tokens (window of the end), spend day, spend month, the key's cost
#       high-water, the model's cost high-water in the pool
# ARGV: in-flight member, tokens, cost micro-USD, tokens key ttl s, 1 when the key has a budget
# The high-waters are raised to a dearer cost, never lowered, and only where they exist (a
# missing one is seeded from the usage rows, which hold this request's row by then).
_SETTLE = """
redis.call('ZREM', KEYS[1], ARGV[1])
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  redis.call('INCRBY', KEYS[2], tokens)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
end
local cost = tonumber(ARGV[3])
if cost > 0 then
  for i = 3, 4 do
    if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('INCRBY', KEYS[i], cost) end
  end
  local first = 6
  if ARGV[5] == '1' then first = 5 end
  for i = first, 6 do
    local high = redis.call('GET', KEYS[i])
    if high and cost > tonumber(high) then
      redis.call('SET', KEYS[i], string.format('%d', cost), 'KEEPTTL')
    end
  end
end
return 1
"""

_SCRIPTS = {
    "admit": AsyncScript(None, _ADMIT.encode()),
    "settle": AsyncScript(None, _SETTLE.encode()),
}


def _limit(value: int | None) -> int:
    return NO_LIMIT if value is None else value


def now_ms() -> int:
    return int(time.time() * 1000)


def slot_ttl_ms() -> int:
    return settings.SCHEDULER_SLOT_TTL_SECONDS * 1000


def in_flight_member(admission_id: str, reserved_micro: int) -> str:
    """A request's member of the in-flight ZSET: its admission id and the micro-USD it
    reserved of the key's budget (0 without one), so the reservation goes wherever the
    member goes."""
    return f"{admission_id}:{reserved_micro}"


# What a ``cold`` admission found missing (bits of its second value).
MISSING_SPEND = 1
MISSING_KEY_HIGH = 2
MISSING_MODEL_HIGH = 4
STALE_MODEL_HIGH = 8  # present, but due for its refresh (this admission claimed it)


@dataclass(frozen=True)
class Verdict:
    """What the admission said: ``verdict`` (``ok`` when admitted) and, for a refusal, the
    seconds after which the same request would pass (rounded up, at least 1); admitted, the
    micro-USD it reserved of the key's budget; ``cold``, what is missing (``MISSING_*``)."""

    verdict: str
    retry_after_seconds: int = 0
    reserved_micro: int = 0
    missing: int = 0

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
    """A request's own parts of its reservation (``estimate``), in micro-USD: its body's input
    and the default that stands for a model the pool has no history of."""

    model: str
    body_micro: int = 0
    default_micro: int = 0


async def admit(
    policy: KeyPolicy,
    admission_id: str,
    periods: Periods,
    *,
    at_ms: int,
    estimates: Estimates,
) -> Verdict:
    """One Lua call: the budgets (the spend, then the spend with the reservations of the
    requests in flight), the sliding requests window, the tokens window and the concurrency
    are checked; when all pass the request is counted and holds an in-flight slot
    (``admission_id``) reserving the largest of its body's estimate, the key's cost high-water
    and the model's (or, without history, the default estimate). Verdict ``cold`` = with a
    budget, a spend or a high-water is not cached: nothing was written."""
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
        redis_keys.key_policy_model_cost(estimates.model),
        redis_keys.key_policy_model_cost_refresh(estimates.model),
    ]
    args = [
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
        _reservation(estimates.body_micro),
        _reservation(estimates.default_micro),
        MODEL_COST_REFRESH_SECONDS * 1000,
    ]
    redis = await async_redis.get()
    verdict, second, reserved = await _SCRIPTS["admit"](keys=keys, args=args, client=redis)
    verdict = verdict.decode() if isinstance(verdict, bytes) else str(verdict)
    if verdict == "cold":
        return Verdict(verdict, missing=int(second))
    seconds = max(1, math.ceil(int(second) / 1000)) if verdict != "ok" else 0
    return Verdict(verdict, seconds, int(reserved))


@dataclass(frozen=True)
class Seed:
    """What a cold admission computed from ``usage_records`` (micro-USD); None = not computed
    (it was not missing). ``model_high_refreshed``: the model's copy was there but due, and is
    replaced (its 7-day window moved on: it may go down)."""

    day_micro: int | None = None
    month_micro: int | None = None
    key_high_micro: int | None = None
    model_high_micro: int | None = None
    model_high_refreshed: bool = False


async def seed(policy: KeyPolicy, periods: Periods, model: str, values: Seed) -> None:
    """Cache what was computed from PostgreSQL, each with SET NX (a value another process
    seeded, and the settlements since, win) — but a refresh of the model's, which replaces
    it: the spend for 60 s, the key's high-water until its window ends, the model's for
    ``MODEL_COST_TTL_SECONDS``, due again in ``MODEL_COST_REFRESH_SECONDS``. One round
    trip."""
    key_id = policy.key_id
    redis = await async_redis.get()
    async with redis.pipeline(transaction=False) as pipeline:
        if values.day_micro is not None:
            pipeline.set(
                redis_keys.key_policy_spend(key_id, f"day:{periods.day}"),
                values.day_micro,
                nx=True,
                ex=SPEND_TTL_SECONDS,
            )
        if values.month_micro is not None:
            pipeline.set(
                redis_keys.key_policy_spend(key_id, f"month:{periods.month}"),
                values.month_micro,
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
        if values.model_high_micro is not None:
            pipeline.set(
                redis_keys.key_policy_model_cost(model),
                values.model_high_micro,
                nx=not values.model_high_refreshed,
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
        redis_keys.key_policy_tokens(key_id, tokens_window_start(now_ms())),
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
