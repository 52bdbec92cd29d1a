"""Operator writes to ``accounts`` (codex-proxy spec §3.1 invariants)."""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Case, TextField, Value, When
from django.db.models.functions import Coalesce

from proxy.dispatch.accounts import jwt_expiry
from proxy.identifiers import new_id
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


class AccountIdentityTaken(ValueError):
    """Another account already has this ChatGPT account and user id."""

    message = "An account with this ChatGPT account and user id is already in the pool."

    def __init__(self) -> None:
        super().__init__(self.message)


def account_identity_taken(*, chatgpt_account_id: str | None, chatgpt_user_id: str | None) -> bool:
    """Return whether ``ux_accounts_chatgpt_identity`` already holds this identity.

    A courtesy check so a form can show the problem next to its fields; ``account_create``
    (the index itself) is what decides when two adds race.
    """
    if not chatgpt_account_id:
        return False  # the index covers only accounts with a ChatGPT account id
    return (
        Account.objects.annotate(
            user_key=Coalesce("chatgpt_user_id", Value(""), output_field=TextField())
        )
        .filter(chatgpt_account_id=chatgpt_account_id, user_key=chatgpt_user_id or "")
        .exists()
    )


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
    AccountIdentityTaken when the ChatGPT identity is already in the pool (the unique index
    ``ux_accounts_chatgpt_identity`` decides, so two concurrent adds cannot both succeed).
    """
    try:
        with transaction.atomic():
            return Account.objects.create(
                id=new_id("acct"),
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
            raise AccountIdentityTaken from None
        raise


def account_delete(*, account: Account) -> int:
    """Remove an account: its row (usage counters and cookies follow by ON DELETE CASCADE),
    then its affinity entries in Redis (seed §4B.3: the account index drives the purge).

    Facts in usage_records / ops_error_logs stay (no foreign key, by design). Returns how many
    affinity records were removed.
    """
    account_id = account.pk
    Account.objects.filter(pk=account_id).delete()
    return affinity_purge_account(account_id)
