"""Account state transitions of the request path (spec §3.1–§3.6): each one conditional
UPDATE in PostgreSQL; the Cloudflare counters in Redis with a one-hour TTL so they hold across
processes. PostgreSQL is the one source of truth for account state (spec §3.7; the original's
in-process copy drifted, pitfall §11.6).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from proxy import redis_keys
from proxy.accounts import (
    QUOTA_LIMITED,
    TOKEN_EXPIRED,
    AccountView,
    ineligibility,
    next_window_reset,
    restarted_window_columns,
)
from proxy.loop_resources import async_redis, database_connection

CLOUDFLARE_CHALLENGE_COOLDOWNS = (10, 30, 90, 120)
CLOUDFLARE_COUNTER_TTL_SECONDS = 3600
PATH_BLOCKS_BEFORE_DISABLING = 3
DEFAULT_RATE_LIMIT_COOLDOWN_SECONDS = 60


async def accounts_apply_time_transitions(
    accounts: list[AccountView], *, now: datetime
) -> list[AccountView]:
    """Apply the time-driven transitions of spec §3.2 and return the accounts that may serve.

    Writes happen only when a state really changes: an active account whose token expired
    becomes ``expired``; a passed usage window is rolled forward; a quota limit whose cooldown
    passed, or whose window just rolled, is lifted (the account then needs a usage check
    first: ``quota_verify_required``).
    """
    eligible = []
    for account in accounts:
        rolled = False
        if account.window_reset_at is not None and account.window_reset_at <= now:
            await account_usage_roll_window(account, now=now)
            rolled = True
        reason = ineligibility(account, now=now)
        if reason == QUOTA_LIMITED and not rolled:
            continue
        if account.quota_limit_reached:  # its cooldown has passed, or its window rolled
            await account_lift_quota_limit(account, now=now, window_rolled=rolled)
            reason = ineligibility(account, now=now)
        if reason == TOKEN_EXPIRED:
            await account_mark_expired(account.id, token=account.access_token, now=now)
        if reason is None:
            eligible.append(account)
    return eligible


async def _execute(sql: str, parameters: list | dict) -> int:
    async with database_connection() as connection:
        cursor = await connection.execute(sql, parameters)
        return cursor.rowcount


async def account_lift_quota_limit(
    account: AccountView, *, now: datetime, window_rolled: bool = False
) -> None:
    """Clear a reached quota limit whose cooldown has passed or whose usage window just rolled
    (spec §3.2); the account must then pass a usage check before it serves."""
    changed = await _execute(
        "update accounts set quota_limit_reached = false, quota_cooldown_until = null,"
        " quota_verify_required = true,"
        " status = case when status = 'quota_exhausted' then 'active' else status end,"
        " updated_at = %s"
        " where id = %s and quota_limit_reached and (quota_cooldown_until <= %s or %s)",
        [now, account.id, now, window_rolled],
    )
    if changed:
        account.quota_limit_reached = False
        account.quota_cooldown_until = None
        account.quota_verify_required = True
        if account.status == "quota_exhausted":
            account.status = "active"


_ROLL_WINDOW_SQL = (
    "update account_usage set "  # noqa: S608 - built from constant column names
    + restarted_window_columns()
    + ", window_reset_at = %s where account_id = %s and window_reset_at <= %s"
)


async def account_usage_roll_window(account: AccountView, *, now: datetime) -> None:
    """Zero the window counters and move ``window_reset_at`` forward by whole windows."""
    next_reset = next_window_reset(account, now=now)
    await _execute(_ROLL_WINDOW_SQL, [next_reset, account.id, now])
    account.window_request_count = 0
    account.window_tokens = 0
    account.window_cached_tokens = 0
    account.window_reset_at = next_reset


async def account_mark_expired(
    account_id: str, *, token: str, now: datetime, schedule_refresh: bool = True
) -> None:
    """401 or a token past its expiry: the account waits for a token refresh.

    Only while it still holds ``token`` (the one that failed): a token refreshed meanwhile
    deserves its own chance (the original's pitfall §11.6). An account with a refresh token is
    due for one at once (the refresh scan picks it up and, on success, puts it back into
    service) unless ``schedule_refresh`` is False; one without stays expired.
    """
    await _execute(
        "update accounts set status = 'expired', updated_at = %s,"
        " next_refresh_at = case when refresh_token is not null and %s then %s end"
        " where id = %s and status in ('active', 'quota_exhausted') and access_token = %s",
        [now, schedule_refresh, now, account_id, token],
    )


async def account_mark_banned(account_id: str, *, token: str, now: datetime) -> None:
    """The upstream refused the account itself; only while it still holds ``token``."""
    await _execute(
        "update accounts set status = 'banned', updated_at = %s"
        " where id = %s and status <> 'banned' and access_token = %s",
        [now, account_id, token],
    )


# One statement: the account's cooldown and its usage window move together.
_RATE_LIMITED_SQL = """
with limited as (
  update accounts set quota_limit_reached = true,
    quota_cooldown_until = greatest(coalesce(quota_cooldown_until, %(cooldown)s), %(cooldown)s),
    status = case when status in ('active', 'quota_exhausted') then 'quota_exhausted'
                  else status end,
    updated_at = %(now)s
  where id = %(account)s
  returning id
)
update account_usage
set window_reset_at = greatest(coalesce(window_reset_at, %(cooldown)s), %(cooldown)s)
where account_id in (select id from limited)
"""


async def account_mark_rate_limited(
    account_id: str, *, now: datetime, retry_after_seconds: float | None
) -> datetime:
    """429: quota exhausted until the upstream's Retry-After (60 s when it gave none).

    An existing later cooldown is never shortened, and the usage window reset is moved to at
    least the cooldown. Disabled or banned accounts keep their status (spec §3.1).
    """
    seconds = (
        DEFAULT_RATE_LIMIT_COOLDOWN_SECONDS if retry_after_seconds is None else retry_after_seconds
    )
    cooldown = now + timedelta(seconds=seconds)
    await _execute(_RATE_LIMITED_SQL, {"cooldown": cooldown, "now": now, "account": account_id})
    return cooldown


async def account_mark_quota_exhausted(account_id: str, *, now: datetime) -> None:
    """402 (or an SSE quota failure): exhausted until the quota refresh says otherwise."""
    await _execute(
        "update accounts set status = 'quota_exhausted', updated_at = %s"
        " where id = %s and status in ('active', 'quota_exhausted')",
        [now, account_id],
    )


async def _count_in_last_hour(key: str) -> int:
    """INCR a Cloudflare counter and (re)start its one-hour expiry; returns the new count.

    A success releases its slot with both counters deleted (the scheduler's release script).
    """
    redis = await async_redis.get()
    async with redis.pipeline(transaction=True) as pipeline:
        pipeline.incr(key)
        pipeline.expire(key, CLOUDFLARE_COUNTER_TTL_SECONDS)
        count, _ = await pipeline.execute()
    return count


async def account_register_cloudflare_challenge(account_id: str, *, now: datetime) -> datetime:
    """A Cloudflare challenge page: cool the account down 10, 30, 90, then 120 s.

    The counter lives in Redis and resets after an hour without challenges. The account's
    cookies expire no later than the cooldown (a fresh clearance is needed after it).
    """
    count = await _count_in_last_hour(redis_keys.cloudflare_challenges(account_id))
    seconds = CLOUDFLARE_CHALLENGE_COOLDOWNS[min(count, len(CLOUDFLARE_CHALLENGE_COOLDOWNS)) - 1]
    cooldown = now + timedelta(seconds=seconds)
    await _execute(
        "update accounts set cloudflare_cooldown_until = %s, updated_at = %s where id = %s",
        [cooldown, now, account_id],
    )
    await _execute(
        "update account_cookies set expires_at = least(coalesce(expires_at, %s), %s),"
        " updated_at = %s where account_id = %s",
        [cooldown, cooldown, now, account_id],
    )
    return cooldown


async def account_register_cloudflare_path_block(account_id: str, *, now: datetime) -> bool:
    """An empty 404 (path blocked): wipe the cookies; the 3rd within an hour disables the
    account. Returns whether it was disabled."""
    count = await _count_in_last_hour(redis_keys.cloudflare_path_blocks(account_id))
    await _execute("delete from account_cookies where account_id = %s", [account_id])
    if count >= PATH_BLOCKS_BEFORE_DISABLING:
        await _execute(
            "update accounts set status = 'disabled', updated_at = %s"
            " where id = %s and status <> 'banned'",
            [now, account_id],
        )
        return True
    return False
