"""The one place the admin API reaches into the proxy's request-path code: the account rules
(``proxy.accounts``) and slots, the Codex client (``proxy.clients.codex``: connection test,
usage, models, with its one header builder) and the account state transitions a test outcome
causes (``proxy.services.account_state``).

Everything here is a thin adapter over functions that already serve ``/v1`` and the upkeep
jobs, so the admin API never grows a second copy of them; when the request path is reorganised,
only this module is re-pointed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from common import clock
from proxy import accounts as pool_accounts
from proxy import redis_keys
from proxy.background import run_coroutine
from proxy.clients import codex
from proxy.domain.failures import FailureKind, classify_failed_event, failure_from_error
from proxy.domain.sse import OUTPUT_DELTA_EVENTS, SSEScanner
from proxy.domain.upstream_request import ClientIdentity, request_headers
from proxy.loop_resources import database_connection
from proxy.quota import QuotaSnapshot, UsageFetchError, fetch_usage_payload, snapshot_from_usage
from proxy.runtime_state import redis_client
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_update
from proxy.services import account_state
from proxy.services.account_quota import account_quota_apply
from proxy.services.model_refresh import fetch_models
from proxy.services.quota_refresh import usage_headers
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
    now_ms = now_ms if now_ms is not None else clock.now_ms()
    oldest = now_ms - settings.SCHEDULER_SLOT_TTL_SECONDS * 1000
    pipeline = redis_client().pipeline(transaction=False)
    for account_id in account_ids:
        pipeline.zcount(redis_keys.account_slots(account_id), oldest, "+inf")
    return dict(zip(account_ids, (int(count) for count in pipeline.execute()), strict=True))


# ------------------------------------------------------------------ usage (quota)


# The usage endpoint gave no snapshot; ``status`` is its HTTP status when it answered.
UsageUnavailable = UsageFetchError


@dataclass(frozen=True)
class UsageReading:
    snapshot: QuotaSnapshot
    raw: dict[str, Any]


async def _read_usage(
    account: UpstreamAccount, *, fingerprint: dict, now: datetime
) -> UsageReading:
    payload = await fetch_usage_payload(usage_headers(account, fingerprint))
    return UsageReading(snapshot=snapshot_from_usage(payload, now=now), raw=payload)


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
            await account_quota_apply(account.id, reading.snapshot, now=now)
        return reading

    return run_coroutine(read_and_apply())


# ------------------------------------------------------------------ models


def account_models(account: UpstreamAccount, *, now: datetime) -> list[dict]:
    """The models the account's plan offers: the plan's snapshot, else one fetch with this
    account (stored as the plan's snapshot when the account has a plan)."""
    snapshots = model_snapshots_get_all()
    if account.plan_type and snapshots.get(account.plan_type, {}).get("models"):
        return snapshots[account.plan_type]["models"]
    entries = run_coroutine(fetch_models(account, current_fingerprint()))
    plan = account.plan_type
    if entries and plan:
        snapshot = {"models": entries, "fetchedAt": now.isoformat()}
        # Only this plan changes; whatever another writer stored meanwhile stays.
        model_snapshots_update(lambda current: {**current, plan: snapshot})
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
        await account_state.account_mark_quota_exhausted(account.id, now=now)
    elif kind is FailureKind.RATE_LIMITED:
        await account_state.account_mark_rate_limited(
            account.id, now=now, retry_after_seconds=failure.retry_after_seconds
        )
    elif kind is FailureKind.EXPIRED:
        await account_state.account_mark_expired(account.id, token=account.access_token, now=now)
    elif kind is FailureKind.BANNED:
        await account_state.account_mark_banned(account.id, token=account.access_token, now=now)


async def connection_test_events(
    account: UpstreamAccount,
    *,
    model: str,
    disabled: bool,
    fingerprint: dict,
    now: Callable[[], datetime],
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
    test_request = _TestRequest()
    headers = codex.build_headers(
        codex.Call.RESPONSES,
        fingerprint=codex.render_fingerprint(fingerprint),
        credentials=codex.Credentials.of(account),
        request_headers=request_headers(
            client=test_request.client_identity,
            account_id=account.id,
            request_id=test_request.request_id,
            subagent=test_request.subagent,
        ),
    )
    # The whole test, first byte to last, ends by its deadline: a hung or dripping upstream
    # must not hold the web worker's stream open indefinitely.
    limit = settings.ADMIN_UPSTREAM_DEADLINE_SECONDS
    deadline = clock.monotonic() + limit

    def remaining() -> float:
        return max(0.0, deadline - clock.monotonic())

    timed_out = {"type": "error", "error": f"no complete answer within {limit} s; test stopped"}
    try:
        # Connecting, and reading an error answer's body, count against the deadline too.
        stream = await asyncio.wait_for(
            codex.open_responses(body=json.dumps(body).encode(), headers=headers, retry_5xx=False),
            remaining(),
        )
    except TimeoutError:
        yield timed_out
        return
    except codex.CodexHTTPError as error:
        failure = failure_from_error(error)
        await _apply_failure(account, failure, disabled=disabled, now=now())
        yield {
            "type": "error",
            "error": f"upstream answered {error.status}: {failure.short_text()}",
        }
        return
    except codex.CodexTransportError as error:
        yield {"type": "error", "error": f"upstream unreachable ({error.detail})"}
        return
    scanner = SSEScanner()
    read = 0
    chunks = stream.chunks()
    try:
        while chunk := await asyncio.wait_for(anext(chunks, b""), remaining()):
            read += len(chunk)
            for frame in scanner.feed(chunk):
                if frame.event in OUTPUT_DELTA_EVENTS:
                    text = _delta_text(frame)
                    if text and read <= TEST_READ_CAP:
                        yield {"type": "content", "text": text}
                elif frame.event in ("response.completed", "response.incomplete"):
                    await _mark_success(account.id, now=now())
                    yield {"type": "test_complete", "success": True}
                    return
                elif frame.event in ("response.failed", "error"):
                    failure = classify_failed_event(_json(frame))
                    await _apply_failure(account, failure, disabled=disabled, now=now())
                    yield {"type": "error", "error": failure.short_text() or "response failed"}
                    return
    except TimeoutError:
        yield timed_out
        return
    except codex.CodexTransportError as error:
        yield {"type": "error", "error": f"the stream broke ({error.detail})"}
        return
    finally:
        stream.release()
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
