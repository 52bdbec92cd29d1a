"""A graceful stop of the web process on SIGTERM (what compose and Kubernetes send).

The budget is ``WEB_DRAIN_TIMEOUT_SECONDS`` from the signal to the exit:

1. at once: the listening socket closes (no new connections; uvicorn, and the supervisor of
   several workers in ``config.run``) and idle keep-alive connections are closed;
2. requests in flight — streams included — may finish for ``request_budget()`` seconds (the
   timeout minus ``RESERVE_SECONDS``), then uvicorn cancels the rest. The /v1 handler passes
   the cancellation on as ``SERVER_SHUTDOWN``: a stream ends with a ``server_shutdown``
   failure event and [DONE], its slot is released and its ledger entry (an ops_error_logs
   row, 503 ``server_shutdown``) is handed to the writer;
3. in the ASGI lifespan shutdown (``config.lifespan``): wait up to ``UNWIND_SECONDS`` for the
   cancelled requests to finish unwinding (``InFlightRequests``), then write the pending ledger
   batch and key touches (up to ``LEDGER_SECONDS``), then close the pools.

What is left of the reserve covers the supervisor noticing the signal (it polls every 0.5 s)
and the interpreter's exit. Only SIGKILL (or a database down for the whole final write) loses
ledger rows; slots of a killed process are reclaimed after SCHEDULER_SLOT_TTL_SECONDS.
"""

from __future__ import annotations

import asyncio
import weakref

from django.conf import settings

UNWIND_SECONDS = 1.0
LEDGER_SECONDS = 3.0
RESERVE_SECONDS = 5.0
MINIMUM_DRAIN_SECONDS = 6


def request_budget() -> float:
    """Seconds requests in flight may keep running after SIGTERM (uvicorn's
    ``timeout_graceful_shutdown``)."""
    return settings.WEB_DRAIN_TIMEOUT_SECONDS - RESERVE_SECONDS


class InFlightRequests:
    """ASGI middleware remembering the task of every HTTP request still running, so that the
    lifespan shutdown can wait for requests that uvicorn cancelled to finish unwinding
    (uvicorn itself moves on to the shutdown right after cancelling them)."""

    def __init__(self, application) -> None:
        self.application = application
        self._tasks: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()

    async def __call__(self, scope, receive, send):
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            return await self.application(scope, receive, send)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def wait_finished(self, timeout: float) -> int:
        """Wait until no request of this event loop runs (at most ``timeout`` s); return how
        many were still running at the end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            running = [task for task in self._tasks if task.get_loop() is loop and not task.done()]
            if not running or loop.time() >= deadline:
                return len(running)
            await asyncio.wait(running, timeout=max(0.0, deadline - loop.time()))
