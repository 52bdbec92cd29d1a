"""Reads of the proxy's own tables for the admin API (the ledger's are in telemetry.queries)."""

from __future__ import annotations

from collections import Counter

from django.db.models import Q, QuerySet

from proxy.admin_api.quota_windows import is_high_usage, quota_windows
from proxy.models import Account, AccountStatus
from proxy.runtime_state.refresh_leases import refresh_leases_held

LONGEST_SEARCH = 200
ATTENTION_STATUSES = (AccountStatus.EXPIRED, AccountStatus.DISABLED, AccountStatus.BANNED)


def accounts_matching(search: str | None) -> QuerySet:
    """Accounts whose id, e-mail, label or ChatGPT ids contain ``search`` (case-insensitive)."""
    accounts = Account.objects.all()
    term = (search or "").strip()[:LONGEST_SEARCH]
    if term:
        accounts = accounts.filter(
            Q(id__icontains=term)
            | Q(email__icontains=term)
            | Q(label__icontains=term)
            | Q(chatgpt_account_id__icontains=term)
            | Q(chatgpt_user_id__icontains=term)
        )
    return accounts


def accounts_summary() -> dict[str, int]:
    """The accounts page's cards over the whole pool: total, active, high usage (a quota
    window at 80 % or more), attention (expired, disabled or banned)."""
    rows = list(Account.objects.values_list("status", "quota_json"))
    statuses = Counter(status for status, _ in rows)
    return {
        "total": len(rows),
        "active": statuses[AccountStatus.ACTIVE],
        "highUsage": sum(1 for _, quota in rows if is_high_usage(quota_windows(quota))),
        "attention": sum(statuses[status] for status in ATTENTION_STATUSES),
    }


def pool_summary() -> dict[str, int]:
    """Accounts per status, and how many a token refresh holds right now."""
    ids_and_statuses = list(Account.objects.values_list("id", "status"))
    statuses = Counter(status for _, status in ids_and_statuses)
    return {
        "total": len(ids_and_statuses),
        "active": statuses[AccountStatus.ACTIVE],
        "expired": statuses[AccountStatus.EXPIRED],
        "quotaExhausted": statuses[AccountStatus.QUOTA_EXHAUSTED],
        "refreshing": len(refresh_leases_held(account_id for account_id, _ in ids_and_statuses)),
        "disabled": statuses[AccountStatus.DISABLED],
        "banned": statuses[AccountStatus.BANNED],
    }


def account_or_none(account_id: str) -> Account | None:
    return Account.objects.filter(pk=account_id).first()
