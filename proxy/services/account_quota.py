"""Quota writes (spec §4.3): a usage snapshot applied to its account, and the passive sync
from the rate-limit headers of an answer (a success, or a stream that failed or was cut). One
statement each.
"""

from __future__ import annotations

import json
from datetime import datetime

from proxy.accounts import restarted_window_columns
from proxy.loop_resources import database_connection
from proxy.quota import QuotaSnapshot, header_windows, snapshot_from_headers

# ``snapshot_from_headers``'s merge with the stored quota, in SQL over the row ``a`` being
# updated: the passive sync then needs no read before its write.
_QUOTA_MERGED_WITH_STORED = """
jsonb_build_object(
  'plan_type', coalesce(%(plan)s::jsonb, a.quota_json->'plan_type', 'null'::jsonb),
  'snapshots', %(snapshots)s::jsonb || coalesce(
    jsonb_path_query_array(a.quota_json, '$.snapshots[*] ? (@.source == "additional")'),
    '[]'::jsonb),
  'monthly_limit', coalesce(%(monthly_limit)s::jsonb, a.quota_json->'monthly_limit', 'null'),
  'credits', coalesce(a.quota_json->'credits', 'null'::jsonb),
  'spend_control', coalesce(a.quota_json->'spend_control', 'null'::jsonb))
"""
_QUOTA_AS_FETCHED = "%(quota)s::jsonb"
_PLAN_MERGED_WITH_STORED = "coalesce(%(plan_text)s, a.quota_json->>'plan_type', a.plan_type)"
_PLAN_AS_FETCHED = "coalesce(%(plan_text)s, a.plan_type)"

# One statement: the account row takes the snapshot, and (when the upstream named a window
# reset) the usage window follows; its counters restart when the reset moved by half a window
# or more. A snapshot that changes nothing on the account writes nothing at all.
_APPLY_SQL = """
with incoming as (
  select a.id, {quota} as quota, {plan} as plan_type,
    case when a.status in ('active', 'quota_exhausted')
      then (case when %(limit_reached)s then 'quota_exhausted' else 'active' end)
      else a.status end as status
  from accounts a where a.id = %(account)s
), applied as (
  update accounts a set quota_json = i.quota, quota_fetched_at = %(now)s,
    quota_limit_reached = %(limit_reached)s, quota_cooldown_until = %(cooldown)s,
    quota_verify_required = false, status = i.status, plan_type = i.plan_type,
    updated_at = %(now)s
  from incoming i
  where a.id = i.id
    and (a.quota_json, a.quota_limit_reached, a.quota_cooldown_until, a.quota_verify_required,
         a.status, a.plan_type)
        is distinct from
        (i.quota, %(limit_reached)s, %(cooldown)s::timestamptz, false, i.status, i.plan_type)
  returning a.id
)
insert into account_usage as u (account_id, window_reset_at, limit_window_seconds)
select id, %(reset)s::timestamptz, %(seconds)s::bigint from applied
where %(reset)s::timestamptz is not null
on conflict (account_id) do update set {restart},
  window_reset_at = excluded.window_reset_at,
  limit_window_seconds = coalesce(excluded.limit_window_seconds, u.limit_window_seconds)
"""
_DRIFTED = (
    "(u.window_reset_at is not null and abs(extract(epoch from"
    " (excluded.window_reset_at - u.window_reset_at))) >= %(drift)s)"
)
_RESTART = restarted_window_columns(when=_DRIFTED)
_APPLY_FETCHED_SQL = _APPLY_SQL.format(
    quota=_QUOTA_AS_FETCHED, plan=_PLAN_AS_FETCHED, restart=_RESTART
)
_APPLY_PASSIVE_SQL = _APPLY_SQL.format(
    quota=_QUOTA_MERGED_WITH_STORED, plan=_PLAN_MERGED_WITH_STORED, restart=_RESTART
)


def _apply_parameters(account_id: str, snapshot: QuotaSnapshot, *, now: datetime) -> dict:
    return {
        "account": account_id,
        "now": now,
        "limit_reached": snapshot.limit_reached,
        "cooldown": snapshot.reset_at if snapshot.limit_reached else None,
        "reset": snapshot.window_reset_at,
        "seconds": snapshot.window_seconds,
        "drift": (snapshot.window_seconds or 7200) / 2,
    }


async def _execute(sql: str, parameters: dict) -> int:
    async with database_connection() as connection:
        cursor = await connection.execute(sql, parameters)
        return cursor.rowcount


async def account_quota_apply(account_id: str, snapshot: QuotaSnapshot, *, now: datetime) -> None:
    """Store a fetched snapshot and let it drive the account (spec §4.3); one statement.

    Sets the limit flag and cooldown (the reset time when blocked), clears the verify flag,
    toggles active ↔ quota_exhausted (never touching disabled, banned or expired accounts),
    updates the plan, and syncs the usage window: counters restart when the upstream's reset
    time moved by half a window or more (an hour when the window is unknown).
    """
    await _execute(
        _APPLY_FETCHED_SQL,
        {
            **_apply_parameters(account_id, snapshot, now=now),
            "quota": json.dumps(snapshot.quota),
            "plan_text": snapshot.plan_type,
        },
    )


async def account_quota_sync_passive(
    account_id: str, headers: dict[str, str], *, now: datetime
) -> bool:
    """Apply the rate-limit headers of a 200 answer (spec §4.3 "passive sync"): a success, or
    a stream that failed or broke off, whose headers said where the account's quota stands.

    Returns whether the headers carried a window. One statement, merged with the stored quota
    in SQL; a snapshot identical to the stored one writes nothing.
    """
    if not header_windows(headers):
        return False
    # The stored quota enters in SQL; parse without it here (only the header parts are used).
    snapshot = snapshot_from_headers(headers, now=now)
    assert snapshot is not None  # the headers carry a window (header_windows above)
    plan = headers.get("x-codex-plan-type") or None
    await _execute(
        _APPLY_PASSIVE_SQL,
        {
            **_apply_parameters(account_id, snapshot, now=now),
            "plan": json.dumps(plan) if plan else None,
            "plan_text": plan,
            "snapshots": json.dumps(snapshot.quota["snapshots"]),
            "monthly_limit": json.dumps(snapshot.quota["monthly_limit"])
            if snapshot.quota["monthly_limit"] is not None
            else None,
        },
    )
    return True
