"""Token refresh (spec §4.1–§4.2; seed 004 §4B.2): the scan and one account's refresh (its
timing rules are ``token_refresh_timing``; the refresh a 401 on ``/v1`` asks for is
``token_refresh_request``).

Rotating refresh tokens are single-use (peers B.2): two refreshes of one account at once burn
it. So every refresh, in any process, first takes the lease ``cpr:lease:refresh:<account_id>``
(SET NX PX, re-entrant for its owner, compare-and-delete on release), re-reads the row after
acquiring it, and persists the new access token, its expiry and the rotated refresh token
before releasing. Token calls across all processes are capped by
``runtime_settings.refresh_concurrency`` (a Redis semaphore).

Which accounts are refreshed: those with a refresh token whose status is ``active`` or
``quota_exhausted``, and ``expired`` ones that still have a refresh time (an access token that
ran out or met a 401; a refresh that failed for good clears that time). A success brings an
expired account back into service (``quota_exhausted`` while its quota limit holds).
"""

from __future__ import annotations

import enum
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Case, F, TextField, Value, When

from common.clock import now as current_time
from proxy.clients import oauth
from proxy.metrics.recording import record_token_refresh
from proxy.models import Account, AccountStatus, RuntimeSettings
from proxy.runtime_state.refresh_leases import (
    refresh_lease_acquire,
    refresh_lease_release,
    refresh_lease_renew,
    refresh_leases_held,
)
from proxy.runtime_state.refresh_permits import PermitTimeout, refresh_permit
from proxy.services.runtime_settings import RUNTIME_SETTINGS_DEFAULTS
from proxy.services.token_refresh_timing import (
    next_refresh_time,
    recovery_delay_seconds,
    retry_delay_seconds,
)
from proxy.token_claims import token_claims, token_expiry

logger = logging.getLogger(__name__)

LEASE_TTL_MS = 300_000
MAX_ATTEMPTS = 5
CONFIRMATIONS_NEEDED = 2
# A scheduled refresh waits this long for a permit before counting the attempt as failed (the
# lease, renewed before each attempt, outlives pause + wait + call);
# a request waits less (its client is waiting), and at most this long for another refresher.
PERMIT_WAIT_SECONDS = 60.0
REQUEST_PERMIT_WAIT_SECONDS = 10.0
REQUEST_LEASE_WAIT_SECONDS = 30.0

REFRESHABLE_STATUSES = (AccountStatus.ACTIVE, AccountStatus.QUOTA_EXHAUSTED)
_ROW_FIELDS = (
    "id",
    "status",
    "access_token",
    "refresh_token",
    "access_token_expires_at",
    "next_refresh_at",
)


class RefreshResult(enum.StrEnum):
    REFRESHED = "refreshed"
    LEASE_BUSY = "lease_busy"  # another process is refreshing it
    NOT_ELIGIBLE = "not_eligible"  # no refresh token, or a status that is not refreshed
    NOT_DUE = "not_due"  # its next refresh moved into the future (refreshed meanwhile)
    TOKEN_CHANGED = "token_changed"  # its refresh token changed under the refresh
    EXPIRED = "expired"  # invalid grant, confirmed
    BANNED = "banned"  # reused refresh token or deactivated account, confirmed
    RETRY_LATER = "retry_later"  # transport failures: the next try is 10 minutes away


def refresh_settings() -> tuple[int, int]:
    """(refresh_margin_seconds, refresh_concurrency), read fresh: both are hot-updated."""
    row = RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID).values_list(
        "refresh_margin_seconds", "refresh_concurrency"
    )
    found = row.first()
    if found is None:
        return (
            RUNTIME_SETTINGS_DEFAULTS["refresh_margin_seconds"],
            RUNTIME_SETTINGS_DEFAULTS["refresh_concurrency"],
        )
    return int(found[0]), int(found[1])


def _concurrency() -> int:
    return refresh_settings()[1]


# ----------------------------------------------------------------------------- the row


@dataclass
class _Row:
    id: str
    status: str
    access_token: str
    refresh_token: str | None
    access_token_expires_at: datetime | None
    next_refresh_at: datetime | None

    @property
    def expires_at(self) -> datetime | None:
        return self.access_token_expires_at or token_expiry(self.access_token)

    @property
    def refreshable(self) -> bool:
        if not self.refresh_token:
            return False
        if self.status in REFRESHABLE_STATUSES:
            return True
        # Expired by a 401 or by its token running out, not by a refresh that failed for good
        # (which clears next_refresh_at).
        return self.status == AccountStatus.EXPIRED and self.next_refresh_at is not None

    @property
    def refreshable_on_request(self) -> bool:
        """An operator's "refresh now" also retries an account a refresh gave up on."""
        return bool(self.refresh_token) and self.status in (
            *REFRESHABLE_STATUSES,
            AccountStatus.EXPIRED,
        )


def _read(account_id: str) -> _Row | None:
    values = Account.objects.filter(pk=account_id).values(*_ROW_FIELDS).first()
    return _Row(**values) if values else None


def _new_owner() -> str:
    # JSON-encoded owner string, as the original writes it (spec §4.1).
    return json.dumps(f"runtime-token-refresh:{uuid.uuid4()}")


def token_refresh_owner() -> str:
    """A new lease owner, for another service that spends an account's refresh token."""
    return _new_owner()


def token_refresh_store(
    *, account_id: str, spent_refresh_token: str, tokens: oauth.TokenSet, now: datetime
) -> bool:
    """Store the answer of an exchange of ``spent_refresh_token`` on the account holding it
    (the caller holds its lease), as a refresh stores it. Returns whether it was stored."""
    row = _read(account_id)
    if row is None or row.refresh_token != spent_refresh_token:
        return False
    margin, _ = refresh_settings()
    stored, _ = _store_tokens(row, tokens, margin_seconds=margin, now=now)
    return stored


def _store_tokens(
    row: _Row, tokens: oauth.TokenSet, *, margin_seconds: int, now: datetime
) -> tuple[bool, datetime | None]:
    """Persist a successful refresh (one conditional UPDATE: only while the row still holds
    the refresh token that was spent). Returns (stored, new expiry)."""
    claims = token_claims(tokens.access_token)
    expires_at = claims.expires_at if claims else None
    if expires_at is None and tokens.expires_in is not None:
        expires_at = now + timedelta(seconds=tokens.expires_in)
    next_refresh = next_refresh_time(
        account_id=row.id, expires_at=expires_at, margin_seconds=margin_seconds, now=now
    )
    if expires_at is not None and expires_at > now:
        # A token living shorter than the margin is refreshed at half its life, not again at
        # once (which would spend a refresh token every scan).
        next_refresh = max(next_refresh, now + (expires_at - now) / 2)
    changes = {
        "access_token": tokens.access_token,
        "refresh_token": tokens.refresh_token or row.refresh_token,
        "access_token_expires_at": expires_at,
        "next_refresh_at": next_refresh,
        # A refreshed token serves again; disabled and banned accounts stay as they are
        # (spec §3.1), a reached quota limit keeps the account quota_exhausted.
        "status": Case(
            When(
                status=AccountStatus.EXPIRED,
                quota_limit_reached=True,
                then=Value(AccountStatus.QUOTA_EXHAUSTED.value),
            ),
            When(status=AccountStatus.EXPIRED, then=Value(AccountStatus.ACTIVE.value)),
            default=F("status"),
            output_field=TextField(),
        ),
        "updated_at": now,
    }
    if claims and claims.plan_type:
        changes["plan_type"] = claims.plan_type
    stored = Account.objects.filter(pk=row.id, refresh_token=row.refresh_token).update(**changes)
    return bool(stored), expires_at


def _call_token_endpoint(refresh_token: str, *, permit_wait: float) -> oauth.TokenSet:
    try:
        with refresh_permit(limit=_concurrency, wait_seconds=permit_wait):
            return oauth.refresh_tokens(refresh_token)
    except PermitTimeout:
        raise oauth.OAuthTransportError("no refresh permit became free") from None


# ----------------------------------------------------------------------------- one account


def token_refresh_account(
    *,
    account_id: str,
    force: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = current_time,  # not timezone.now: bound at import
    max_attempts: int = MAX_ATTEMPTS,
    permit_wait_seconds: float = PERMIT_WAIT_SECONDS,
) -> RefreshResult:
    """Refresh one account's tokens (spec §4.2), under its lease.

    Up to 5 attempts, 5/15/45/135 s apart (stable ±30 % jitter); before each the row is read
    again and the refresh stops if the account may no longer be refreshed, its next refresh
    moved into the future (someone refreshed it), or its refresh token changed. ``force`` is an
    operator's "refresh now": it ignores the refresh time and also retries an expired account.
    A permanent answer (banned / invalid grant) must be seen twice before the status is
    written; transport failures leave the status alone and schedule the next try 10 minutes
    (±20 %) later. ``max_attempts`` below 5 shortens the walk for a caller that waits for the
    answer (the admin API's refresh: 2, so a permanent answer can still be confirmed), and
    ``permit_wait_seconds`` bounds its wait for a refresh permit per attempt: with the OAuth
    client's timeout, the walk's longest time is known. Returns what happened; never raises
    for an OAuth failure.
    """
    owner = _new_owner()
    if not refresh_lease_acquire(account_id=account_id, owner=owner, ttl_ms=LEASE_TTL_MS):
        record_token_refresh(RefreshResult.LEASE_BUSY)
        return RefreshResult.LEASE_BUSY
    try:
        result = _refresh_under_lease(
            account_id,
            owner,
            force=force,
            sleep=sleep,
            clock=clock,
            max_attempts=max_attempts,
            permit_wait=permit_wait_seconds,
        )
    finally:
        refresh_lease_release(account_id=account_id, owner=owner)
    record_token_refresh(result)
    return result


def _stop_reason(row: _Row | None, *, spent: str | None, force: bool, now: datetime):
    if row is None or not (row.refreshable_on_request if force else row.refreshable):
        return RefreshResult.NOT_ELIGIBLE
    if spent is not None and row.refresh_token != spent:
        return RefreshResult.TOKEN_CHANGED
    if not force and row.next_refresh_at is not None and row.next_refresh_at > now:
        return RefreshResult.NOT_DUE
    return None


def _refresh_under_lease(
    account_id: str,
    owner: str,
    *,
    force: bool,
    sleep: Callable[[float], None],
    clock: Callable[[], datetime],
    max_attempts: int = MAX_ATTEMPTS,
    permit_wait: float = PERMIT_WAIT_SECONDS,
) -> RefreshResult:
    row = _read(account_id)
    stop = _stop_reason(row, spent=None, force=force, now=clock())
    if stop is not None:
        if stop == RefreshResult.NOT_ELIGIBLE and row is not None and row.next_refresh_at:
            Account.objects.filter(pk=account_id, next_refresh_at=row.next_refresh_at).update(
                next_refresh_at=None
            )
        return stop
    # _stop_reason let it through: the row exists and is refreshable (it has a refresh token).
    assert row is not None and row.refresh_token is not None
    refresh_token = row.refresh_token
    seen: Counter[str] = Counter()
    for attempt in range(1, max_attempts + 1):
        if attempt > 1:
            sleep(retry_delay_seconds(account_id, attempt))
            # Renew, never re-take: a lease that expired, was flushed or is someone else's now
            # means another refresh may be running with the same refresh token; stop here.
            if not refresh_lease_renew(account_id=account_id, owner=owner, ttl_ms=LEASE_TTL_MS):
                logger.warning("token refresh of %s: its lease was lost; stopping", account_id)
                return RefreshResult.LEASE_BUSY
            row = _read(account_id)
            # The first attempt already passed the due check; someone else refreshing meanwhile
            # shows as a changed refresh token.
            stop = _stop_reason(row, spent=refresh_token, force=force, now=clock())
            if stop == RefreshResult.NOT_DUE:
                stop = None
            if stop is not None:
                return stop
            assert row is not None  # as above
        try:
            tokens = _call_token_endpoint(refresh_token, permit_wait=permit_wait)
        except oauth.OAuthError as error:
            logger.warning(
                "token refresh of %s, attempt %s/%s: %s", account_id, attempt, max_attempts, error
            )
            if error.permanent:
                seen[error.outcome] += 1
                if seen[error.outcome] >= CONFIRMATIONS_NEEDED:
                    return _persist_permanent(row, error.outcome, now=clock())
            continue
        margin, _ = refresh_settings()
        stored, _ = _store_tokens(row, tokens, margin_seconds=margin, now=clock())
        if not stored:
            # An operator rotated the tokens meanwhile: theirs win.
            logger.warning("token refresh of %s: its tokens changed meanwhile", account_id)
            return RefreshResult.TOKEN_CHANGED
        logger.info("token refresh of %s: refreshed", account_id)
        return RefreshResult.REFRESHED
    now = clock()
    Account.objects.filter(pk=account_id, refresh_token=refresh_token).update(
        next_refresh_at=now + timedelta(seconds=recovery_delay_seconds(account_id)),
        updated_at=now,
    )
    return RefreshResult.RETRY_LATER


def _persist_permanent(row: _Row, outcome: str, *, now: datetime) -> RefreshResult:
    status = AccountStatus.BANNED if outcome == "banned" else AccountStatus.EXPIRED
    Account.objects.filter(
        pk=row.id,
        refresh_token=row.refresh_token,
        status__in=(*REFRESHABLE_STATUSES, AccountStatus.EXPIRED),
    ).update(status=status, next_refresh_at=None, updated_at=now)
    logger.warning("token refresh of %s: %s (confirmed)", row.id, status.value)
    return RefreshResult.BANNED if outcome == "banned" else RefreshResult.EXPIRED


# ----------------------------------------------------------------------------- the scan


@dataclass
class ScanReport:
    due: list[str]
    scheduled: int  # next_refresh_at values written
    cleared: int  # ineligible accounts whose next_refresh_at was cleared
    busy: int  # due, but a refresh is already running


def token_refresh_scan(*, now: datetime) -> ScanReport:
    """Compute every account's next refresh (spec §4.1), persist it when it changed, and return
    the accounts due now (their lease not held) for the caller to enqueue.

    Each write is conditional on the value read, so a refresh finishing meanwhile is never
    overwritten.
    """
    margin, _ = refresh_settings()
    due: list[str] = []
    scheduled = cleared = 0
    for values in Account.objects.values(*_ROW_FIELDS).order_by("added_at", "id").iterator():
        row = _Row(**values)
        if not row.refreshable:
            if row.next_refresh_at is not None:
                cleared += Account.objects.filter(
                    pk=row.id, next_refresh_at=row.next_refresh_at
                ).update(next_refresh_at=None)
            continue
        if row.next_refresh_at is not None and row.next_refresh_at > now:
            continue
        target = next_refresh_time(
            account_id=row.id, expires_at=row.expires_at, margin_seconds=margin, now=now
        )
        if target != row.next_refresh_at:
            scheduled += Account.objects.filter(
                pk=row.id,
                next_refresh_at=row.next_refresh_at,
                refresh_token=row.refresh_token,
            ).update(next_refresh_at=target)
        if target <= now:
            due.append(row.id)
    held = refresh_leases_held(due)
    return ScanReport(
        due=[account_id for account_id in due if account_id not in held],
        scheduled=scheduled,
        cleared=cleared,
        busy=len(held),
    )
