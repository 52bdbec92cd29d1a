"""What an attempt's failure does to its account (spec §3.6), and the usage check of an account
whose quota limit just lifted (spec §3.5): the account-state side of a dispatch."""

from __future__ import annotations

from django.utils import timezone

from proxy.accounts import AccountView
from proxy.clients import codex
from proxy.dispatch.cookies import cookie_header
from proxy.domain.failures import AttemptFailure, FailureKind
from proxy.quota import UsageFetchError, fetch_usage
from proxy.services import account_state
from proxy.services.account_quota import account_quota_apply


async def quota_still_blocked(account: AccountView, fingerprint: codex.FingerprintHeaders) -> bool:
    """For an account whose quota limit just lifted: ask the usage endpoint first (spec §3.5).

    Returns True when the upstream still reports the limit (the account is skipped); an
    unreadable usage endpoint lets the request go ahead.
    """
    url = codex.usage_urls()[0]
    headers = codex.build_headers(
        codex.Call.USAGE,
        fingerprint=fingerprint,
        credentials=codex.Credentials.of(account),
        cookie=cookie_header(account.cookies, url=url, now=timezone.now()),
    )
    now = timezone.now()
    try:
        snapshot = await fetch_usage(headers, now=now)
    except UsageFetchError:
        return False
    await account_quota_apply(account.id, snapshot, now=now)
    return snapshot.limit_reached


async def apply_account_effect(account: AccountView, failure: AttemptFailure) -> None:
    """The account state a rotating failure says something about."""
    now = timezone.now()
    kind = failure.kind
    if kind == FailureKind.RATE_LIMITED and failure.answered:
        await account_state.account_mark_rate_limited(
            account.id, now=now, retry_after_seconds=failure.retry_after_seconds
        )
    elif kind == FailureKind.QUOTA_EXHAUSTED:
        await account_state.account_mark_quota_exhausted(account.id, now=now)
    elif kind == FailureKind.EXPIRED:
        await account_state.account_mark_expired(account.id, token=account.access_token, now=now)
    elif kind == FailureKind.BANNED:
        await account_state.account_mark_banned(account.id, token=account.access_token, now=now)
    elif kind == FailureKind.CLOUDFLARE_CHALLENGE:
        await account_state.account_register_cloudflare_challenge(account.id, now=now)
    elif kind == FailureKind.CLOUDFLARE_PATH_BLOCKED:
        await account_state.account_register_cloudflare_path_block(account.id, now=now)
