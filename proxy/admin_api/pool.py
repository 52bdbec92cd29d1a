"""The one place the admin API reaches into the proxy's request-path code: the scheduler's
eligibility rule and slots, the Codex client (connection test, usage, models) and the account
state transitions a test outcome causes.

Everything here is a thin adapter over functions that already serve ``/v1`` and the upkeep
jobs, so the admin API never grows a second copy of them; when the request path is reorganised
(its client, its account rules), only this module is re-pointed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import requests
from django.conf import settings

from proxy import redis_keys
from proxy.background import run_coroutine
from proxy.clients import codex
from proxy.dispatch import accounts as pool_accounts
from proxy.dispatch.failures import FailureKind, classify_failed_event, classify_http_failure
from proxy.dispatch.sse import OUTPUT_DELTA_EVENTS, SSEScanner
from proxy.dispatch.upstream_request import ClientIdentity, render_fingerprint, upstream_headers
from proxy.loop_resources import database_connection
from proxy.quota import QuotaSnapshot, apply_snapshot, snapshot_from_usage
from proxy.runtime_state import redis_client
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_update
from proxy.services.model_refresh import fetch_models

# The quota job's own header builder for the usage call (private there; this module is the one
# place that would follow it when the request path gets a single header builder).
from proxy.services.quota_refresh import _usage_headers as usage_headers
from proxy.services.upkeep_accounts import current_fingerprint

# The scheduler's verdict names (spec §3.2), re-exported for the eligibility explanation.
ineligibility = pool_accounts.ineligibility
QUOTA_LIMITED = pool_accounts.QUOTA_LIMITED
NOT_ACTIVE = pool_accounts.NOT_ACTIVE
TOKEN_EXPIRED = pool_accounts.TOKEN_EXPIRED
CLOUDFLARE_COOLDOWN = pool_accounts.CLOUDFLARE_COOLDOWN
token_expiry = pool_accounts.jwt_expiry

TEST_INSTRUCTIONS = "reply with ok"
TEST_INPUT = "hi"
TEST_READ_CAP = 256 * 1024


@dataclass(frozen=True)
class UpstreamAccount:
    """What an upstream call needs of an account (the request path's AccountView subset)."""

    id: str
    access_token: str
    chatgpt_account_id: str | None
    email: str | None = None
    plan_type: str | None = None


# ------------------------------------------------------------------ concurrency slots


def slots_in_use(account_ids: list[str], *, now_ms: int | None = None) -> dict[str, int]:
    """Live concurrency slots per account (the scheduler's ZSETs; members older than the slot
    TTL belong to crashed workers and are not counted). One pipeline."""
    if not account_ids:
        return {}
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    oldest = now_ms - settings.SCHEDULER_SLOT_TTL_SECONDS * 1000
    pipeline = redis_client().pipeline(transaction=False)
    for account_id in account_ids:
        pipeline.zcount(redis_keys.account_slots(account_id), oldest, "+inf")
    return dict(zip(account_ids, (int(count) for count in pipeline.execute()), strict=True))


# ------------------------------------------------------------------ usage (quota)


class UsageUnavailable(Exception):
    """The usage endpoint gave no snapshot; ``status`` is its HTTP status when it answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class UsageReading:
    snapshot: QuotaSnapshot
    raw: dict[str, Any]


async def _read_usage(
    account: UpstreamAccount, *, fingerprint: dict, now: datetime
) -> UsageReading:
    headers = usage_headers(account, fingerprint)
    last_status = None
    for url in codex.usage_urls():
        try:
            response = await codex.get(url, headers=headers)
            try:
                last_status = response.status
                if response.status == 404:
                    continue
                if response.status >= 300:
                    raise UsageUnavailable(
                        f"usage endpoint answered {response.status}", status=response.status
                    )
                payload = await response.json(content_type=None)
            finally:
                response.release()
        except (*codex.TRANSPORT_ERRORS, ValueError) as error:
            raise UsageUnavailable(f"usage endpoint unreachable ({type(error).__name__})") from None
        if not isinstance(payload, dict) or "rate_limit" not in payload:
            raise UsageUnavailable("the usage endpoint's answer has no rate_limit")
        return UsageReading(snapshot=snapshot_from_usage(payload, now=now), raw=payload)
    raise UsageUnavailable("no usage endpoint found", status=last_status)


def usage_read_and_apply(
    account: UpstreamAccount, *, now: datetime, apply: bool = True
) -> UsageReading:
    """Read the account's usage now and (``apply``) store the snapshot the way the quota job
    does (spec §4.3: limit flag, cooldown, active ↔ quota_exhausted, plan, usage window).
    Raises UsageUnavailable."""
    fingerprint = current_fingerprint()  # read before the loop: the ORM stays out of it

    async def read_and_apply() -> UsageReading:
        deadline = settings.ADMIN_UPSTREAM_DEADLINE_SECONDS
        try:
            # A web worker waits for this answer: a hung upstream must not hold it for long.
            reading = await asyncio.wait_for(
                _read_usage(account, fingerprint=fingerprint, now=now), deadline
            )
        except TimeoutError:
            raise UsageUnavailable(
                f"no answer from the usage endpoint within {deadline} s"
            ) from None
        if apply:
            await apply_snapshot(account.id, reading.snapshot, now=now)
        return reading

    return run_coroutine(read_and_apply())


# ------------------------------------------------------------------ models


def account_models(account: UpstreamAccount, *, now: datetime) -> list[dict]:
    """The models the account's plan offers: the plan's snapshot, else one fetch with this
    account (stored as the plan's snapshot when the account has a plan)."""
    snapshots = model_snapshots_get_all()
    if account.plan_type and snapshots.get(account.plan_type, {}).get("models"):
        return snapshots[account.plan_type]["models"]
    with requests.Session() as session:
        session.trust_env = False
        session.headers.clear()
        entries = fetch_models(account, current_fingerprint(), session)
    if entries and account.plan_type:
        snapshot = {"models": entries, "fetchedAt": now.isoformat()}
        # Only this plan changes; whatever another writer stored meanwhile stays.
        model_snapshots_update(lambda current: {**current, account.plan_type: snapshot})
    return entries


# ------------------------------------------------------------------ connection test


@dataclass
class _TestRequest:
    """The parts of a dispatch request the header builder reads."""

    request_id: str = field(default_factory=lambda: f"admin_test_{uuid.uuid4().hex}")
    client_identity: ClientIdentity = field(default_factory=ClientIdentity)
    subagent: str | None = None


def connection_test_body(model: str) -> dict:
    return {
        "model": model,
        "instructions": TEST_INSTRUCTIONS,
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": TEST_INPUT}],
            }
        ],
        "stream": True,
        "store": False,
    }


async def _mark_success(account_id: str, *, now: datetime) -> None:
    async with database_connection() as connection:
        await connection.execute(
            "update accounts set status = case when quota_limit_reached"
            " then 'quota_exhausted' else 'active' end, updated_at = %s"
            " where id = %s and status <> 'disabled'",
            [now, account_id],
        )


async def _apply_failure(account: UpstreamAccount, failure, *, disabled: bool, now) -> None:
    """The account effect of a failed test (spec §6.3), never on a disabled account."""
    if disabled:
        return
    kind = failure.kind
    if kind is FailureKind.QUOTA_EXHAUSTED:
        await pool_accounts.mark_quota_exhausted(account.id, now=now)
    elif kind is FailureKind.RATE_LIMITED:
        await pool_accounts.mark_rate_limited(
            account.id, now=now, retry_after_seconds=failure.retry_after_seconds
        )
    elif kind is FailureKind.EXPIRED:
        await pool_accounts.mark_expired(account.id, token=account.access_token, now=now)
    elif kind is FailureKind.BANNED:
        await pool_accounts.mark_banned(account.id, token=account.access_token, now=now)


async def connection_test_events(
    account: UpstreamAccount, *, model: str, disabled: bool, fingerprint: dict, clock
) -> AsyncIterator[dict]:
    """The events of a connection test (spec §6.3): ``test_start``, ``request``, ``content``…,
    then ``test_complete`` or ``error``. The outcome adjusts the account's status."""
    body = connection_test_body(model)
    yield {
        "type": "test_start",
        "model": model,
        "text": f"Testing {account.email or account.id} with {model}",
    }
    yield {"type": "request", "payload": body}
    headers = upstream_headers(
        account=account, request=_TestRequest(), fingerprint=render_fingerprint(fingerprint)
    )
    # The whole test, first byte to last, ends by its deadline: a hung or dripping upstream
    # must not hold the web worker's stream open indefinitely.
    limit = settings.ADMIN_UPSTREAM_DEADLINE_SECONDS
    deadline = time.monotonic() + limit

    def remaining() -> float:
        return max(0.0, deadline - time.monotonic())

    timed_out = {"type": "error", "error": f"no complete answer within {limit} s; test stopped"}
    try:
        response = await asyncio.wait_for(
            codex.post(codex.responses_url(), body=json.dumps(body).encode(), headers=headers),
            remaining(),
        )
    except TimeoutError:
        yield timed_out
        return
    except codex.TRANSPORT_ERRORS as error:
        yield {"type": "error", "error": f"upstream unreachable ({type(error).__name__})"}
        return
    if response.status != 200:
        try:
            error_body = await asyncio.wait_for(codex.read_error_body(response), remaining())
        except (TimeoutError, *codex.TRANSPORT_ERRORS):
            error_body = b""
        failure = classify_http_failure(
            response.status, codex.lowercase_headers(response), error_body
        )
        await _apply_failure(account, failure, disabled=disabled, now=clock())
        yield {
            "type": "error",
            "error": f"upstream answered {response.status}: {failure.short_text()}",
        }
        return
    scanner = SSEScanner()
    read = 0
    try:
        while chunk := await asyncio.wait_for(response.content.readany(), remaining()):
            read += len(chunk)
            for frame in scanner.feed(chunk):
                if frame.event in OUTPUT_DELTA_EVENTS:
                    text = _delta_text(frame)
                    if text and read <= TEST_READ_CAP:
                        yield {"type": "content", "text": text}
                elif frame.event in ("response.completed", "response.incomplete"):
                    await _mark_success(account.id, now=clock())
                    yield {"type": "test_complete", "success": True}
                    return
                elif frame.event in ("response.failed", "error"):
                    failure = classify_failed_event(_json(frame))
                    await _apply_failure(account, failure, disabled=disabled, now=clock())
                    yield {"type": "error", "error": failure.short_text() or "response failed"}
                    return
    except TimeoutError:
        yield timed_out
        return
    except codex.TRANSPORT_ERRORS as error:
        yield {"type": "error", "error": f"the stream broke ({type(error).__name__})"}
        return
    finally:
        response.release()
    yield {"type": "error", "error": "the stream ended without response.completed"}


def _json(frame) -> dict:
    try:
        value = frame.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _delta_text(frame) -> str:
    delta = _json(frame).get("delta")
    return delta if isinstance(delta, str) else ""
