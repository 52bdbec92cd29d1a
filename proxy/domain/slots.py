"""What a request asks of the scheduler and what it gets: the key's scheduler settings and the
concurrency slot held on an account (taken and released by ``proxy.scheduling.scheduler``). Here,
below the scheduler, because the request and report types carry both."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from proxy.accounts import AccountView


@dataclass(frozen=True)
class SchedulerSettings:
    strategy: str
    max_concurrent_per_account: int
    request_interval_ms: int

    @property
    def slot_ttl_ms(self) -> int:
        return settings.SCHEDULER_SLOT_TTL_SECONDS * 1000


@dataclass
class Slot:
    """A concurrency slot held on ``account``; ``previous_start_ms`` is the start of the most
    recent other in-flight request on it (for the pacing interval), or None."""

    account: AccountView
    slot_id: str
    previous_start_ms: int | None
