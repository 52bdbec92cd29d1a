"""What a web process does when it stops: end the idempotent calls still running for clients
that left (their claims given back), finish the ledger and the key-policy settlements (a slot
left behind would hold a key's concurrency until its TTL), then close its connections."""

from __future__ import annotations

import asyncio
import logging

from proxy.ledger import writer as ledger_writer
from proxy.loop_resources import close_current_loop_resources
from proxy.policies.admission import await_pending_settlements
from proxy.v1.auth import flush_key_touches
from proxy.v1.idempotency import end_detached_calls

logger = logging.getLogger(__name__)
SHUTDOWN_GRACE_SECONDS = 5


async def shutdown(*, grace_seconds: float = SHUTDOWN_GRACE_SECONDS) -> None:
    """End the detached idempotent calls, wait (at most ``grace_seconds``) for scheduled
    ledger writes, key-policy settlements and key touches, then close resources."""
    try:
        if still_running := await end_detached_calls(grace_seconds):
            logger.warning("%d idempotent call(s) still unwinding at shutdown", still_running)
        await asyncio.wait_for(ledger_writer.await_pending_writes(), grace_seconds)
        await asyncio.wait_for(await_pending_settlements(), grace_seconds)
        await flush_key_touches()
    except TimeoutError:
        logger.warning("ledger writes still pending after %ss at shutdown", grace_seconds)
    finally:
        await close_current_loop_resources()
