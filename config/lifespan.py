"""ASGI lifespan: on shutdown, let the last requests unwind, write the proxy's pending ledger
batch, then close connections (the order and budget are config/drain.py's)."""

from __future__ import annotations

import logging

from config.drain import LEDGER_SECONDS, UNWIND_SECONDS, InFlightRequests

logger = logging.getLogger(__name__)


def make_lifespan(requests: InFlightRequests):
    """The lifespan application of ``requests`` (the tracked HTTP application)."""

    async def lifespan(scope, receive, send) -> None:
        from proxy.lifecycle import shutdown

        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # uvicorn has cancelled what outlived the drain: their slots and ledger
                # entries are handed over while they unwind, so wait for that first.
                still_running = await requests.wait_finished(UNWIND_SECONDS)
                if still_running:
                    logger.warning("%d request(s) still unwinding at shutdown", still_running)
                await shutdown(grace_seconds=LEDGER_SECONDS)
                await send({"type": "lifespan.shutdown.complete"})
                return

    return lifespan
