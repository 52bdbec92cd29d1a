"""``asyncio.wait_for`` as Python 3.12 has it, for the Python 3.11 these machines run.

On 3.11, ``wait_for`` swallows the caller's cancellation when it lands as the awaited future
completes: it returns the result instead of raising ``CancelledError`` (CPython gh-86296, fixed
in 3.12 by rewriting ``wait_for`` over ``asyncio.timeout``). redis-py (every command under a
socket timeout is sent through it) and psycopg_pool (waiting for a pooled connection) call it on
the request path, so a /v1 request whose client left could go on as if nobody had cancelled it —
measured: about one cancel in twenty landing on a Redis command was lost, and a request waiting
for an account slot kept polling until its wait timed out.

``install()`` (run by ``config/__init__.py``, so in every process started on these settings)
puts 3.12's implementation in its place; on 3.12 and later it does nothing.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

Result = TypeVar("Result")


async def wait_for(fut: Awaitable[Result], timeout: float | None) -> Result:
    """CPython 3.12's ``asyncio.wait_for``: the awaitable's result, ``TimeoutError`` after
    ``timeout`` seconds (the awaitable cancelled), and the caller's own cancellation always
    raised."""
    if timeout is not None and timeout <= 0:
        # No time at all: the result if it is already there, else cancelled and TimeoutError.
        task = asyncio.ensure_future(fut)
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.wait({task})
        try:
            return task.result()
        except asyncio.CancelledError as cancelled:
            raise TimeoutError from cancelled
    async with asyncio.timeout(timeout):
        return await fut


def install() -> None:
    if sys.version_info >= (3, 12):
        return
    patched: Any = wait_for
    asyncio.wait_for = patched
    asyncio.tasks.wait_for = patched
