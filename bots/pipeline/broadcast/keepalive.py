"""What keeps a send loop's claim on its broadcast alive while it runs: the sender lease (one
loop per broadcast, ``bots.services.broadcast_progress``) and the row's heartbeat (a ``sending``
row without one for ten minutes is stale)."""

from __future__ import annotations

from collections.abc import Callable

from django.utils import timezone

from bots.services.broadcast_progress import (
    SENDER_LEASE_REFRESH_SECONDS,
    SENDER_LEASE_SECONDS,
    sender_lease_hold,
)
from bots.services.broadcasts import broadcast_heartbeat

# While the loop waits (a retry_after), its heartbeat is refreshed this often.
HEARTBEAT_SECONDS = 5.0


class LeaseLost(Exception):
    """Another loop holds the broadcast now: this one stops at once, silently."""


class LeftSending(Exception):
    """The row left ``sending`` while the loop waited."""


class Keepalive:
    """The lease and the heartbeat of one run over one broadcast, both last refreshed at
    ``started`` (the run's start: the lease was just taken, the row just read)."""

    def __init__(
        self,
        *,
        bot_id: int,
        broadcast_id: int,
        lease_token: str,
        monotonic: Callable[[], float],
        started: float,
    ) -> None:
        self.bot_id = bot_id
        self.broadcast_id = broadcast_id
        self.lease_token = lease_token
        self.monotonic = monotonic
        self.lease_kept_at = started
        self.heartbeat_at = started

    def keep_lease_if_due(self) -> None:
        """Refresh the lease when it is due; raises LeaseLost when another loop holds it."""
        if self.monotonic() - self.lease_kept_at < SENDER_LEASE_REFRESH_SECONDS:
            return
        if not sender_lease_hold(
            broadcast_id=self.broadcast_id,
            token=self.lease_token,
            ttl_seconds=SENDER_LEASE_SECONDS,
        ):
            raise LeaseLost(f"broadcast {self.broadcast_id}: sender lease lost")
        self.lease_kept_at = self.monotonic()

    def heartbeat(self) -> bool:
        """Refresh the heartbeat now; False when the row left ``sending``."""
        if not broadcast_heartbeat(
            bot_id=self.bot_id, broadcast_id=self.broadcast_id, now=timezone.now()
        ):
            return False
        self.heartbeat_at = self.monotonic()
        return True

    def heartbeat_written(self) -> None:
        """A write of the loop's (a recipient's claim) refreshed the heartbeat as well."""
        self.heartbeat_at = self.monotonic()

    def while_waiting(self, seconds: float) -> None:
        """Called while the limiter makes the loop wait: keep the lease and the heartbeat;
        raises LeftSending when the row left ``sending``."""
        self.keep_lease_if_due()
        if self.monotonic() - self.heartbeat_at >= HEARTBEAT_SECONDS and not self.heartbeat():
            raise LeftSending(f"broadcast {self.broadcast_id} left sending")
