"""One client request through the account pool (spec §3.3, §3.6, §1.4).

The candidate list is frozen at the start; each account is tried at most once (5xx answers are
retried twice on the same account first). A failure that says something about the account
changes its state in PostgreSQL and moves on; any other failure is returned to the client. For a
stream, nothing reaches the client until the upstream shows real output (or a terminal event),
so failures that arrive right after ``response.created`` can still move to another account; once
a byte has been sent there is no rotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

import aiohttp
from django.utils import timezone

from proxy.clients import codex
from proxy.dispatch import accounts as account_pool
from proxy.dispatch.accounts import AccountView
from proxy.dispatch.failures import (
    NO_ACCOUNTS,
    AttemptFailure,
    ClientError,
    FailureKind,
    classify_failed_event,
    classify_http_failure,
    client_error_for,
)
from proxy.dispatch.scheduler import order_candidates
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
from proxy.dispatch.upstream_request import upstream_headers

logger = logging.getLogger(__name__)

SAME_ACCOUNT_5XX_RETRIES = 2
COMMIT_PREFETCH_LIMIT = 64 * 1024
SAFE_UPSTREAM_HEADERS = (
    "openai-model",
    "x-models-etag",
    "x-reasoning-included",
    "openai-processing-ms",
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
    """An upstream stream that reached real output (or a terminal event) on ``account``."""

    account: AccountView
    attempt_index: int
    response: aiohttp.ClientResponse
    upstream_headers: dict[str, str]
    buffered: list[bytes]
    scanner: SSEScanner
    progress: StreamProgress


class Dispatch:
    """Runs one request; after it ends ``notes``/``usage`` tell the ledger what happened."""

    def __init__(self, request: DispatchRequest, *, max_candidates: int | None = None):
        self.request = request
        self.notes: list[AttemptNote] = []
        self.final_failure: AttemptFailure | None = None
        self.client_error: ClientError | None = None
        self.exhausted_count = 0
        # How a committed stream ended (read by the ledger).
        self.client_cancelled = False
        self.synthetic_failure = False
        self.stream_error: str | None = None
        self._body_bytes = json.dumps(
            request.body, ensure_ascii=False, separators=(",", ":")
        ).encode()
        # A previous_response_id is bound to the account that produced it: exactly one account
        # is tried, the id untouched (spec §5.3 "external unknown"), until managed continuation.
        self._max_candidates = 1 if request.previous_response_id else max_candidates

    # ------------------------------------------------------------------------- candidates

    async def _candidates(self) -> list[AccountView]:
        now = timezone.now()
        accounts = await account_pool.load_accounts()
        eligible = await account_pool.refresh_and_filter_eligible(accounts, now=now)
        ordered = order_candidates(eligible)
        return ordered[: self._max_candidates] if self._max_candidates else ordered

    # ------------------------------------------------------------------------- attempts

    async def _send(self, account: AccountView) -> aiohttp.ClientResponse | AttemptFailure:
        """POST to the upstream, retrying 5xx twice on the same account."""
        headers = upstream_headers(account=account, request=self.request)
        for try_number in range(SAME_ACCOUNT_5XX_RETRIES + 1):
            try:
                response = await codex.post(
                    codex.responses_url(), body=self._body_bytes, headers=headers
                )
            except codex.TRANSPORT_ERRORS as error:
                return AttemptFailure(
                    FailureKind.UPSTREAM_UNAVAILABLE, detail=type(error).__name__, answered=False
                )
            if response.status == 200:
                return response
            response_headers = codex.lowercase_headers(response)
            body = await codex.read_error_body(response)
            if response.status >= 500 and try_number < SAME_ACCOUNT_5XX_RETRIES:
                continue
            failure = classify_http_failure(response.status, response_headers, body)
            failure.headers = response_headers
            return failure
        raise AssertionError("unreachable")

    async def _apply_account_effect(self, account: AccountView, failure: AttemptFailure) -> None:
        now = timezone.now()
        kind = failure.kind
        if kind == FailureKind.RATE_LIMITED:
            await account_pool.mark_rate_limited(
                account.id, now=now, retry_after_seconds=failure.retry_after_seconds
            )
        elif kind == FailureKind.QUOTA_EXHAUSTED:
            await account_pool.mark_quota_exhausted(account.id, now=now)
        elif kind == FailureKind.EXPIRED:
            await account_pool.mark_expired(account.id, now=now)
        elif kind == FailureKind.BANNED:
            await account_pool.mark_banned(account.id, now=now)
        elif kind == FailureKind.CLOUDFLARE_CHALLENGE:
            await account_pool.register_cloudflare_challenge(account.id, now=now)
        elif kind == FailureKind.CLOUDFLARE_PATH_BLOCKED:
            await account_pool.register_cloudflare_path_block(account.id, now=now)

    async def _open_stream(
        self, account: AccountView, attempt_index: int, response: aiohttp.ClientResponse
    ) -> Committed | AttemptFailure:
        """Read until the stream shows real output or a terminal event, or 64 KiB are held."""
        scanner = SSEScanner()
        progress = StreamProgress()
        buffered: list[bytes] = []
        held = 0
        try:
            async for chunk in response.content.iter_any():
                buffered.append(chunk)
                held += len(chunk)
                failure = self._observe(scanner.feed(chunk), progress)
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
            account=account,
            attempt_index=attempt_index,
            response=response,
            upstream_headers=codex.lowercase_headers(response),
            buffered=buffered,
            scanner=scanner,
            progress=progress,
        )

    def _observe(self, frames: list[Frame], progress: StreamProgress) -> AttemptFailure | None:
        """Update ``progress`` from new frames. Before commit, a rotatable terminal failure is
        returned so the caller can try the next account."""
        for frame in frames:
            event = frame.event
            if frame.data == b"[DONE]":
                progress.done_seen = True
                continue
            if event == "response.created" and progress.response_id is None:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    progress.response_id = frame.json()["response"]["id"]
            elif event in OUTPUT_DELTA_EVENTS:
                if not progress.output_seen:
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
                progress.terminal_event = event
                progress.terminal = terminal
                response = terminal.get("response") if isinstance(terminal, dict) else None
                if isinstance(response, dict) and response.get("id"):
                    progress.response_id = response["id"]
                if event not in SUCCESS_TERMINAL_EVENTS and not progress.output_seen:
                    failure = classify_failed_event(terminal if isinstance(terminal, dict) else {})
                    if failure.rotates:
                        return failure
        return None

    # ------------------------------------------------------------------------- streaming

    async def open_stream(self) -> Committed | ClientError:
        """Walk the candidates until one stream commits; else the client's error."""
        candidates = await self._candidates()
        if not candidates:
            self.client_error = NO_ACCOUNTS
            return NO_ACCOUNTS
        for attempt_index, account in enumerate(candidates):
            sent = await self._send(account)
            if isinstance(sent, AttemptFailure):
                outcome: Committed | AttemptFailure = sent
            else:
                outcome = await self._open_stream(account, attempt_index, sent)
            if isinstance(outcome, Committed):
                self.notes.append(AttemptNote(attempt_index, account.id))
                return outcome
            self.notes.append(AttemptNote(attempt_index, account.id, outcome))
            if not outcome.rotates:
                return self._give_up(outcome)
            await self._apply_account_effect(account, outcome)
        return self._give_up(self.notes[-1].failure)

    def _give_up(self, failure: AttemptFailure) -> ClientError:
        self.final_failure = failure
        self.exhausted_count = sum(
            1
            for note in self.notes
            if note.failure is not None and note.failure.kind == failure.kind
        )
        self.client_error = client_error_for(failure, self.exhausted_count)
        return self.client_error

    async def relay(self, committed: Committed) -> AsyncIterator[bytes]:
        """The bytes of a committed stream, then the synthetic failure if the upstream ended
        without a terminal event, then ``data: [DONE]``. Cancellation (client gone) closes the
        upstream connection at once."""
        progress = committed.progress
        scanner = committed.scanner
        try:
            for chunk in committed.buffered:
                yield chunk
            committed.buffered = []
            async for chunk in committed.response.content.iter_any():
                self._observe(scanner.feed(chunk), progress)
                yield chunk
        except codex.TRANSPORT_ERRORS as error:
            self.stream_error = f"upstream read failed ({type(error).__name__})"
        except SSEFrameTooLarge as error:
            self.stream_error = str(error)
        except asyncio.CancelledError:
            self.client_cancelled = True
            committed.response.close()
            raise
        finally:
            if self.stream_error or not progress.terminal_event:
                committed.response.close()
            else:
                committed.response.release()
        if not progress.terminal_event:
            separator = b"" if scanner.ends_with_blank_line else b"\n\n"
            self.synthetic_failure = True
            yield separator + stream_disconnected_event(progress.response_id, self.stream_error)
        if not progress.done_seen:
            yield DONE_FRAME

    # ------------------------------------------------------------------------- non-streaming

    async def run_to_completion(self) -> tuple[Committed, dict] | ClientError:
        """For non-stream clients: read each attempt to its terminal event; rotate on failures
        (nothing has been sent, so even a cut stream can move on). Returns the committed
        attempt and the terminal ``response`` object."""
        candidates = await self._candidates()
        if not candidates:
            self.client_error = NO_ACCOUNTS
            return NO_ACCOUNTS
        for attempt_index, account in enumerate(candidates):
            sent = await self._send(account)
            if isinstance(sent, AttemptFailure):
                outcome: tuple[Committed, dict] | AttemptFailure = sent
            else:
                outcome = await self._read_all(account, attempt_index, sent)
            if not isinstance(outcome, AttemptFailure):
                self.notes.append(AttemptNote(attempt_index, account.id))
                return outcome
            self.notes.append(AttemptNote(attempt_index, account.id, outcome))
            if not outcome.rotates:
                return self._give_up(outcome)
            await self._apply_account_effect(account, outcome)
        return self._give_up(self.notes[-1].failure)

    async def _read_all(
        self, account: AccountView, attempt_index: int, response: aiohttp.ClientResponse
    ) -> tuple[Committed, dict] | AttemptFailure:
        scanner = SSEScanner()
        progress = StreamProgress()
        try:
            async for chunk in response.content.iter_any():
                self._observe(scanner.feed(chunk), progress)
        except codex.TRANSPORT_ERRORS as error:
            response.close()
            return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, detail=type(error).__name__)
        except SSEFrameTooLarge as error:
            response.close()
            return AttemptFailure(FailureKind.INVALID_SSE, detail=str(error))
        response.release()
        committed = Committed(
            account=account,
            attempt_index=attempt_index,
            response=response,
            upstream_headers=codex.lowercase_headers(response),
            buffered=[],
            scanner=scanner,
            progress=progress,
        )
        terminal = progress.terminal if isinstance(progress.terminal, dict) else None
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
        return committed, response_object


def _is_empty_completion(response: dict) -> bool:
    """Completed with no items, no text and zero output tokens (spec §3.6), and not incomplete."""
    if response.get("status") == "incomplete":
        return False
    output = response.get("output") or []
    usage = response.get("usage") or {}
    return not output and not (usage.get("output_tokens") or 0)
