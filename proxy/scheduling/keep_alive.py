"""Signs of life for a call that is still running (issue 34 item 6).

An account slot (``proxy.scheduling.scheduler``) and a key's in-flight entry
(``proxy.policies.counters``) are ZSET members scored by their last sign of life; members older
than ``SCHEDULER_SLOT_TTL_SECONDS`` count as a crashed worker's and are dropped by the next
acquire or admission. A call that simply takes longer than the TTL — a stream, a non-stream
read, a compact, a non-stream chat call — must therefore say it is alive, or a second request
takes its slot and ``max_concurrent_per_account`` (or the key's concurrency) is exceeded.

``KeepAlive`` does that for one dispatch: every quarter of the TTL, while it runs, one pipelined
round trip refreshes the slot the dispatch holds now (it changes as the dispatch moves between
accounts) and the key's in-flight member. It is a timer on the event loop, not a task, and
touches Redis only when it fires: a request shorter than a quarter of the TTL (nearly all of
them) costs no Redis call for it, and a key without a policy refreshes only its slot.
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings

from common import clock
from proxy.domain.dispatch_types import DispatchRequest
from proxy.domain.slots import Slot
from proxy.loop_resources import async_redis
from proxy.policies import admission, counters
from proxy.scheduling.scheduler import queue_heartbeat

logger = logging.getLogger(__name__)


class KeepAlive:
    """Refreshes ``slot`` (settable; the dispatch sets each slot it takes — a released one's
    refresh is a no-op, ZADD XX) and ``request``'s in-flight member from ``start()`` to
    ``stop()`` (or as a ``with`` block), on the event loop that runs the call."""

    def __init__(self, request: DispatchRequest, slot: Slot | None = None) -> None:
        self.request = request
        self.slot = slot
        self._timer: asyncio.TimerHandle | None = None
        self._beat: asyncio.Task | None = None
        self._interval = settings.SCHEDULER_SLOT_TTL_SECONDS / 4

    def start(self) -> KeepAlive:
        if self._timer is None:
            self._schedule()
        return self

    def __enter__(self) -> KeepAlive:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No more refreshes (a refresh already under way finishes: ZADD XX never revives a
        member that was released meanwhile)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._interval, self._fire)

    def _fire(self) -> None:
        if self._beat is None or self._beat.done():  # a slow Redis: never two at once
            self._beat = asyncio.get_running_loop().create_task(self.refresh())
        self._schedule()

    async def refresh(self) -> None:
        """One round trip: the slot's and the in-flight member's scores and TTLs. Never raises
        (a failed refresh is retried by the next; the TTL is four refreshes long)."""
        member = admission.in_flight_member(self.request)
        slot = self.slot
        if slot is None and member is None:
            return
        at_ms = clock.now_ms()
        try:
            redis = await async_redis.get()
            async with redis.pipeline(transaction=False) as pipeline:
                if slot is not None:
                    queue_heartbeat(pipeline, slot, at_ms=at_ms, ttl_ms=counters.slot_ttl_ms())
                if member is not None:
                    # in_flight_member: a member only for a request with a key policy.
                    assert self.request.key_policy is not None
                    counters.queue_heartbeat(pipeline, self.request.key_policy, member, at_ms=at_ms)
                await pipeline.execute()
        except Exception:
            logger.warning("keep-alive of a running call failed", exc_info=True)
