"""Operator writes to ``accounts`` (codex-proxy spec §3.1 invariants)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Case, Value, When

from proxy.models import Account, AccountStatus
from proxy.runtime_state.affinity import affinity_purge_account

ADMIN_SETTABLE_STATUSES = (AccountStatus.ACTIVE, AccountStatus.DISABLED)


class AccountStatusRejected(ValueError):
    """Operators may only set ``active`` or ``disabled``."""


def account_update_by_admin(
    *, account: Account, label: str | None, status: str | None, now: datetime
) -> Account:
    """Change the label, and the status unless ``status`` is None, as an operator.

    None leaves the status as the scheduler last set it: renaming a banned or expired account
    must not put it back into service. Setting ``active`` on an account whose quota limit is
    reached stores ``quota_exhausted`` (spec §3.1): the quota, not the operator, decides when it
    may serve again. Raises AccountStatusRejected for any status but active or disabled.
    """
    changes: dict[str, object] = {"label": label, "updated_at": now}
    if status is not None:
        if status not in ADMIN_SETTABLE_STATUSES:
            raise AccountStatusRejected(
                f"operators may set only active or disabled, not {status!r}"
            )
        changes["status"] = status
        if status == AccountStatus.ACTIVE:
            # Decided inside the one UPDATE, so a concurrent quota change cannot be overwritten.
            changes["status"] = Case(
                When(quota_limit_reached=True, then=Value(AccountStatus.QUOTA_EXHAUSTED.value)),
                default=Value(AccountStatus.ACTIVE.value),
            )
    Account.objects.filter(pk=account.pk).update(**changes)
    account.refresh_from_db()
    return account


def account_delete(*, account: Account) -> int:
    """Remove an account: its row (usage counters and cookies follow by ON DELETE CASCADE),
    then its affinity entries in Redis (seed §4B.3: the account index drives the purge).

    Facts in usage_records / ops_error_logs stay (no foreign key, by design). Returns how many
    affinity records were removed.
    """
    account_id = account.pk
    Account.objects.filter(pk=account_id).delete()
    return affinity_purge_account(account_id)
