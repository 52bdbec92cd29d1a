"""Refresh-and-retry on a 401 (peers B.2: a 401 is not a dead account).

When an attempt fails because the upstream rejected the access token, and the account has a
refresh token, the dispatcher asks for one refresh of that account (under the same Redis lease
as the scheduled refresher: a refresh already running elsewhere is waited for, not repeated)
and, with the fresh token, tries the same account once more before demoting it. This happens
before any byte reached the client. A freshly refreshed token rejected too means the account
itself is refused: it is demoted without a new refresh being scheduled (no refresh-and-fail
loop every scan); an operator's "refresh now" or new tokens bring it back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeGuard

from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from proxy.accounts import AccountView
from proxy.domain.failures import AttemptFailure, FailureKind
from proxy.services.account_state import account_mark_expired

if TYPE_CHECKING:
    from proxy.services.token_refresh_request import FreshToken

logger = logging.getLogger(__name__)


def wants_token_refresh(outcome: object, account: AccountView) -> TypeGuard[AttemptFailure]:
    """Whether ``outcome`` is a rejected access token that a refresh might cure."""
    return (
        isinstance(outcome, AttemptFailure)
        and outcome.kind == FailureKind.EXPIRED
        and account.has_refresh_token
    )


def _refresh_in_thread(account_id: str, failed_token: str) -> FreshToken | None:
    from proxy.services.token_refresh_request import token_refresh_for_request

    try:
        return token_refresh_for_request(account_id=account_id, failed_token=failed_token)
    finally:
        connection.close()  # this worker thread's connection goes back to the pool


async def refresh_for_retry(account: AccountView) -> bool:
    """Refresh ``account``'s token; on success the view carries the new token (the retry uses
    it) and True is returned. Never raises: a failed refresh leaves the 401 to its usual
    effect."""
    try:
        fresh = await sync_to_async(_refresh_in_thread, thread_sensitive=False)(
            account.id, account.access_token
        )
    except Exception:
        logger.warning("token refresh after a 401 failed for %s", account.id, exc_info=True)
        return False
    if fresh is None:
        return False
    account.access_token = fresh.access_token
    account.access_token_expires_at = fresh.expires_at
    return True


async def give_up_after_refresh(account: AccountView) -> None:
    """The retry with a fresh token met a 401 again: expired, and no refresh scheduled."""
    await account_mark_expired(
        account.id, token=account.access_token, now=timezone.now(), schedule_refresh=False
    )
