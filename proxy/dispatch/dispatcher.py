"""One client request through the account pool (spec §3.3–§3.6, §1.4).

The candidate queue hands out one account (with a concurrency slot) at a time; each is tried
at most once (the Codex client asks a 5xx again twice on the same account first). A failure
that says something about the account changes its state in PostgreSQL and the request moves
on; any other failure is the client's error. The strategy (``proxy.dispatch.attempts``) says
how one attempt calls the upstream and reads its answer.

Every dispatch ends in one frozen ``DispatchReport``, handed to the ledger exactly once, from a
``finally``: when the answer is complete, when the error is raised, or — for a committed
stream — when the relay ends. Failures reach the view as ``ClientFailure``.
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from django.utils import timezone

from proxy.accounts import AccountView
from proxy.clients import codex
from proxy.dispatch import scheduler
from proxy.dispatch.attempts import CompactStrategy, CompleteStrategy, Strategy, StreamStrategy
from proxy.dispatch.candidate_queue import CandidateQueue
from proxy.dispatch.client_errors import (
    ALL_BUSY,
    NO_ACCOUNTS,
    ClientError,
    ClientFailure,
    client_error_for,
)
from proxy.dispatch.cookies import captured_cookies, cookie_header
from proxy.dispatch.failures import AttemptFailure, FailureKind
from proxy.dispatch.relay import StreamRelay
from proxy.dispatch.scheduler import Slot
from proxy.dispatch.token_retry import (
    give_up_after_refresh,
    refresh_for_retry,
    wants_token_refresh,
)
from proxy.dispatch.types import (
    AttemptNote,
    Committed,
    CompactResult,
    DispatchReport,
    DispatchRequest,
    Served,
    StreamEnd,
)
from proxy.dispatch.upstream_request import request_headers
from proxy.ledger import writer as ledger
from proxy.ledger.entries import build_entry
from proxy.policies import admission
from proxy.quota import UsageFetchError, fetch_usage
from proxy.request_outcome import finished_dispatch
from proxy.services import account_state
from proxy.services.account_quota import account_quota_apply

SAFE_UPSTREAM_HEADERS = (
    "openai-model",
    "x-models-etag",
    "x-reasoning-included",
    "openai-processing-ms",
)


class Dispatch:
    """Runs one request with ``stream()``, ``complete()`` or ``compact()`` (one of them, once)."""

    def __init__(self, request: DispatchRequest):
        self.request = request
        self._notes: list[AttemptNote] = []
        self._cookies: list[tuple[str, tuple[dict, ...]]] = []
        self._final_failure: AttemptFailure | None = None
        self._client_error: ClientError | None = None
        self._exhausted_count = 0
        self._strategy: Strategy = StreamStrategy()
        self._submitted = False
        self.report: DispatchReport | None = None
        # A 401 asks for one token refresh per request, not one per account it walks through
        # (each may wait for a lease and the token endpoint; the client is waiting). Later
        # 401s demote their account for the scheduled refresher.
        self._token_refresh_spent = False

    # ------------------------------------------------------------------------- entry points

    async def stream(self) -> StreamRelay:
        """Walk the candidates until one stream commits; the relay reports when it ends.
        Raises ClientFailure when no account could serve."""
        self._strategy = StreamStrategy()
        try:
            committed = await self._walk()
        except BaseException:
            self._finish()
            raise
        return StreamRelay(
            self.request,
            committed,
            on_end=lambda end: self._finish(served=self._served(committed), end=end),
        )

    async def complete(self, *, keep_frames: bool = False) -> Committed:
        """For non-stream clients: the attempt read to its end (``response_object`` set; every
        event in ``buffered_frames`` when ``keep_frames``). Raises ClientFailure."""
        self._strategy = CompleteStrategy(keep_frames=keep_frames)
        served = None
        try:
            committed = await self._walk()
            await scheduler.release(committed.slot, succeeded=True)
            served = self._served(committed)
            return committed
        finally:
            self._finish(served=served)

    async def compact(self) -> CompactResult:
        """``/v1/responses/compact``: one JSON call, same rotation rules, no pacing. Raises
        ClientFailure."""
        self._strategy = CompactStrategy()
        served = None
        try:
            result = await self._walk()
            await scheduler.release(result.slot, succeeded=True)
            payload = result.payload if isinstance(result.payload, dict) else {}
            served = Served(
                account=result.account,
                attempt_index=result.attempt_index,
                upstream_headers=result.upstream_headers,
                compact_payload=payload,
            )
            return result
        finally:
            self._finish(served=served)

    # ------------------------------------------------------------------------- the report

    @staticmethod
    def _served(committed: Committed) -> Served:
        return Served(
            account=committed.account,
            attempt_index=committed.attempt_index,
            upstream_headers=committed.upstream_headers,
            progress=committed.progress,
            response_object=committed.response_object,
        )

    def _finish(self, *, served: Served | None = None, end: StreamEnd | None = None) -> None:
        """Freeze the report and hand its ledger entry to the writer (once)."""
        if self._submitted:
            return
        self._submitted = True
        self.report = DispatchReport(
            request=self.request,
            transport=self._strategy.transport,
            notes=tuple(self._notes),
            captured_cookies=tuple(self._cookies),
            final_failure=self._final_failure,
            client_error=self._client_error,
            exhausted_count=self._exhausted_count,
            served=served if self._client_error is None else None,
            end=end or StreamEnd(),
        )
        entry = build_entry(self.report)
        ledger.submit(entry)
        finished_dispatch(self.report, entry)

    # ------------------------------------------------------------------------- the walk

    async def _queue(self) -> CandidateQueue:
        eligible = await account_state.accounts_apply_time_transitions(
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
        return CandidateQueue(eligible, self.request.scheduler_settings, limit=limit)

    async def _walk(self) -> Committed | CompactResult:
        """Try accounts until one attempt succeeds; raises ClientFailure when none did."""
        if refused := await admission.refusal(self.request):  # the key's policy (issue 25)
            self._fail(refused.error, retry_after=refused.retry_after_seconds)
        queue = await self._queue()
        attempt_index = 0
        while True:
            slot = await queue.next_slot()
            if slot is None:
                break
            try:
                outcome = await self._attempt(slot, attempt_index)
                # A 401: one refresh of this account and one retry on it (token_retry).
                if (
                    not self._token_refresh_spent
                    and wants_token_refresh(outcome, slot.account)
                    and (self._spend_token_refresh() or await refresh_for_retry(slot.account))
                ):
                    self._notes.append(AttemptNote(attempt_index, slot.account.id, outcome))
                    attempt_index += 1
                    outcome = await self._attempt(slot, attempt_index)
                    if wants_token_refresh(outcome, slot.account):
                        await give_up_after_refresh(slot.account)
            except BaseException:
                # Cancelled (the client left) or failed half-way: the slot must not wait for
                # its TTL. Shielded so the release itself survives the cancellation.
                await asyncio.shield(scheduler.release(slot))
                raise
            if not isinstance(outcome, AttemptFailure):
                self._notes.append(AttemptNote(attempt_index, slot.account.id))
                return outcome
            await scheduler.release(slot)
            self._notes.append(AttemptNote(attempt_index, slot.account.id, outcome))
            attempt_index += 1
            if not outcome.rotates:
                self._give_up(outcome)
            await self._apply_account_effect(slot, outcome)
        if not self._notes:
            self._fail(ALL_BUSY if queue.timed_out else NO_ACCOUNTS)
        self._give_up(self._notes[-1].failure)

    def _fail(self, error: ClientError, *, retry_after: int | None = None) -> NoReturn:
        self._client_error = error
        as_event = self.request.failures_as_events and error.status >= 500
        raise ClientFailure(error, as_event=as_event, retry_after=retry_after)

    def _give_up(self, failure: AttemptFailure) -> NoReturn:
        self._final_failure = failure
        self._exhausted_count = sum(
            1
            for note in self._notes
            if note.failure is not None and note.failure.kind == failure.kind
        )
        self._fail(client_error_for(failure, self._exhausted_count))

    def _spend_token_refresh(self) -> bool:
        """Mark this request's one token refresh as used; False, so that the condition it
        sits in goes on to the refresh itself."""
        self._token_refresh_spent = True
        return False

    # ------------------------------------------------------------------------- one attempt

    def _headers(self, account: AccountView, call: codex.Call, url: str) -> list[tuple[str, str]]:
        request = self.request
        return codex.build_headers(
            call,
            fingerprint=request.fingerprint,
            credentials=codex.Credentials.of(account),
            request_headers=request_headers(
                client=request.client_identity,
                account_id=account.id,
                request_id=request.request_id,
                subagent=request.subagent,
            ),
            cookie=cookie_header(account.cookies, url=url, now=timezone.now()),
        )

    async def _attempt(
        self, slot: Slot, attempt_index: int
    ) -> Committed | CompactResult | AttemptFailure:
        """One account: pacing, the usage check of a just-lifted quota, the call itself."""
        account = slot.account
        strategy = self._strategy
        if strategy.paced:
            await scheduler.pace(slot, self.request.scheduler_settings.request_interval_ms)
        if account.quota_verify_required and await self._quota_still_blocked(account):
            return AttemptFailure(
                FailureKind.RATE_LIMITED,
                detail="rate-limited: Upstream usage quota still reports limit_reached",
                answered=False,
            )
        url = codex.compact_url() if strategy.call is codex.Call.COMPACT else codex.responses_url()
        cookies_seen: list[str] = []
        try:
            return await strategy.run(
                self.request,
                slot,
                attempt_index,
                self._headers(account, strategy.call, url),
                cookies_seen,
            )
        finally:
            if cookies_seen:
                found = captured_cookies(cookies_seen, url=url, now=timezone.now())
                if found:
                    self._cookies.append((account.id, tuple(found)))

    async def _quota_still_blocked(self, account: AccountView) -> bool:
        """For an account whose quota limit just lifted: ask the usage endpoint first (spec §3.5).

        Returns True when the upstream still reports the limit (the account is skipped); an
        unreadable usage endpoint lets the request go ahead.
        """
        url = codex.usage_urls()[0]
        headers = codex.build_headers(
            codex.Call.USAGE,
            fingerprint=self.request.fingerprint,
            credentials=codex.Credentials.of(account),
            cookie=cookie_header(account.cookies, url=url, now=timezone.now()),
        )
        now = timezone.now()
        try:
            snapshot = await fetch_usage(headers, now=now)
        except UsageFetchError:
            return False
        await account_quota_apply(account.id, snapshot, now=now)
        return snapshot.limit_reached

    async def _apply_account_effect(self, slot: Slot, failure: AttemptFailure) -> None:
        account = slot.account
        now = timezone.now()
        kind = failure.kind
        if kind == FailureKind.RATE_LIMITED and failure.answered:
            await account_state.account_mark_rate_limited(
                account.id, now=now, retry_after_seconds=failure.retry_after_seconds
            )
        elif kind == FailureKind.QUOTA_EXHAUSTED:
            await account_state.account_mark_quota_exhausted(account.id, now=now)
        elif kind == FailureKind.EXPIRED:
            await account_state.account_mark_expired(
                account.id, token=account.access_token, now=now
            )
        elif kind == FailureKind.BANNED:
            await account_state.account_mark_banned(account.id, token=account.access_token, now=now)
        elif kind == FailureKind.CLOUDFLARE_CHALLENGE:
            await account_state.account_register_cloudflare_challenge(account.id, now=now)
        elif kind == FailureKind.CLOUDFLARE_PATH_BLOCKED:
            await account_state.account_register_cloudflare_path_block(account.id, now=now)
