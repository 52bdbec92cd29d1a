"""The account pool as the request path sees it: one query, eligibility, state transitions.

PostgreSQL is the one source of truth for account state (spec §3.7; the original's in-process
copy drifted, pitfall §11.6): candidates are read from it per request and every transition is a
single conditional UPDATE there. Cloudflare counters live in Redis with a one-hour TTL so they
hold across processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from proxy import redis_keys
from proxy.loop_resources import async_redis, database_connection
from proxy.models import ACCOUNT_USAGE_COUNTERS
from proxy.token_claims import token_expiry

CLOUDFLARE_CHALLENGE_COOLDOWNS = (10, 30, 90, 120)
CLOUDFLARE_COUNTER_TTL_SECONDS = 3600
PATH_BLOCKS_BEFORE_DISABLING = 3
DEFAULT_RATE_LIMIT_COOLDOWN_SECONDS = 60


@dataclass
class AccountView:
    """One row of ``accounts`` joined with its ``account_usage`` counters."""

    id: str
    email: str | None
    chatgpt_account_id: str | None
    plan_type: str | None
    access_token: str
    access_token_expires_at: datetime | None
    status: str
    quota_limit_reached: bool
    quota_verify_required: bool
    quota_cooldown_until: datetime | None
    cloudflare_cooldown_until: datetime | None
    added_at: datetime
    request_count: int
    window_request_count: int
    window_tokens: int
    window_cached_tokens: int
    window_reset_at: datetime | None
    limit_window_seconds: int | None
    last_used_at: datetime | None
    cookies: list[dict]
    # Whether a 401 may be answered by a token refresh (the token itself stays in PostgreSQL).
    has_refresh_token: bool = False


# The same rows as one JSON value, so that the client-key lookup can bring the candidates along
# in its single round trip (the request path's only PostgreSQL read before the first byte).
CANDIDATES_JSON_SQL = """
(select coalesce(json_agg(row_to_json(candidate) order by candidate.added_at, candidate.id),
                 '[]'::json)
 from (
   select a.id, a.email, a.chatgpt_account_id, a.plan_type, a.access_token,
          a.access_token_expires_at, a.status, a.quota_limit_reached, a.quota_verify_required,
          a.quota_cooldown_until, a.cloudflare_cooldown_until, a.added_at,
          coalesce(u.request_count, 0) as request_count,
          coalesce(u.window_request_count, 0) as window_request_count,
          coalesce(u.window_input_tokens + u.window_output_tokens
                   + u.window_image_input_tokens + u.window_image_output_tokens, 0)
            as window_tokens,
          coalesce(u.window_cached_tokens, 0) as window_cached_tokens,
          u.window_reset_at, u.limit_window_seconds, u.last_used_at,
          cookies.items as cookies, a.refresh_token is not null as has_refresh_token
   from accounts a
   left join account_usage u on u.account_id = a.id
   left join lateral (
     select coalesce(json_agg(json_build_object(
              'domain', c.domain, 'name', c.name, 'value', c.value, 'path', c.path,
              'expires_at', c.expires_at)), '[]'::json) as items
     from account_cookies c
     where c.account_id = a.id and (c.expires_at is null or c.expires_at > %(now)s)
   ) cookies on true
   where a.status in ('active', 'quota_exhausted')
 ) candidate)
"""
_TIMESTAMP_FIELDS = (
    "access_token_expires_at",
    "quota_cooldown_until",
    "cloudflare_cooldown_until",
    "added_at",
    "window_reset_at",
    "last_used_at",
)


def accounts_from_json(rows: list[dict]) -> list[AccountView]:
    """AccountViews from the rows of ``CANDIDATES_JSON_SQL``."""
    accounts = []
    for row in rows:
        for name in _TIMESTAMP_FIELDS:
            value = row.get(name)
            if value is not None:
                row[name] = datetime.fromisoformat(value)
        accounts.append(AccountView(**row))
    return accounts


_RECHECK_SQL = """
select id, status, quota_limit_reached, quota_cooldown_until, cloudflare_cooldown_until,
       access_token, access_token_expires_at
from accounts where id = any(%s)
"""

# The window group of account_usage: what a new usage window starts from zero.
WINDOW_COUNTERS = tuple(column for column in ACCOUNT_USAGE_COUNTERS if column.startswith("window_"))


def restarted_window_columns(*, when: str | None = None) -> str:
    """``SET`` items of ``account_usage`` that zero the window counters and clear
    ``window_started_at``: always, or (in an upsert on ``account_usage as u``) only where the
    SQL condition ``when`` holds."""
    if when is None:
        items = [f"{column} = 0" for column in WINDOW_COUNTERS]
        items.append("window_started_at = null")
    else:
        items = [
            f"{column} = case when {when} then 0 else u.{column} end" for column in WINDOW_COUNTERS
        ]
        items.append(f"window_started_at = case when {when} then null else u.window_started_at end")
    return ", ".join(items)


def jwt_expiry(token: str) -> datetime | None:
    """``exp`` of a JWT access token (signature not checked: we only schedule by it).

    None when the token is opaque or has no numeric ``exp`` (callers treat that as expired).
    """
    return token_expiry(token)


class AccountState(Protocol):
    """What eligibility looks at: an ``AccountView`` or a ``proxy.models.Account`` row."""

    status: str
    quota_limit_reached: bool
    quota_cooldown_until: datetime | None
    cloudflare_cooldown_until: datetime | None
    access_token: str
    access_token_expires_at: datetime | None


QUOTA_LIMITED = "quota_limited"
NOT_ACTIVE = "not_active"
TOKEN_EXPIRED = "token_expired"
CLOUDFLARE_COOLDOWN = "cloudflare_cooldown"


def ineligibility(account: AccountState, *, now: datetime) -> str | None:
    """Why ``account`` may not serve at ``now`` (spec §3.2), or None when it may.

    Checked in this order: a quota limit whose cooldown has not passed, a status other than
    ``active``, an access token past its expiry (opaque tokens without a stored expiry count as
    expired, pitfall §11.7), a Cloudflare cooldown.
    """
    if account.quota_limit_reached and (
        account.quota_cooldown_until is None or account.quota_cooldown_until > now
    ):
        return QUOTA_LIMITED
    if account.status != "active":
        return NOT_ACTIVE
    expiry = account.access_token_expires_at or jwt_expiry(account.access_token)
    if expiry is None or expiry <= now:
        return TOKEN_EXPIRED
    if account.cloudflare_cooldown_until is not None and account.cloudflare_cooldown_until > now:
        return CLOUDFLARE_COOLDOWN
    return None


async def still_eligible(accounts: list[AccountView], *, now: datetime) -> list[AccountView]:
    """Re-read the state of ``accounts`` (one query) and keep those that may still serve.

    Used before each later attempt: another request may have changed an account meanwhile.
    The views are updated with what was read (a token refreshed meanwhile is used).
    """
    if not accounts:
        return []
    async with database_connection() as connection:
        cursor = await connection.execute(_RECHECK_SQL, [[account.id for account in accounts]])
        rows = {row[0]: row for row in await cursor.fetchall()}
    kept = []
    for account in accounts:
        row = rows.get(account.id)
        if row is None:
            continue
        (
            _,
            account.status,
            account.quota_limit_reached,
            account.quota_cooldown_until,
            account.cloudflare_cooldown_until,
            account.access_token,
            account.access_token_expires_at,
        ) = row
        if ineligibility(account, now=now) is None:
            kept.append(account)
    return kept


async def refresh_and_filter_eligible(
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
            await roll_usage_window(account, now=now)
            rolled = True
        reason = ineligibility(account, now=now)
        if reason == QUOTA_LIMITED and not rolled:
            continue
        if account.quota_limit_reached:  # its cooldown has passed, or its window rolled
            await lift_quota_limit(account, now=now, window_rolled=rolled)
            reason = ineligibility(account, now=now)
        if reason == TOKEN_EXPIRED:
            await mark_expired(account.id, token=account.access_token, now=now)
        if reason is None:
            eligible.append(account)
    return eligible


async def _execute(sql: str, parameters: list | dict) -> int:
    async with database_connection() as connection:
        cursor = await connection.execute(sql, parameters)
        return cursor.rowcount


async def lift_quota_limit(
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


async def roll_usage_window(account: AccountView, *, now: datetime) -> None:
    """Zero the window counters and move ``window_reset_at`` forward by whole windows."""
    seconds = account.limit_window_seconds
    if seconds:
        elapsed = (now - account.window_reset_at).total_seconds()
        windows = int(elapsed // seconds) + 1
        next_reset = account.window_reset_at + timedelta(seconds=windows * seconds)
    else:
        next_reset = None
    await _execute(_ROLL_WINDOW_SQL, [next_reset, account.id, now])
    account.window_request_count = 0
    account.window_tokens = 0
    account.window_cached_tokens = 0
    account.window_reset_at = next_reset


async def mark_expired(
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


async def mark_banned(account_id: str, *, token: str, now: datetime) -> None:
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


async def mark_rate_limited(
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


async def mark_quota_exhausted(account_id: str, *, now: datetime) -> None:
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


async def register_cloudflare_challenge(account_id: str, *, now: datetime) -> datetime:
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


async def register_cloudflare_path_block(account_id: str, *, now: datetime) -> bool:
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
