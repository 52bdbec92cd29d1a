"""The lease of an update the inbox holds, kept alive while its holder works (issue 36).

A holder renews it before every Bot API call and while a call waits for its send permit
(``bots.outbound.paced``'s guard); a holder that finds the lease another's makes no further
call. So a lease lapses only when its holder died: a call takes at most the client's 5 + 15 s,
and renewals come at least every LEASE_RENEW_SECONDS.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from bots.clients.telegram import TelegramRetryableError
from bots.services.inbox import LEASE_RENEW_SECONDS, LeasedUpdate, inbox_renew
from common import clock


class LeaseLost(TelegramRetryableError):
    """The update's lease is another holder's now: this holder makes no further call."""

    def __init__(self, update_id: int) -> None:
        super().__init__(
            method="(inbox lease)",
            status=None,
            description=f"update {update_id}: the inbox lease was lost",
        )


class InboxLease:
    """Keeps a holder's lease alive while it works: ``keep()`` (before every Bot API call and
    while a call waits for its permit) renews it when LEASE_RENEW_SECONDS have passed, and
    raises LeaseLost — before the call is made — once it is another holder's."""

    def __init__(
        self,
        leased: LeasedUpdate,
        *,
        clock: Callable[[], datetime] = clock.now,  # not timezone.now: see drain_inbox
        monotonic: Callable[[], float] = clock.monotonic,
    ) -> None:
        self.leased = leased
        self._clock = clock
        self._monotonic = monotonic
        self._renewed_at = monotonic()
        self.lost = False

    def keep(self) -> None:
        if self.lost:
            raise LeaseLost(self.leased.update_id)
        if self._monotonic() - self._renewed_at < LEASE_RENEW_SECONDS:
            return
        if not inbox_renew(leased=self.leased, now=self._clock()):
            self.lost = True
            raise LeaseLost(self.leased.update_id)
        self._renewed_at = self._monotonic()
