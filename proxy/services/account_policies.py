"""Writes of ``account_policies`` (issue 25 item 5): set or remove an account's daily burn cap,
and roll each capped account's burn baseline into the new UTC day.

The checks live here so the admin API and the console refuse the same things. A change takes
effect on the next request (a write to ``account_policies`` moves the pool snapshot's
version, so the next request reads the candidates again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction

from proxy.domain.key_policy import day_start
from proxy.models import Account, AccountPolicy

LARGEST_CAP_TOKENS = 10**12


class AccountPolicyInvalid(ValueError):
    """A value no account policy may hold: ``field`` (its snake_case name) and ``reason`` (safe
    to show, worded to follow the field's name)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field = field
        self.reason = reason


def daily_burn_cap_value(value: Any) -> int | None:
    """The checked cap (None: no cap). Raises AccountPolicyInvalid."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AccountPolicyInvalid("daily_burn_cap_tokens", "must be a whole number or null")
    if not 1 <= value <= LARGEST_CAP_TOKENS:
        raise AccountPolicyInvalid(
            "daily_burn_cap_tokens", f"must be between 1 and {LARGEST_CAP_TOKENS}"
        )
    return value


# Today's baseline of every policy rolled on another day (or never): account_usage's input +
# output now, minus what today's buckets hold of it — what the counters stood at 00:00 UTC. One
# statement sees one snapshot of both, and the ledger writes them in one transaction, so a
# request is counted in both or in neither.
_ROLL_SQL = """
update account_policies ap
set burn_day = %(today)s,
    burn_baseline_tokens =
      coalesce((select u.input_tokens + u.output_tokens from account_usage u
                where u.account_id = ap.account_id), 0)
      - coalesce((select sum(b.input_tokens + b.output_tokens) from request_time_buckets b
                  where b.account_id = ap.account_id and b.bucket_start >= %(day_start)s), 0)
where ap.burn_day is distinct from %(today)s
"""


def account_burn_days_roll(*, now: datetime, account_ids: list[str] | None = None) -> int:
    """Give every policy (or those of ``account_ids``) not rolled for the UTC day of ``now``
    that day's baseline; returns how many were rolled. Idempotent within a day."""
    start = day_start(now)
    sql = _ROLL_SQL
    parameters: dict[str, Any] = {"today": start.date(), "day_start": start}
    if account_ids is not None:
        sql += " and ap.account_id = any(%(ids)s)"
        parameters["ids"] = list(account_ids)
    with connection.cursor() as cursor:
        cursor.execute(sql, parameters)
        return cursor.rowcount


@transaction.atomic
def account_policy_set(
    *, account: Account, daily_burn_cap_tokens: int | None, now: datetime
) -> AccountPolicy | None:
    """Set the account's daily burn cap (``daily_burn_cap_value`` checked); None removes the
    policy. A new policy gets today's baseline at once, so the cap applies from now."""
    if daily_burn_cap_tokens is None:
        account_policy_delete(account=account)
        return None
    policy, _ = AccountPolicy.objects.update_or_create(
        account=account,
        defaults={"daily_burn_cap_tokens": daily_burn_cap_tokens, "updated_at": now},
    )
    account_burn_days_roll(now=now, account_ids=[account.pk])
    policy.refresh_from_db()
    return policy


def account_policy_delete(*, account: Account) -> bool:
    """Remove the account's policy (uncapped again); False when it had none."""
    deleted, _ = AccountPolicy.objects.filter(account=account).delete()
    return deleted > 0
