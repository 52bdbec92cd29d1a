"""The scheduled quota read of active accounts (issue 38): the console's quota bars stay current
without anyone asking.

The recovery pass (``proxy.services.quota_refresh``) reads only accounts held back by their
quota; this one reads the others that serve: ``active``, no quota limit reached, an access token
not known to have expired. Of those, each whose quota was not stored within the interval
(``quota_fetched_at``: set by a read, by the console's "read quota now", and by a passive sync
from a successful answer's rate-limit headers that changed the snapshot) is read, least recently
read first, at most ``MOST_READS_PER_RUN`` per run, 3 s apart, through the same usage call and
the same ``account_quota_apply`` as the recovery pass. An account the upstream refuses (a 401,
an unreachable usage endpoint) is logged and left alone: token refresh and the request path
decide its state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F, Q

from proxy.background import run_coroutine
from proxy.models import Account, AccountStatus
from proxy.services.quota_refresh import UsageCandidate, check_quota_of
from proxy.services.upkeep_accounts import current_fingerprint

logger = logging.getLogger(__name__)

# 100 reads 3 s apart take five minutes: the task's soft time limit (10 minutes) is not reached.
MOST_READS_PER_RUN = 100


@dataclass
class QuotaReadReport:
    read: list[str] = field(default_factory=list)
    limit_reached: list[str] = field(default_factory=list)  # the read found a limit reached
    failed: list[str] = field(default_factory=list)  # usage could not be read


def quota_read_candidates(*, now: datetime, interval: timedelta) -> list[UsageCandidate]:
    """The active accounts to read now: not read within ``interval`` (less a tenth: beat runs
    this every ``interval`` and a run's own reads are stamped when it started, so the next run
    finds them due although its queueing was quicker), least recently read first (never read:
    first of all), at most ``MOST_READS_PER_RUN``."""
    due_before = now - interval * 0.9
    rows = (
        Account.objects.filter(status=AccountStatus.ACTIVE, quota_limit_reached=False)
        .filter(Q(access_token_expires_at__isnull=True) | Q(access_token_expires_at__gt=now))
        .filter(Q(quota_fetched_at__isnull=True) | Q(quota_fetched_at__lte=due_before))
        .order_by(F("quota_fetched_at").asc(nulls_first=True), "added_at", "id")
        .values_list("id", "access_token", "chatgpt_account_id")[:MOST_READS_PER_RUN]
    )
    return [UsageCandidate(*row) for row in rows]


def quota_read_active(
    *,
    now: datetime,
    interval: timedelta,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> QuotaReadReport:
    """Read and apply the usage of every candidate; returns what each read found."""
    report = QuotaReadReport()
    candidates = quota_read_candidates(now=now, interval=interval)
    if not candidates:
        return report
    outcome = run_coroutine(check_quota_of(candidates, current_fingerprint(), now=now, sleep=sleep))
    for account_id, limited in outcome.items():
        if limited is None:
            report.failed.append(account_id)
            continue
        report.read.append(account_id)
        if limited:
            report.limit_reached.append(account_id)
    return report
