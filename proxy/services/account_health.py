"""An operator's refresh of accounts now (spec §6.3): one account (``account_refresh_now``) or
many, staggered (``accounts_health_check``), each outcome said as alive, dead or skipped.

The caller waits for the answer: each refresh holds the account's lease, waits for a token-call
permit as long as a /v1 request does, and makes at most two attempts, each bounded by the OAuth
client's timeout.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.db import connection

from common import clock
from proxy.models import Account, AccountStatus
from proxy.services.token_refresh import (
    REQUEST_PERMIT_WAIT_SECONDS,
    RefreshResult,
    token_refresh_account,
)

# One confirmation of a permanent refusal is not enough (token refresh's rule): two attempts.
REFRESH_ATTEMPTS = 2
STAGGER_JITTER = 0.30

# What each refresh result means to the operator: (alive | dead | skipped, why).
OUTCOMES = {
    RefreshResult.REFRESHED: ("alive", None),
    RefreshResult.EXPIRED: ("dead", "the OAuth server refused the refresh token (expired)"),
    RefreshResult.BANNED: ("dead", "the OAuth server refused the account (banned)"),
    RefreshResult.RETRY_LATER: (
        "dead",
        "the token endpoint could not be reached; the worker tries again in about 10 minutes",
    ),
    RefreshResult.LEASE_BUSY: ("skipped", "a refresh of this account is already running"),
    RefreshResult.NOT_ELIGIBLE: (
        "skipped",
        "no refresh token, or disabled or banned (not refreshed)",
    ),
    RefreshResult.TOKEN_CHANGED: ("skipped", "its tokens changed meanwhile"),
    RefreshResult.NOT_DUE: ("skipped", "refreshed meanwhile"),
}


@dataclass(frozen=True)
class RefreshReport:
    account_id: str
    email: str
    previous_status: str
    result: str  # alive | dead | skipped
    error: str | None
    duration_ms: int


@dataclass(frozen=True)
class HealthCheckReport:
    results: list[RefreshReport]

    def count(self, result: str) -> int:
        return sum(1 for report in self.results if report.result == result)


def account_refresh_now(*, account: Account) -> RefreshReport:
    """Refresh ``account`` now (its lease, the token endpoint, two attempts at most); a
    disabled or banned account, or one without a refresh token, is skipped."""
    started = clock.monotonic()
    previous = account.status
    if account.status in (AccountStatus.DISABLED, AccountStatus.BANNED) or not (
        account.refresh_token
    ):
        result, error = OUTCOMES[RefreshResult.NOT_ELIGIBLE]
    else:
        outcome = token_refresh_account(
            account_id=account.pk,
            force=True,
            max_attempts=REFRESH_ATTEMPTS,
            permit_wait_seconds=REQUEST_PERMIT_WAIT_SECONDS,
        )
        result, error = OUTCOMES[outcome]
    return RefreshReport(
        account_id=account.pk,
        email=account.email or "",
        previous_status=previous,
        result=result,
        error=error,
        duration_ms=round((clock.monotonic() - started) * 1000),
    )


def accounts_health_check(
    *, account_ids: Iterable[str] | None, stagger_seconds: float, concurrency: int
) -> HealthCheckReport:
    """Refresh the accounts of ``account_ids`` (None: every account), oldest first,
    ``concurrency`` at a time; the first ``concurrency`` start ``stagger_seconds`` (±30 %)
    apart, so the token endpoint never sees a burst. Returns their reports in that order."""
    ordered = Account.objects.order_by("added_at", "id")
    if account_ids is not None:
        ordered = ordered.filter(pk__in=list(account_ids))
    accounts = list(ordered)

    def check(index: int, account: Account) -> RefreshReport:
        try:
            delay = min(index, concurrency) * stagger_seconds
            if delay:
                clock.sleep(delay * (1 + STAGGER_JITTER * (2 * random.random() - 1)))  # noqa: S311
            return account_refresh_now(account=account)
        finally:
            # Each worker thread has its own database connection: give it back.
            connection.close()

    with ThreadPoolExecutor(max_workers=concurrency) as executor:
        return HealthCheckReport(list(executor.map(check, range(len(accounts)), accounts)))
