"""One attempt on one account (spec §3.5): the pacing, the usage check of a just-lifted quota,
then the strategy's upstream call with this account's headers and cookies.

The dispatcher decides which account and what to do with the outcome; this module only makes
the call. The ``Set-Cookie`` values the answer carried are handed back in ``cookies`` (the
ledger stores them with the report), whatever the outcome.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from proxy.accounts import AccountView
from proxy.clients import codex
from proxy.dispatch.account_effects import quota_still_blocked
from proxy.dispatch.attempts import Strategy
from proxy.dispatch.cookies import captured_cookies, cookie_header
from proxy.domain.dispatch_types import Committed, CompactResult, DispatchRequest
from proxy.domain.failures import AttemptFailure, FailureKind
from proxy.domain.slots import Slot
from proxy.domain.upstream_request import request_headers
from proxy.scheduling import scheduler


def _headers(
    sent: DispatchRequest, account: AccountView, call: codex.Call, url: str
) -> list[tuple[str, str]]:
    return codex.build_headers(
        call,
        fingerprint=sent.fingerprint,
        credentials=codex.Credentials.of(account),
        request_headers=request_headers(
            client=sent.client_identity,
            account_id=account.id,
            request_id=sent.request_id,
            subagent=sent.subagent,
        ),
        cookie=cookie_header(account.cookies, url=url, now=timezone.now()),
    )


async def call_account(
    strategy: Strategy,
    *,
    sent: DispatchRequest,
    slot: Slot,
    attempt_index: int,
    cookies: list[tuple[str, tuple[dict[str, Any], ...]]],
) -> Committed | CompactResult | AttemptFailure:
    """``sent`` (the request as this attempt sends it: the owner's turn state or the full
    replay) on ``slot``'s account; returns what the strategy returns, or the quota check's
    failure (``answered=False``: no upstream call was made)."""
    account = slot.account
    if strategy.paced:
        await scheduler.pace(slot, sent.scheduler_settings.request_interval_ms)
    if account.quota_verify_required and await quota_still_blocked(account, sent.fingerprint):
        return AttemptFailure(
            FailureKind.RATE_LIMITED,
            detail="rate-limited: Upstream usage quota still reports limit_reached",
            answered=False,
        )
    url = codex.compact_url() if strategy.call is codex.Call.COMPACT else codex.responses_url()
    cookies_seen: list[str] = []
    try:
        return await strategy.run(
            sent, slot, attempt_index, _headers(sent, account, strategy.call, url), cookies_seen
        )
    finally:
        if cookies_seen:
            found = captured_cookies(cookies_seen, url=url, now=timezone.now())
            if found:
                cookies.append((account.id, tuple(found)))
