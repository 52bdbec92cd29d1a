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


class AccountIdentityTaken(ValueError):
    """Another account already has this ChatGPT account and user id."""


def account_create(
    *,
    access_token: str,
    now: datetime,
    refresh_token: str | None = None,
    email: str | None = None,
    label: str | None = None,
    chatgpt_account_id: str | None = None,
    chatgpt_user_id: str | None = None,
    plan_type: str | None = None,
) -> Account:
    """Add an upstream account to the pool (id ``acct_<uuid hex>``, status active).

    The token's expiry is read from its JWT ``exp`` when it has one. Raises
    AccountIdentityTaken when the ChatGPT identity is already in the pool.
    """
    import uuid

    from django.db import IntegrityError, transaction

    from proxy.dispatch.accounts import jwt_expiry

    try:
        with transaction.atomic():
            return Account.objects.create(
                id=f"acct_{uuid.uuid4().hex}",
                access_token=access_token.strip(),
                refresh_token=(refresh_token or "").strip() or None,
                access_token_expires_at=jwt_expiry(access_token.strip()),
                email=email or None,
                label=label or None,
                chatgpt_account_id=chatgpt_account_id or None,
                chatgpt_user_id=chatgpt_user_id or None,
                plan_type=plan_type or None,
                status=AccountStatus.ACTIVE,
                added_at=now,
                updated_at=now,
            )
    except IntegrityError as error:
        if "ux_accounts_chatgpt_identity" in str(error):
            raise AccountIdentityTaken(
                "an account with this ChatGPT identity is already in the pool"
            ) from None
        raise


def account_delete(*, account: Account) -> int:
    """Remove an account: its row (usage counters and cookies follow by ON DELETE CASCADE),
    then its affinity entries in Redis (seed §4B.3: the account index drives the purge).

    Facts in usage_records / ops_error_logs stay (no foreign key, by design). Returns how many
    affinity records were removed.
    """
    from proxy.runtime_state.affinity import affinity_purge_account

    account_id = account.pk
    Account.objects.filter(pk=account_id).delete()
    return affinity_purge_account(account_id)
