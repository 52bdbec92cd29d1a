"""ASGI lifespan: on shutdown, let the proxy finish its ledger writes and close connections."""

from __future__ import annotations


async def lifespan(scope, receive, send) -> None:
    from proxy.lifecycle import shutdown

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
