"""One client request through the account pool (spec §3.3–§3.6, §1.4).

The candidate ledger hands out one account (with a concurrency slot) at a time; each is tried
at most once, 5xx answers twice more on the same account first. A failure that says something
about the account changes its state in PostgreSQL and the request moves on; any other failure
is returned to the client. A stream reaches the client only once the upstream shows real output
(or a terminal event), so failures that arrive right after ``response.created`` can still move
to another account; after the first byte there is no rotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

import aiohttp
from django.conf import settings
from django.utils import timezone

from proxy.clients import codex
from proxy.dispatch import accounts as account_pool
from proxy.dispatch import scheduler
from proxy.dispatch.accounts import AccountView
from proxy.dispatch.candidates import CandidateLedger
from proxy.dispatch.cookies import captured_cookies, cookie_header
from proxy.dispatch.failures import (
    NO_ACCOUNTS,
    AttemptFailure,
    ClientError,
    FailureKind,
    classify_failed_event,
    classify_http_failure,
    client_error_for,
)
from proxy.dispatch.scheduler import SchedulerSettings, Slot
from proxy.dispatch.sse import (
    DONE_FRAME,
    OUTPUT_DELTA_EVENTS,
    OUTPUT_ITEM_EVENTS,
    SUCCESS_TERMINAL_EVENTS,
    TERMINAL_EVENTS,
    Frame,
    SSEFrameTooLarge,
    SSEScanner,
    stream_disconnected_event,
)
from proxy.dispatch.token_retry import (
    give_up_after_refresh,
    refresh_for_retry,
    wants_token_refresh,
)
from proxy.dispatch.upstream_request import (
    COMPACT_OMITTED_HEADERS,
    ClientIdentity,
    FingerprintHeaders,
    compact_body,
    scoped_body,
    upstream_headers,
)
from proxy.models_catalog import Catalog
from proxy.quota import UsageFetchError, apply_snapshot, fetch_usage

SAME_ACCOUNT_5XX_RETRIES = 2
COMMIT_PREFETCH_LIMIT = 64 * 1024
SAFE_UPSTREAM_HEADERS = (
    "openai-model",
    "x-models-etag",
    "x-reasoning-included",
    "openai-processing-ms",
)
ALL_BUSY = ClientError(
    503,
    "server_error",
    "no_available_accounts",
    "All accounts are at their concurrency limit. Retry the request.",
)


@dataclass
class DispatchRequest:
    """Everything the dispatcher needs to know about one validated client request."""

    request_id: str
    route: str
    requested_model: str
    model: str
    body: dict
    stream: bool
    scheduler_settings: SchedulerSettings
    fingerprint: FingerprintHeaders
    catalog: Catalog  # plan allowlists of the model
    accounts: list[AccountView]  # the candidates, read together with the client key
    client_identity: ClientIdentity = field(default_factory=ClientIdentity)
    client_api_key_id: str | None = None
    client_ip: str | None = None
    user_agent: str | None = None
    subagent: str | None = None
    started_at: datetime = field(default_factory=timezone.now)
    started_monotonic: float = field(default_factory=time.monotonic)

    @property
    def previous_response_id(self) -> str | None:
        value = self.body.get("previous_response_id")
        return value if isinstance(value, str) and value else None

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started_monotonic) * 1000)


@dataclass
class StreamProgress:
    """What the scanner learnt from the upstream stream so far."""

    response_id: str | None = None
    first_token_ms: int | None = None
    terminal_event: str | None = None
    terminal: dict | None = None
    done_seen: bool = False
    output_seen: bool = False


@dataclass
class AttemptNote:
    index: int
    account_id: str
    failure: AttemptFailure | None = None


@dataclass
class Committed:
    """An upstream stream that reached real output (or a terminal event) on ``slot``'s account."""

    slot: Slot
    attempt_index: int
    response: aiohttp.ClientResponse
    upstream_headers: dict[str, str]
    buffered: list[bytes]
    scanner: SSEScanner
    progress: StreamProgress
    buffered_frames: list[Frame] = field(default_factory=list)

    @property
    def account(self) -> AccountView:
        return self.slot.account


@dataclass
class CompactResult:
    slot: Slot
    attempt_index: int
    upstream_headers: dict[str, str]
    body: bytes
    payload: object

    @property
    def account(self) -> AccountView:
        return self.slot.account


class Dispatch:
    """Runs one request; afterwards ``notes`` and the flags below tell the ledger what happened."""

    def __init__(self, request: DispatchRequest):
        self.request = request
        self.notes: list[AttemptNote] = []
        self.final_failure: AttemptFailure | None = None
        self.client_error: ClientError | None = None
        self.exhausted_count = 0
        self.captured_cookies: list[tuple[str, list[dict]]] = []
        # How a committed stream ended.
        self.client_cancelled = False
        self.synthetic_failure = False
        self.stream_error: str | None = None
        self._url = codex.responses_url()
        self._compact = False
        # A 401 asks for one token refresh per request, not one per account it walks through
        # (each may wait for a lease and the token endpoint; the client is waiting). Later
        # 401s demote their account for the scheduled refresher.
        self._token_refresh_spent = False

    @property
    def transport(self) -> str:
        """How the upstream was called: ``http`` for compact, ``http_sse`` otherwise."""
        return "http" if self._compact else "http_sse"

    # ------------------------------------------------------------------------- candidates

    async def _ledger(self) -> CandidateLedger:
        eligible = await account_pool.refresh_and_filter_eligible(
            self.request.accounts, now=timezone.now()
        )
        eligible = [
            account
            for account in eligible
            if self.request.catalog.allows(self.request.model, account.plan_type)
        ]
        # A previous_response_id is bound to the account that produced it: exactly one account
        # is tried, the id untouched (spec §5.3 "external unknown"), never fanned out.
        limit = 1 if self.request.previous_response_id else None
        return CandidateLedger(eligible, self.request.scheduler_settings, limit=limit)

    # ------------------------------------------------------------------------- one attempt

    def _headers(self, account: AccountView) -> list[tuple[str, str]]:
        cookie = cookie_header(account.cookies, url=self._url, now=timezone.now())
        headers = upstream_headers(
            account=account,
            request=self.request,
            fingerprint=self.request.fingerprint,
            cookie=cookie,
        )
        if self._compact:
            headers = [
                (name, value) for name, value in headers if name not in COMPACT_OMITTED_HEADERS
            ]
        return headers

    def _body_for(self, account: AccountView) -> bytes:
        client = self.request.client_identity
        if self._compact:
            body = compact_body(self.request.body, client, account.id, self.request.request_id)
        else:
            body = scoped_body(self.request.body, client, account.id)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    def _capture_cookies(self, account: AccountView, response: aiohttp.ClientResponse) -> None:
        headers = response.headers.getall("Set-Cookie", [])
        if headers:
            found = captured_cookies(headers, url=self._url, now=timezone.now())
            if found:
                self.captured_cookies.append((account.id, found))

    async def _send(self, account: AccountView) -> aiohttp.ClientResponse | AttemptFailure:
        """POST to the upstream, retrying 5xx twice on the same account."""
        headers = self._headers(account)
        body = self._body_for(account)
        for try_number in range(SAME_ACCOUNT_5XX_RETRIES + 1):
            try:
                response = await codex.post(self._url, body=body, headers=headers)
            except codex.TRANSPORT_ERRORS as error:
                return AttemptFailure(
                    FailureKind.UPSTREAM_UNAVAILABLE, detail=type(error).__name__, answered=False
                )
            self._capture_cookies(account, response)
            if response.status == 200:
                return response
            response_headers = codex.lowercase_headers(response)
            body_read = await codex.read_error_body(response)
            if response.status >= 500 and try_number < SAME_ACCOUNT_5XX_RETRIES:
                continue
            failure = classify_http_failure(response.status, response_headers, body_read)
            failure.headers = response_headers
            return failure
        raise AssertionError("unreachable")

    async def _quota_still_blocked(self, account: AccountView) -> bool:
        """For an account whose quota limit just lifted: ask the usage endpoint first (spec §3.5).

        Returns True when the upstream still reports the limit (the account is skipped); an
        unreadable usage endpoint lets the request go ahead.
        """
        headers = [
            (name, value)
            for name, value in self._headers(account)
            if name in ("user-agent", "authorization", "originator", "chatgpt-account-id", "cookie")
        ] + [("accept", "application/json")]
        now = timezone.now()
        try:
            snapshot = await fetch_usage(headers, now=now)
        except UsageFetchError:
            return False
        await apply_snapshot(account.id, snapshot, now=now)
        return snapshot.limit_reached

    async def _apply_account_effect(self, account: AccountView, failure: AttemptFailure) -> None:
        now = timezone.now()
        kind = failure.kind
        if kind == FailureKind.RATE_LIMITED and failure.answered:
            await account_pool.mark_rate_limited(
                account.id, now=now, retry_after_seconds=failure.retry_after_seconds
            )
        elif kind == FailureKind.QUOTA_EXHAUSTED:
            await account_pool.mark_quota_exhausted(account.id, now=now)
        elif kind == FailureKind.EXPIRED:
            await account_pool.mark_expired(account.id, token=account.access_token, now=now)
        elif kind == FailureKind.BANNED:
            await account_pool.mark_banned(account.id, token=account.access_token, now=now)
        elif kind == FailureKind.CLOUDFLARE_CHALLENGE:
            await account_pool.register_cloudflare_challenge(account.id, now=now)
        elif kind == FailureKind.CLOUDFLARE_PATH_BLOCKED:
            await account_pool.register_cloudflare_path_block(account.id, now=now)

    def _observe(self, frames: list[Frame], progress: StreamProgress) -> AttemptFailure | None:
        """Update ``progress`` from new frames. Before output, a rotatable terminal failure is
        returned so the caller can move to the next account."""
        for frame in frames:
            event = frame.event
            if frame.data == b"[DONE]":
                progress.done_seen = True
                continue
            if event == "response.created" and progress.response_id is None:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    progress.response_id = frame.json()["response"]["id"]
            elif event in OUTPUT_DELTA_EVENTS:
                progress.output_seen = True
                if progress.first_token_ms is None:
                    progress.first_token_ms = max(1, self.request.elapsed_ms())
            elif event in OUTPUT_ITEM_EVENTS:
                progress.output_seen = True
            elif event in TERMINAL_EVENTS:
                try:
                    terminal = frame.json()
                except ValueError:
                    terminal = {}
                terminal = terminal if isinstance(terminal, dict) else {}
                progress.terminal_event = event
                progress.terminal = terminal
                response = terminal.get("response")
                if isinstance(response, dict) and response.get("id"):
                    progress.response_id = response["id"]
                if event not in SUCCESS_TERMINAL_EVENTS and not progress.output_seen:
                    failure = classify_failed_event(terminal)
                    if failure.rotates:
                        return failure
        return None

    async def _open_stream(
        self, slot: Slot, attempt_index: int, response: aiohttp.ClientResponse
    ) -> Committed | AttemptFailure:
        """Hold the stream until real output, a terminal event, or 64 KiB."""
        scanner = SSEScanner()
        progress = StreamProgress()
        buffered: list[bytes] = []
        buffered_frames: list[Frame] = []
        held = 0
        try:
            async for chunk in response.content.iter_any():
                buffered.append(chunk)
                held += len(chunk)
                frames = scanner.feed(chunk)
                buffered_frames += frames
                failure = self._observe(frames, progress)
                if failure is not None:
                    response.close()
                    return failure
                if progress.output_seen or progress.terminal_event or held >= COMMIT_PREFETCH_LIMIT:
                    break
            else:
                if not progress.terminal_event:
                    response.release()
                    return AttemptFailure(
                        FailureKind.UPSTREAM_UNAVAILABLE,
                        detail="upstream stream ended before any output",
                        response_id=progress.response_id,
                    )
        except codex.TRANSPORT_ERRORS as error:
            response.close()
            return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, detail=type(error).__name__)
        except SSEFrameTooLarge as error:
            response.close()
            return AttemptFailure(FailureKind.INVALID_SSE, detail=str(error))
        return Committed(
            slot=slot,
            attempt_index=attempt_index,
            response=response,
            upstream_headers=codex.lowercase_headers(response),
            buffered=buffered,
            scanner=scanner,
            progress=progress,
            buffered_frames=buffered_frames,
        )

    async def _read_all(
        self,
        slot: Slot,
        attempt_index: int,
        response: aiohttp.ClientResponse,
        *,
        keep_frames: bool,
    ) -> tuple[Committed, dict] | AttemptFailure:
        """For non-stream clients: read to the end (nothing was sent, so any failure rotates).
        ``keep_frames``: keep every event too, for callers that build their answer from the
        stream rather than from the terminal ``response`` object."""
        scanner = SSEScanner()
        progress = StreamProgress()
        kept: list[Frame] = []
        try:
            async for chunk in response.content.iter_any():
                frames = scanner.feed(chunk)
                if keep_frames:
                    kept += frames
                self._observe(frames, progress)
        except codex.TRANSPORT_ERRORS as error:
            response.close()
            return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, detail=type(error).__name__)
        except SSEFrameTooLarge as error:
            response.close()
            return AttemptFailure(FailureKind.INVALID_SSE, detail=str(error))
        response.release()
        terminal = progress.terminal
        if progress.terminal_event is None or terminal is None:
            return AttemptFailure(
                FailureKind.UPSTREAM_UNAVAILABLE,
                detail="upstream stream ended before response.completed",
                response_id=progress.response_id,
            )
        if progress.terminal_event not in SUCCESS_TERMINAL_EVENTS:
            return classify_failed_event(terminal)
        response_object = terminal.get("response")
        if not isinstance(response_object, dict):
            return AttemptFailure(FailureKind.INVALID_SSE, detail="terminal event without response")
        if _is_empty_completion(response_object):
            return AttemptFailure(
                FailureKind.EMPTY_RESPONSE,
                detail="upstream completed with no output",
                response_id=response_object.get("id"),
            )
        committed = Committed(
            slot=slot,
            attempt_index=attempt_index,
            response=response,
            upstream_headers=codex.lowercase_headers(response),
            buffered=[],
            scanner=scanner,
            progress=progress,
            buffered_frames=kept,
        )
        return committed, response_object

    # ------------------------------------------------------------------------- the walk

    async def _walk(self, finish) -> object:
        """Try accounts until ``finish(slot, index, response)`` returns a non-failure."""
        ledger = await self._ledger()
        attempt_index = 0
        while True:
            slot = await ledger.next_slot()
            if slot is None:
                break
            try:
                outcome = await self._attempt(slot, attempt_index, finish)
                # A 401: one refresh of this account and one retry on it (token_retry).
                if (
                    not self._token_refresh_spent
                    and wants_token_refresh(outcome, slot.account)
                    and (self._spend_token_refresh() or await refresh_for_retry(slot.account))
                ):
                    self.notes.append(AttemptNote(attempt_index, slot.account.id, outcome))
                    attempt_index += 1
                    outcome = await self._attempt(slot, attempt_index, finish)
                    if wants_token_refresh(outcome, slot.account):
                        await give_up_after_refresh(slot.account)
            except BaseException:
                # Cancelled (the client left) or failed half-way: the slot must not wait for
                # its TTL. Shielded so the release itself survives the cancellation.
                await asyncio.shield(scheduler.release(slot))
                raise
            if not isinstance(outcome, AttemptFailure):
                self.notes.append(AttemptNote(attempt_index, slot.account.id))
                return outcome
            await scheduler.release(slot)
            self.notes.append(AttemptNote(attempt_index, slot.account.id, outcome))
            attempt_index += 1
            if not outcome.rotates:
                return self._give_up(outcome)
            await self._apply_account_effect(slot.account, outcome)
        if not self.notes:
            self.client_error = ALL_BUSY if ledger.timed_out else NO_ACCOUNTS
            return self.client_error
        return self._give_up(self.notes[-1].failure)

    def _spend_token_refresh(self) -> bool:
        self._token_refresh_spent = True
        return False

    async def _attempt(self, slot: Slot, attempt_index: int, finish) -> object:
        """One account: pacing, the usage check of a just-lifted quota, the call itself."""
        account = slot.account
        if not self._compact:  # compact skips the request interval (spec §1.5)
            await scheduler.pace(slot, self.request.scheduler_settings.request_interval_ms)
        if account.quota_verify_required and await self._quota_still_blocked(account):
            return AttemptFailure(
                FailureKind.RATE_LIMITED,
                detail="rate-limited: Upstream usage quota still reports limit_reached",
                answered=False,
            )
        sent = await self._send(account)
        if isinstance(sent, AttemptFailure):
            return sent
        return await finish(slot, attempt_index, sent)

    def _give_up(self, failure: AttemptFailure) -> ClientError:
        self.final_failure = failure
        self.exhausted_count = sum(
            1
            for note in self.notes
            if note.failure is not None and note.failure.kind == failure.kind
        )
        self.client_error = client_error_for(failure, self.exhausted_count)
        return self.client_error

    async def open_stream(self) -> Committed | ClientError:
        """Walk the candidates until one stream commits; else the client's error."""
        return await self._walk(self._open_stream)

    async def run_to_completion(
        self, *, keep_frames: bool = False
    ) -> tuple[Committed, dict] | ClientError:
        """For non-stream clients: the committed attempt (with all its events in
        ``buffered_frames`` when ``keep_frames``) and the terminal ``response`` object."""
        outcome = await self._walk(functools.partial(self._read_all, keep_frames=keep_frames))
        if isinstance(outcome, tuple):
            await scheduler.release(outcome[0].slot, succeeded=True)
        return outcome

    async def run_compact(self) -> CompactResult | ClientError:
        """``/v1/responses/compact``: one JSON call, same rotation rules, no pacing."""
        self._compact = True
        self._url = codex.compact_url()
        outcome = await self._walk(self._read_json)
        if isinstance(outcome, CompactResult):
            await scheduler.release(outcome.slot, succeeded=True)
        return outcome

    async def _read_json(
        self, slot: Slot, attempt_index: int, response: aiohttp.ClientResponse
    ) -> CompactResult | AttemptFailure:
        try:
            body = await response.read()
        except codex.TRANSPORT_ERRORS as error:
            response.close()
            return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, detail=type(error).__name__)
        headers = codex.lowercase_headers(response)
        response.release()
        try:
            payload = json.loads(body)
        except ValueError:
            # A non-JSON answer is an upstream error, returned as 502 (spec §1.5).
            return AttemptFailure(FailureKind.CLIENT_ERROR, upstream_status=502, body=body[:200])
        return CompactResult(slot, attempt_index, headers, body, payload)

    # ------------------------------------------------------------------------- relaying

    async def upstream_chunks(
        self, committed: Committed
    ) -> AsyncIterator[tuple[bytes, list[Frame]]]:
        """The committed stream's chunks with the complete frames each one finished.

        Sets ``stream_error`` / ``client_cancelled`` on the way; cancellation (the client left)
        closes the upstream connection at once. The slot is released when the stream ends, and
        live streams refresh it so long responses keep counting.
        """
        progress = committed.progress
        scanner = committed.scanner
        heartbeat_every = settings.SCHEDULER_SLOT_TTL_SECONDS / 4
        last_heartbeat = time.monotonic()
        try:
            if committed.buffered:
                held = b"".join(committed.buffered)
                committed.buffered = []
                yield held, committed.buffered_frames
            async for chunk in committed.response.content.iter_any():
                frames = scanner.feed(chunk)
                self._observe(frames, progress)
                yield chunk, frames
                if time.monotonic() - last_heartbeat > heartbeat_every:
                    last_heartbeat = time.monotonic()
                    await scheduler.heartbeat(
                        committed.slot, settings.SCHEDULER_SLOT_TTL_SECONDS * 1000
                    )
        except codex.TRANSPORT_ERRORS as error:
            self.stream_error = f"upstream read failed ({type(error).__name__})"
        except SSEFrameTooLarge as error:
            self.stream_error = str(error)
        except (asyncio.CancelledError, GeneratorExit):
            self.client_cancelled = True
            raise
        finally:
            if self.client_cancelled or self.stream_error or not progress.terminal_event:
                committed.response.close()
            else:
                committed.response.release()
            succeeded = progress.terminal_event in SUCCESS_TERMINAL_EVENTS and not self.stream_error
            await asyncio.shield(scheduler.release(committed.slot, succeeded=succeeded))
        if not progress.terminal_event:
            self.synthetic_failure = True

    async def relay(self, committed: Committed) -> AsyncIterator[bytes]:
        """The bytes of a committed stream verbatim, then the synthetic failure if the upstream
        ended without a terminal event, then ``data: [DONE]``."""
        async for chunk, _ in self.upstream_chunks(committed):
            yield chunk
        progress = committed.progress
        if self.synthetic_failure:
            separator = b"" if committed.scanner.ends_with_blank_line else b"\n\n"
            yield separator + stream_disconnected_event(progress.response_id, self.stream_error)
        if not progress.done_seen:
            yield DONE_FRAME


def _is_empty_completion(response: dict) -> bool:
    """Completed with no items, no text and zero output tokens (spec §3.6), and not incomplete."""
    if response.get("status") == "incomplete":
        return False
    output = response.get("output") or []
    usage = response.get("usage") or {}
    return not output and not (usage.get("output_tokens") or 0)
