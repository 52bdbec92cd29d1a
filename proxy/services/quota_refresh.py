"""Quota recovery (spec §4.4): re-read ``/wham/usage`` for accounts held back by their quota.

Candidates: ``quota_exhausted`` accounts, and ``active`` ones with ``quota_limit_reached`` or
``quota_verify_required``. An account whose cooldown has not passed (plus 30 s of grace) waits;
one read within the last 30 minutes waits too, unless its cooldown has passed. Upstream calls
are 3 s apart. The snapshot then decides (``services.account_quota.account_quota_apply``):
a lifted limit puts the account back into service. An account whose limit has no known reset
time (a 402, a snapshot without reset) is simply re-checked every 30 minutes instead of
staying parked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q

from proxy.background import run_coroutine
from proxy.clients import codex
from proxy.models import Account, AccountStatus
from proxy.quota import UsageFetchError, fetch_usage
from proxy.services.account_quota import account_quota_apply
from proxy.services.upkeep_accounts import current_fingerprint

logger = logging.getLogger(__name__)

GRACE = timedelta(seconds=30)
MINIMUM_INTERVAL = timedelta(minutes=30)
SPACING_SECONDS = 3.0


@dataclass
class QuotaRefreshReport:
    checked: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)  # back in service after the check
    still_limited: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # usage could not be read


@dataclass(frozen=True)
class UsageCandidate:
    id: str
    access_token: str
    chatgpt_account_id: str | None


def quota_refresh_candidates(*, now: datetime) -> list[UsageCandidate]:
    """The accounts to check now, in insertion order (spec §4.4's rules)."""
    rows = (
        Account.objects.filter(
            Q(status=AccountStatus.QUOTA_EXHAUSTED)
            | Q(status=AccountStatus.ACTIVE, quota_limit_reached=True)
            | Q(status=AccountStatus.ACTIVE, quota_verify_required=True)
        )
        .order_by("added_at", "id")
        .values(
            "id", "access_token", "chatgpt_account_id", "quota_cooldown_until", "quota_fetched_at"
        )
    )
    picked = []
    for row in rows:
        cooldown = row["quota_cooldown_until"]
        if cooldown is not None and cooldown + GRACE > now:
            continue
        cooldown_passed = cooldown is not None
        fetched = row["quota_fetched_at"]
        if not cooldown_passed and fetched is not None and fetched > now - MINIMUM_INTERVAL:
            continue
        picked.append(UsageCandidate(row["id"], row["access_token"], row["chatgpt_account_id"]))
    return picked


def usage_headers(account, fingerprint: dict) -> list[tuple[str, str]]:
    """The usage call's headers for ``account`` (anything with ``id``, ``access_token``,
    ``chatgpt_account_id``): the Codex client's one header builder (spec §2.3)."""
    return codex.build_headers(
        codex.Call.USAGE,
        fingerprint=codex.render_fingerprint(fingerprint),
        credentials=codex.Credentials.of(account),
    )


async def check_quota_of(
    candidates: list[UsageCandidate],
    fingerprint: dict,
    *,
    now: datetime,
    sleep: Callable[[float], Awaitable[None]],
) -> dict[str, bool | None]:
    """account id → limit still reached (None: the usage endpoint could not be read)."""
    outcome: dict[str, bool | None] = {}
    for index, candidate in enumerate(candidates):
        if index:
            await sleep(SPACING_SECONDS)
        try:
            snapshot = await fetch_usage(usage_headers(candidate, fingerprint), now=now)
        except UsageFetchError as error:
            logger.warning("quota refresh of %s: %s", candidate.id, error)
            outcome[candidate.id] = None
            continue
        await account_quota_apply(candidate.id, snapshot, now=now)
        outcome[candidate.id] = snapshot.limit_reached
    return outcome


def quota_refresh(
    *, now: datetime, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> QuotaRefreshReport:
    """Check every candidate's usage and apply it; returns what happened to each."""
    report = QuotaRefreshReport()
    candidates = quota_refresh_candidates(now=now)
    if not candidates:
        return report
    outcome = run_coroutine(check_quota_of(candidates, current_fingerprint(), now=now, sleep=sleep))
    statuses = dict(Account.objects.filter(pk__in=list(outcome)).values_list("id", "status"))
    for account_id, limited in outcome.items():
        report.checked.append(account_id)
        if limited is None:
            report.failed.append(account_id)
        elif limited:
            report.still_limited.append(account_id)
        elif statuses.get(account_id) == AccountStatus.ACTIVE:
            report.recovered.append(account_id)
    return report
