"""The token refresh a 401 on ``/v1`` asks for (peers B.2): one attempt for the account whose
access token just failed, under the same lease as the scheduled refresher
(``proxy.services.token_refresh``), so a refresh already running elsewhere is waited for, never
repeated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from common.clock import monotonic
from common.clock import now as current_time
from proxy.clients import oauth
from proxy.runtime_state.refresh_leases import refresh_lease_acquire, refresh_lease_release
from proxy.services.token_refresh import (
    LEASE_TTL_MS,
    REFRESHABLE_STATUSES,
    REQUEST_LEASE_WAIT_SECONDS,
    REQUEST_PERMIT_WAIT_SECONDS,
    _call_token_endpoint,
    _new_owner,
    _read,
    _Row,
    _store_tokens,
    refresh_settings,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FreshToken:
    access_token: str
    expires_at: datetime | None


def token_refresh_for_request(
    *, account_id: str, failed_token: str, clock: Callable[[], datetime] = current_time
) -> FreshToken | None:
    """One refresh for an account whose access token ``failed_token`` just met a 401.

    A refresh already running elsewhere is waited for (and its token used), never repeated;
    a token someone refreshed meanwhile is used as it is. One attempt, no retries: the client
    is waiting. Returns the token to retry with, or None (the caller demotes the account, and
    the background refresher, whose rules confirm permanent failures, takes over).
    """
    owner = _new_owner()
    deadline = monotonic() + REQUEST_LEASE_WAIT_SECONDS
    pause = 0.05
    while not refresh_lease_acquire(account_id=account_id, owner=owner, ttl_ms=LEASE_TTL_MS):
        if monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
        row = _read(account_id)
        if row is not None and row.access_token != failed_token and _serves(row):
            return FreshToken(row.access_token, row.expires_at)
    try:
        row = _read(account_id)
        if row is None:
            return None
        if row.access_token != failed_token:
            return FreshToken(row.access_token, row.expires_at) if _serves(row) else None
        if not row.refresh_token or row.status not in REFRESHABLE_STATUSES:
            return None
        try:
            tokens = _call_token_endpoint(
                row.refresh_token, permit_wait=REQUEST_PERMIT_WAIT_SECONDS
            )
        except oauth.OAuthError as error:
            logger.warning("token refresh of %s after a 401: %s", account_id, error)
            return None
        margin, _ = refresh_settings()
        stored, expires_at = _store_tokens(row, tokens, margin_seconds=margin, now=clock())
        if not stored:
            return None
        logger.info("token refresh of %s after a 401: refreshed", account_id)
        return FreshToken(tokens.access_token, expires_at)
    finally:
        refresh_lease_release(account_id=account_id, owner=owner)


def _serves(row: _Row) -> bool:
    return row.status in REFRESHABLE_STATUSES
