"""Reads of the proxy's request path (PostgreSQL): the candidates and their re-check, and the
ledger's word on whose a response is.

The candidates come back as one JSON column (``SNAPSHOT_CANDIDATES_JSON_SQL``) of the pool
snapshot's statement (``proxy.pool_snapshot``: read again only when the pool changed); before
each later attempt ``still_eligible`` re-reads their state in one query. ``response_ownership``
is asked only for a previous response id Redis does not know (``proxy.dispatch.continuity``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from proxy.accounts import AccountView, ineligibility
from proxy.daily_burn import DAILY_BURN_CAPPED_UNTIL_SQL
from proxy.loop_resources import database_connection

# The candidates as one JSON value: one round trip brings them all, with their cookies.
_CANDIDATES_JSON_TEMPLATE = """
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
          cookies.items as cookies, a.refresh_token is not null as has_refresh_token{extra_columns}
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
CANDIDATES_JSON_SQL = _CANDIDATES_JSON_TEMPLATE.format(extra_columns="")
# The pool snapshot's: every candidate with the words of its label (split on spaces and
# commas), so that a key whose policy names an account group can be given only the accounts
# whose label carries the word ``group:<name>``, and the moment its daily burn cap holds it
# back until (``proxy.daily_burn``; null when it does not).
SNAPSHOT_CANDIDATES_JSON_SQL = _CANDIDATES_JSON_TEMPLATE.format(
    extra_columns=""",
          regexp_split_to_array(coalesce(a.label, ''), '[\\s,]+') as label_words,
          """
    + DAILY_BURN_CAPPED_UNTIL_SQL
    + " as burn_capped_until",
)
_RECHECK_SQL = """
select id, status, quota_limit_reached, quota_cooldown_until, cloudflare_cooldown_until,
       access_token, access_token_expires_at
from accounts where id = any(%s)
"""


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


# One lookup through the seed's partial index idx_usage_records_response_id (``response_id =``
# implies ``is not null``). A response id has one row (a success is exactly one row, seed
# §4.7); the aggregate stays exact if there were more: any row of another key (or of none)
# makes the id another's.
_RESPONSE_OWNERSHIP_SQL = """
select count(*),
       coalesce(bool_or(client_api_key_id is distinct from %(client_key_id)s::text), false),
       (array_agg(account_id order by created_at desc))[1]
from usage_records where response_id = %(response_id)s
"""


@dataclass(frozen=True)
class ResponseOwnership:
    """What the ledger says of a response id: whether a row of it belongs to another client
    key (or to none), and the account of its newest row."""

    of_another_key: bool
    account_id: str | None


async def response_ownership(
    response_id: str, *, client_key_id: str | None
) -> ResponseOwnership | None:
    """The ledger's owner of ``response_id`` as seen by ``client_key_id`` (one indexed query),
    or None when ``usage_records`` has no row of it. Raises what the database raises."""
    async with database_connection() as connection:
        cursor = await connection.execute(
            _RESPONSE_OWNERSHIP_SQL,
            {"response_id": response_id, "client_key_id": client_key_id},
        )
        row = await cursor.fetchone()
    assert row is not None  # an aggregate: always one row
    count, of_another_key, account_id = row
    if not count:
        return None
    return ResponseOwnership(of_another_key=of_another_key, account_id=account_id)
