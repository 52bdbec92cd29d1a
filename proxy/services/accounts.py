"""Operator writes to ``accounts`` (codex-proxy spec §3.1 invariants)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Case, Value, When

from proxy.models import Account, AccountStatus

ADMIN_SETTABLE_STATUSES = (AccountStatus.ACTIVE, AccountStatus.DISABLED)


class AccountStatusRejected(ValueError):
    """Operators may only set ``active`` or ``disabled``."""


def account_update_by_admin(
    *, account: Account, label: str | None, status: str, now: datetime
) -> Account:
    """Change label and status as an operator.

    Setting ``active`` on an account whose quota limit is reached stores ``quota_exhausted``
    (spec §3.1): the quota, not the operator, decides when it may serve again.
    Raises AccountStatusRejected for any other status.
    """
    if status not in ADMIN_SETTABLE_STATUSES:
        raise AccountStatusRejected(f"operators may set only active or disabled, not {status!r}")
    new_status: str | Case = status
    if status == AccountStatus.ACTIVE:
        # Decided inside the one UPDATE, so a concurrent quota change cannot be overwritten.
        new_status = Case(
            When(quota_limit_reached=True, then=Value(AccountStatus.QUOTA_EXHAUSTED.value)),
            default=Value(AccountStatus.ACTIVE.value),
        )
    Account.objects.filter(pk=account.pk).update(label=label, status=new_status, updated_at=now)
    account.refresh_from_db()
    return account
