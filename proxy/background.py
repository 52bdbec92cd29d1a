"""Running the async request-path helpers (scheduler slots, usage fetch) from Celery tasks.

A task is synchronous; it runs one coroutine on a fresh event loop and closes that loop's
PostgreSQL pool, Redis client and HTTP session before returning (they belong to the loop).
Django's ORM must not be used inside the coroutine (it refuses to run in an event loop): read
rows before, write after, or use the loop's own psycopg pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from proxy.loop_resources import close_current_loop_resources

Result = TypeVar("Result")


def run_coroutine(awaitable: Awaitable[Result]) -> Result:
    """Run ``awaitable`` to completion on a new event loop and return its result."""

    async def run_and_close() -> Result:
        try:
            return await awaitable
        finally:
            await close_current_loop_resources()

    return asyncio.run(run_and_close())
