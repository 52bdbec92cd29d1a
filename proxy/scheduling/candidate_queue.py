"""The per-request candidate queue (spec §3.3).

The candidate order is frozen when the request starts. Walking it, each account is checked
again (another request may have changed it): no longer eligible → dropped; at its concurrency
limit → parked; otherwise a slot is taken. When only parked accounts remain the request waits for
a slot to free up (polling Redis with a short back-off) until the wait timeout, admitted in its
client key's turn (``fair_admission``). Each account is tried at most once.
"""

from __future__ import annotations

import asyncio

from django.utils import timezone

from common import clock
from proxy.accounts import AccountView
from proxy.domain.slots import SchedulerSettings, Slot
from proxy.scheduling import scheduler
from proxy.scheduling.fair_admission import Waiter
from proxy.scheduling.ranking import rank
from proxy.scheduling.scheduler import ConversationLookup, WaitPolicy
from proxy.selectors import still_eligible


class CandidateQueue:
    def __init__(
        self,
        eligible: list[AccountView],
        settings: SchedulerSettings,
        *,
        limit: int | None = None,
        conversation: ConversationLookup | None = None,
    ):
        self._eligible = eligible
        self._settings = settings
        self._limit = limit
        # Affinity (spec §5.2): the account the conversation's newest record names goes first
        # (still subject to its slots), found by the same Redis call that orders.
        self._conversation = conversation
        self._wait = WaitPolicy()
        self._pending: list[AccountView] = []
        self._parked: list[AccountView] = []
        self._tried = 0
        self._started = False
        self.timed_out = False

    def _within_limit(self) -> bool:
        return self._limit is None or self._tried < self._limit

    async def next_slot(self, *, client_key_id: str | None = None) -> Slot | None:
        """A slot on the next account to try, or None when the queue is exhausted. A request
        that has to wait for one waits in the turn of ``client_key_id`` (its client key)."""
        if not self._within_limit():
            return None
        if not self._started:
            self._started = True
            slot = await self._first()
        else:
            slot = await self._walk()
        if slot is None and self._parked and self._within_limit():
            slot = await self._wait_for_parked(client_key_id)
        if slot is not None:
            self._tried += 1
        return slot

    async def _first(self) -> Slot | None:
        ranking = rank(self._eligible, self._settings.strategy)
        order, slot, _ = await scheduler.order_and_acquire(
            ranking, self._settings, conversation=self._conversation
        )
        if self._limit is not None:
            order = order[: self._limit]
        if slot is None:
            self._parked = order
            return None
        self._pending = [account for account in order if account.id != slot.account.id]
        return slot

    async def _walk(self) -> Slot | None:
        """The pending accounts still eligible, re-read in one query; a slot on the first with
        one free (one Redis call). Those before it are full: parked."""
        if not self._pending:
            return None
        candidates, self._pending = self._pending, []
        live = await still_eligible(candidates, now=timezone.now())
        slot = await scheduler.acquire_first_free(live, self._settings)
        if slot is None:
            self._parked += live
            return None
        index = live.index(slot.account)
        self._parked += live[:index]
        self._pending = live[index + 1 :]
        return slot

    async def _wait_for_parked(self, client_key_id: str | None) -> Slot | None:
        """Poll the parked accounts for a free slot whose turn has come for this request's key
        (one Redis call per poll); the account that frees up is re-read before it is used and
        dropped if it may no longer serve. The request's place in the fair-admission registry
        is given up however the wait ends."""
        deadline = clock.monotonic() + self._wait.timeout_seconds
        pause = self._wait.first_pause
        waiter = Waiter(client_key_id)
        try:
            while self._parked:
                slot = await waiter.take_turn(self._parked, self._settings)
                if slot is not None:
                    self._parked.remove(slot.account)
                    if await still_eligible([slot.account], now=timezone.now()):
                        return slot
                    # Another request marked it meanwhile: give the slot back, look again at
                    # once (the waiter joins again with its arrival number).
                    await scheduler.release(slot)
                    continue
                if clock.monotonic() >= deadline:
                    self.timed_out = True
                    return None
                await asyncio.sleep(waiter.pause_seconds(pause))
                pause = min(pause * 2, self._wait.longest_pause)
            return None
        finally:
            # Shielded: a client that leaves cancels the wait, and its place must go with it.
            await asyncio.shield(waiter.leave())
