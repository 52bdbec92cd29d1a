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
import logging
from typing import Any, Literal, NoReturn, cast, overload

from django.utils import timezone

from proxy.accounts import AccountView
from proxy.clients import codex
from proxy.dispatch.account_call import call_account
from proxy.dispatch.account_effects import apply_account_effect
from proxy.dispatch.attempts import CompactStrategy, CompleteStrategy, Strategy, StreamStrategy
from proxy.dispatch.continuity import (
    Continuity,
    Next,
    affinity_write,
    after_owner_failure,
    is_recoverable,
    look_up,
    owner_request,
    replay_request,
    variant_hash,
)
from proxy.dispatch.relay import StreamRelay
from proxy.dispatch.request_outcome import finished_dispatch
from proxy.dispatch.token_retry import (
    give_up_after_refresh,
    refresh_for_retry,
    wants_token_refresh,
)
from proxy.dispatch.unknown_previous import for_upstream_refusal, never_existed
from proxy.domain.client_errors import (
    ALL_BUSY,
    CONTINUATION_CONNECTION_BUSY,
    NO_ACCOUNTS,
    PREVIOUS_RESPONSE_UNAVAILABLE,
    ClientError,
    ClientFailure,
    client_error_for,
)
from proxy.domain.dispatch_types import (
    AttemptNote,
    Committed,
    CompactResult,
    DispatchReport,
    DispatchRequest,
    Served,
    StreamEnd,
)
from proxy.domain.failures import AttemptFailure
from proxy.domain.slots import Slot
from proxy.ledger import affinity
from proxy.ledger import writer as ledger
from proxy.ledger.entries import build_entry
from proxy.policies import admission
from proxy.scheduling import scheduler
from proxy.scheduling.candidate_queue import CandidateQueue
from proxy.scheduling.eligibility_wait import wait_for_an_account
from proxy.scheduling.keep_alive import KeepAlive
from proxy.scheduling.scheduler import ConversationLookup
from proxy.services import account_state

logger = logging.getLogger(__name__)

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
        self._cookies: list[tuple[str, tuple[dict[str, Any], ...]]] = []
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
        self._attempt_index = 0
        # Affinity (spec §5): what Redis knew, the owner's fallbacks, and the request the
        # attempts send (the owner's turn state, or the full replay).
        self._continuity: Continuity | None = None
        self._others: list[AccountView] = []
        self._sent: DispatchRequest = request
        self._replay_spent = False
        self._keep_alive = KeepAlive(request)  # while it walks; a committed stream's relay too

    # ------------------------------------------------------------------------- entry points

    async def stream(self) -> StreamRelay:
        """Walk the candidates until one stream commits; the relay reports when it ends.
        Raises ClientFailure when no account could serve."""
        self._strategy = StreamStrategy()
        try:
            committed = cast(Committed, await self._walk())  # what a stream attempt commits
        except BaseException:
            self._finish()
            raise
        return StreamRelay(
            self.request,
            committed,
            on_end=lambda end: self._finish(served=Served.of_committed(committed), end=end),
        )

    async def complete(self, *, keep_frames: bool = False) -> Committed:
        """For non-stream clients: the attempt read to its end (``response_object`` set; every
        event in ``buffered_frames`` when ``keep_frames``). Raises ClientFailure."""
        self._strategy = CompleteStrategy(keep_frames=keep_frames)
        served = None
        try:
            committed = cast(Committed, await self._walk())  # what a complete attempt commits
            scheduler.release_later(committed.slot, succeeded=True)
            served = Served.of_committed(committed)
            return committed
        finally:
            self._finish(served=served)

    async def compact(self) -> CompactResult:
        """``/v1/responses/compact``: one JSON call, same rotation rules, no pacing. Raises
        ClientFailure."""
        self._strategy = CompactStrategy()
        served = None
        try:
            result = cast(CompactResult, await self._walk())  # what a compact attempt returns
            scheduler.release_later(result.slot, succeeded=True)
            served = Served.of_compact(result)
            return result
        finally:
            self._finish(served=served)

    # ------------------------------------------------------------------------- the report

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
        try:
            write = affinity_write(self.report, self._continuity)
            if write is not None:
                affinity.submit(write)
        except Exception:  # affinity is disposable; the answer is not
            logger.warning("affinity record not queued", exc_info=True)

    # ------------------------------------------------------------------------- the walk

    async def _queue(self) -> CandidateQueue:
        request = self.request
        eligible = await account_state.accounts_apply_time_transitions(
            request.accounts, now=timezone.now()
        )
        eligible = [
            account
            for account in eligible
            if request.catalog.allows(request.model, account.plan_type)
        ]
        if not eligible:
            # None may serve now: wait for one the clock brings back soon, if allowed.
            eligible = await wait_for_an_account(
                [a for a in request.accounts if request.catalog.allows(request.model, a.plan_type)]
            )
        settings = request.scheduler_settings
        if self._strategy.call is codex.Call.COMPACT:
            # No chain to continue: a previous id is tried on one account, untouched — unless
            # it is another key's (issue 34): then it never existed, and nothing is sent.
            previous_id = request.previous_response_id
            if previous_id and (await self._look_up(previous_id, variant="")).foreign:
                return self._foreign(eligible, compact=True)
            return CandidateQueue(
                eligible, settings, limit=1 if request.previous_response_id else None
            )
        variant = variant_hash(request.body, request.client_identity)
        if request.previous_response_id is None:
            # The conversation's preference is looked up by the script that orders the
            # candidates and takes the slot: no Redis round trip of its own (spec §5.2).
            self._continuity = Continuity(
                conversation_id=request.conversation_id,
                variant_hash=variant,
                client_key_id=request.client_api_key_id,
            )
            return CandidateQueue(
                eligible,
                settings,
                conversation=ConversationLookup(
                    request.conversation_id, variant, request.client_api_key_id
                ),
            )
        continuity = self._continuity = await self._look_up(request.previous_response_id, variant)
        if continuity.foreign:
            self._continuity = None
            return self._foreign(eligible)
        if continuity.external:
            # Unknown previous id (spec §5.3): exactly one account, the id untouched, its answer
            # as it is — never fanned out, never replayed. When the ledger has this key's row of
            # it (its Redis record lapsed), that attempt is on the account that made it.
            made_it = [a for a in eligible if a.id == continuity.ledger_account_id]
            return CandidateQueue(made_it or eligible, settings, limit=1)
        # Managed (the previous response's record was found): its owner alone first.
        owner_id = continuity.preferred_account_id
        self._others = [account for account in eligible if account.id != owner_id]
        self._sent = owner_request(request, continuity)
        return CandidateQueue([a for a in eligible if a.id == owner_id], settings)

    def _foreign(self, eligible: list[AccountView], *, compact: bool = False) -> CandidateQueue:
        """Another key's previous id (issue 34): answered as an id that never existed, with no
        upstream call — not routed to its account, not replayed, no record left. As for an
        unknown id, a pool with no account to try answers that first (an empty queue)."""
        if not eligible:
            return CandidateQueue([], self.request.scheduler_settings)
        self._fail(never_existed(self.request, compact=compact))

    async def _look_up(self, previous_response_id: str, variant: str) -> Continuity:
        request = self.request
        return await look_up(
            previous_response_id=previous_response_id,
            conversation_id=request.conversation_id,
            variant=variant,
            client_key_id=request.client_api_key_id,
        )

    async def _walk(self) -> Committed | CompactResult:
        """Try accounts until one attempt succeeds; raises ClientFailure when none did."""
        with self._keep_alive:  # the slot held and the key's in-flight entry stay alive
            if refused := await admission.refusal(self.request):  # the key's policy (issue 25)
                self._fail(refused.error, retry_after=refused.retry_after_seconds)
            queue = await self._queue()
            if self._continuity is not None and self._continuity.managed:
                outcome = await self._walk_queue(queue, owner=True)
                if not isinstance(outcome, AttemptFailure | None):
                    return outcome
                queue = await self._recover(outcome, owner_timed_out=queue.timed_out)
            return await self._walk_queue(queue, owner=False)

    @overload
    async def _walk_queue(
        self, queue: CandidateQueue, *, owner: Literal[True]
    ) -> Committed | CompactResult | AttemptFailure | None: ...
    @overload
    async def _walk_queue(
        self, queue: CandidateQueue, *, owner: Literal[False]
    ) -> Committed | CompactResult: ...
    async def _walk_queue(
        self, queue: CandidateQueue, *, owner: bool
    ) -> Committed | CompactResult | AttemptFailure | None:
        """Walk ``queue``. For the owner of a managed continuation its failure (None: it could
        not be used) is returned for ``_recover``; otherwise the walk ends the request."""
        while True:
            slot = await queue.next_slot(client_key_id=self.request.client_api_key_id)
            if slot is None:
                break
            self._keep_alive.slot = slot
            try:
                outcome = await self._attempt_with_refresh(slot)
                if owner and isinstance(outcome, AttemptFailure):
                    outcome = await self._retry_owner_with_replay(slot, outcome)
            except BaseException:
                # Cancelled (the client left) or failed half-way: the slot must not wait for
                # its TTL. Shielded so the release itself survives the cancellation.
                await asyncio.shield(scheduler.release(slot))
                raise
            if not isinstance(outcome, AttemptFailure):
                self._note(slot)
                return outcome
            await scheduler.release(slot)
            self._note(slot, outcome)
            if outcome.rotates:
                await apply_account_effect(slot.account, outcome)
            if owner:
                return outcome
            if not outcome.rotates:
                self._give_up(outcome)
        if owner:
            return None
        if not self._notes:
            self._fail(ALL_BUSY if queue.timed_out else NO_ACCOUNTS)
        last = self._notes[-1].failure
        assert last is not None  # only the attempt that is returned is noted without a failure
        self._give_up(last)

    def _note(self, slot: Slot, failure: AttemptFailure | None = None) -> None:
        self._notes.append(AttemptNote(self._attempt_index, slot.account.id, failure))
        self._attempt_index += 1

    async def _call(self, slot: Slot) -> Committed | CompactResult | AttemptFailure:
        """One attempt on ``slot``'s account with the request as it is sent now."""
        return await call_account(
            self._strategy,
            sent=self._sent,
            slot=slot,
            attempt_index=self._attempt_index,
            cookies=self._cookies,
        )

    async def _attempt_with_refresh(self, slot: Slot) -> Committed | CompactResult | AttemptFailure:
        outcome = await self._call(slot)
        # A 401: one refresh of this account and one retry on it (token_retry).
        if (
            not self._token_refresh_spent
            and wants_token_refresh(outcome, slot.account)
            and (self._spend_token_refresh() or await refresh_for_retry(slot.account))
        ):
            self._note(slot, outcome)
            outcome = await self._call(slot)
            if wants_token_refresh(outcome, slot.account):
                await give_up_after_refresh(slot.account)
        return outcome

    async def _owner_next(self, failure: AttemptFailure | None) -> Next:
        has_replay = False
        if failure is None or is_recoverable(failure):
            assert self._continuity is not None  # an owner: only a managed continuation has one
            has_replay = await self._continuity.history() is not None
        return after_owner_failure(
            failure, has_replay=has_replay, same_account_replay_spent=self._replay_spent
        )

    async def _retry_owner_with_replay(
        self, slot: Slot, failure: AttemptFailure
    ) -> Committed | CompactResult | AttemptFailure:
        """A history error (or an unavailable continuation) on the owner: once, the full
        replay on the same account and slot."""
        if await self._owner_next(failure) is not Next.RETRY_SAME_WITH_REPLAY:
            return failure
        self._note(slot, failure)
        self._replay_spent = True
        assert self._continuity is not None  # an owner: only a managed continuation has one
        self._sent = await replay_request(self.request, self._continuity)
        return await self._attempt_with_refresh(slot)

    async def _recover(
        self, failure: AttemptFailure | None, *, owner_timed_out: bool
    ) -> CandidateQueue:
        """After the owner: the other accounts with the full replay, or the client's error."""
        decision = await self._owner_next(failure)
        assert self._continuity is not None  # an owner: only a managed continuation has one
        if decision is Next.ROTATE_WITH_REPLAY:
            self._sent = await replay_request(self.request, self._continuity)
            return CandidateQueue(self._others, self.request.scheduler_settings)
        if failure is None and owner_timed_out and decision is Next.UNAVAILABLE:
            self._fail(ALL_BUSY)
        if decision is Next.UNAVAILABLE:
            self._final_failure = failure
            self._fail(PREVIOUS_RESPONSE_UNAVAILABLE)
        if decision is Next.BUSY:
            self._final_failure = failure
            self._fail(CONTINUATION_CONNECTION_BUSY)
        assert failure is not None  # no failure (an owner not used) is a rotation or unavailable
        self._give_up(failure)

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
        error = client_error_for(failure, self._exhausted_count)
        self._fail(for_upstream_refusal(error, failure, self.request))

    def _spend_token_refresh(self) -> bool:
        """Mark this request's one token refresh as used; False, so that the condition it
        sits in goes on to the refresh itself."""
        self._token_refresh_spent = True
        return False
