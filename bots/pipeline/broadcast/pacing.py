"""The send loop's side of the shared limiter (``bots.outbound.limiter``: ~30 a second for the
bot, one a second per chat, nobody inside a retry_after).

A permit is waited for only while it can come before the caller's deadline: a wait that would
outlast it is answered at once with the seconds still to wait (nothing is slept that cannot end
in a permit), so that the loop can end its run and queue the next one after the wait. Calls
into the support group (the control message's edits) wait at most EDIT_PERMIT_TIMEOUT, and a
429 there blocks the group's bucket for every process.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from typing import TypeVar

from bots.clients.telegram import TelegramRetryableError
from bots.outbound.limiter import (
    IN_FLIGHT_POLL,
    LONGEST_SLEEP,
    OutboundLimiter,
    Permit,
    Priority,
)

# A 429 without retry_after (Telegram always sends one; never trust that) blocks this long.
DEFAULT_RETRY_AFTER_SECONDS = 3
# How long an edit of the control message may wait for its permit.
EDIT_PERMIT_TIMEOUT = 30.0

Result = TypeVar("Result")


class NoPermitInTime(TelegramRetryableError):
    """No permit for a call into the support group within EDIT_PERMIT_TIMEOUT: the bot is held
    back (a retry_after) for ``retry_after`` seconds more."""

    def __init__(self, *, wait: float) -> None:
        super().__init__(
            method="editMessageText",
            status=None,
            description=f"no send permit within {EDIT_PERMIT_TIMEOUT:.0f}s",
            retry_after=math.ceil(wait),
        )


class Pacing:
    """Permits from one bot's limiter, waited for on ``monotonic``'s clock."""

    def __init__(self, limiter: OutboundLimiter, *, monotonic: Callable[[], float]) -> None:
        self.limiter = limiter
        self.monotonic = monotonic
        self.sleep = time.sleep

    def permit(
        self,
        *,
        chat_id: int,
        priority: Priority,
        deadline: float,
        on_wait: Callable[[float], None],
    ) -> Permit | float:
        """A permit, waited for until ``deadline`` (``on_wait`` runs before every sleep); or,
        when the wait outlasts the deadline, the seconds still to wait (asked at once). A wait
        for a call still in flight (its lease, not a real wait) is asked again within
        IN_FLIGHT_POLL."""
        permit_id = secrets.token_hex(8)  # one place among the limiter's waiters
        while True:
            outcome, in_flight = self.limiter.poll(
                chat_id=chat_id, priority=priority, permit_id=permit_id
            )
            if isinstance(outcome, Permit):
                return outcome
            wait = min(outcome, IN_FLIGHT_POLL) if in_flight else outcome
            if self.monotonic() + wait > deadline:
                self.limiter.withdraw(chat_id=chat_id, permit_id=permit_id)
                return wait
            on_wait(outcome)
            self.sleep(min(wait, LONGEST_SLEEP))

    def release(self, permit: Permit) -> None:
        self.limiter.release(permit)

    def block_the_bot(self, *, seconds: float) -> None:
        """A private chat's 429: the bot's overall limit, for every call of the bot."""
        self.limiter.block(seconds=seconds)

    def in_group(
        self, call: Callable[[], Result], *, chat_id: int, keep_alive: Callable[[], None]
    ) -> Result:
        """Run a call into the support group ``chat_id`` under the limiter (a 429 is learned);
        ``keep_alive`` runs while the permit is waited for and before the call. Raises
        NoPermitInTime (with the wait still ahead as its retry_after) when the permit would
        come after EDIT_PERMIT_TIMEOUT."""
        permit = self.permit(
            chat_id=chat_id,
            priority=Priority.CARD,
            deadline=self.monotonic() + EDIT_PERMIT_TIMEOUT,
            on_wait=lambda seconds: keep_alive(),
        )
        if not isinstance(permit, Permit):
            raise NoPermitInTime(wait=permit)
        try:
            keep_alive()
            return call()
        except TelegramRetryableError as error:
            if error.status == 429:
                # A 429 in the group blocks the group's bucket (for every process).
                self.limiter.learn_retry_after(
                    chat_id=chat_id, seconds=error.retry_after or DEFAULT_RETRY_AFTER_SECONDS
                )
            raise
        finally:
            self.limiter.release(permit)
