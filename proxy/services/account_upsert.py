"""The one account upsert: an operator's add, an OAuth onboarding and every import entry write
an account's tokens through it (spec §6.3).

One statement decides and writes, so two writes of one ChatGPT identity at once end with one
account. The target is ``given_id`` when that account exists and its ChatGPT identity matches
(an import entry's own id), else the account holding the same ChatGPT identity (the unique
index ``ux_accounts_chatgpt_identity`` decides), else a new account ``new_id``.

The status rule (spec §3.1): a disabled or banned account keeps its status (token updates never
reactivate those); otherwise the account takes ``status`` — but ``active`` stays
``quota_exhausted`` while the quota lock holds. ``clears_quota_lock`` is the one difference
between the callers: an import clears the lock ("atomic upsert (clears quota lock)"), so its
status is the entry's; an add keeps it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

_UPSERT_SQL = """
with target as (
  select id from accounts where id = %(given)s
), updated as (
  update accounts a set
    access_token = %(access)s,
    refresh_token = coalesce(%(refresh)s, a.refresh_token),
    access_token_expires_at = %(expires)s,
    next_refresh_at = %(next)s,
    chatgpt_account_id = coalesce(a.chatgpt_account_id, %(account)s),
    chatgpt_user_id = coalesce(a.chatgpt_user_id, %(user)s),
    email = coalesce(%(email)s, a.email),
    plan_type = coalesce(%(plan)s, a.plan_type),
    label = coalesce(%(label)s, a.label),
    status = case when a.status in ('disabled', 'banned') then a.status
                  when %(status)s = 'active' and a.quota_limit_reached
                       and not %(clears_quota_lock)s then 'quota_exhausted'
                  else %(status)s end,
    quota_json = coalesce(%(quota)s::jsonb, a.quota_json),
    quota_fetched_at = coalesce(%(quota_at)s, a.quota_fetched_at),
    quota_limit_reached = a.quota_limit_reached and not %(clears_quota_lock)s,
    quota_cooldown_until = case when %(clears_quota_lock)s then null
                                else a.quota_cooldown_until end,
    quota_verify_required = coalesce(%(verify)s, a.quota_verify_required),
    updated_at = %(now)s
  from target
  where a.id = target.id
    and (a.chatgpt_account_id is null or a.chatgpt_account_id = %(account)s)
    -- one ChatGPT workspace has many users: the user must be the same one too
    and (a.chatgpt_user_id is null or %(user)s::text is null or a.chatgpt_user_id = %(user)s)
  returning a.id, false as inserted
), inserted as (
  insert into accounts as a (id, email, chatgpt_account_id, chatgpt_user_id, label, plan_type,
    access_token, refresh_token, access_token_expires_at, next_refresh_at, status, quota_json,
    quota_fetched_at, quota_verify_required, added_at, updated_at)
  select %(new_id)s, %(email)s, %(account)s, %(user)s, %(label)s, %(plan)s, %(access)s,
    %(refresh)s, %(expires)s, %(next)s, %(status)s, %(quota)s::jsonb, %(quota_at)s,
    coalesce(%(verify)s, false), %(now)s, %(now)s
  where not exists (select 1 from target)
  on conflict (chatgpt_account_id, coalesce(chatgpt_user_id, ''))
    where chatgpt_account_id is not null
  do update set
    access_token = excluded.access_token,
    refresh_token = coalesce(excluded.refresh_token, a.refresh_token),
    access_token_expires_at = excluded.access_token_expires_at,
    next_refresh_at = excluded.next_refresh_at,
    email = coalesce(excluded.email, a.email),
    plan_type = coalesce(excluded.plan_type, a.plan_type),
    label = coalesce(excluded.label, a.label),
    status = case when a.status in ('disabled', 'banned') then a.status
                  when excluded.status = 'active' and a.quota_limit_reached
                       and not %(clears_quota_lock)s then 'quota_exhausted'
                  else excluded.status end,
    quota_json = coalesce(excluded.quota_json, a.quota_json),
    quota_fetched_at = coalesce(excluded.quota_fetched_at, a.quota_fetched_at),
    quota_limit_reached = a.quota_limit_reached and not %(clears_quota_lock)s,
    quota_cooldown_until = case when %(clears_quota_lock)s then null
                                else a.quota_cooldown_until end,
    quota_verify_required = coalesce(%(verify)s, a.quota_verify_required),
    updated_at = excluded.updated_at
  returning a.id, (xmax = 0) as inserted
)
select id, inserted from updated union all select id, inserted from inserted
"""


@dataclass(frozen=True)
class AccountWrite:
    """What one upsert writes. None leaves a column as it is on an existing account (tokens
    and ``next_refresh_at`` excepted: they are always written)."""

    new_id: str
    access_token: str
    refresh_token: str | None
    access_token_expires_at: datetime | None
    next_refresh_at: datetime | None
    chatgpt_account_id: str | None
    chatgpt_user_id: str | None
    email: str | None
    plan_type: str | None
    label: str | None
    status: str
    clears_quota_lock: bool
    given_id: str | None = None
    quota: dict | None = None
    quota_fetched_at: datetime | None = None
    quota_verify_required: bool | None = None


def account_upsert(*, write: AccountWrite, now: datetime) -> tuple[str, bool] | None:
    """Write ``write`` (see the module's rules); returns (account id, inserted), or None when
    ``given_id`` names an account of another ChatGPT account or user (nothing was written).
    Raises IntegrityError when the write would give an account an identity another account
    of the pool holds, or a new id raced another insert (the caller decides what that means;
    run it in a savepoint to keep the caller's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _UPSERT_SQL,
            {
                "given": write.given_id,
                "new_id": write.new_id,
                "access": write.access_token,
                "refresh": write.refresh_token,
                "expires": write.access_token_expires_at,
                "next": write.next_refresh_at,
                "account": write.chatgpt_account_id,
                "user": write.chatgpt_user_id,
                "email": write.email,
                "plan": write.plan_type,
                "label": write.label,
                "status": write.status,
                "clears_quota_lock": write.clears_quota_lock,
                "quota": json.dumps(write.quota) if write.quota is not None else None,
                "quota_at": write.quota_fetched_at,
                "verify": write.quota_verify_required,
                "now": now,
            },
        )
        row = cursor.fetchone()
    return (row[0], row[1]) if row is not None else None
