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
    if timeout is None:
        return await fut
    # Not asyncio.timeout: before 3.11.7 (Debian's 3.11.2, say) its exit takes every earlier
    # cancel of the task for its own, and a timeout in a task that once caught a cancel raised
    # CancelledError; this is 3.12's rule (the cancels the task already had are not its own).
    current = asyncio.current_task()
    assert current is not None  # awaited: inside a task
    cancelling_before = current.cancelling()
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        timed_out = True
        current.cancel()

    handle = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        result = await fut
    except asyncio.CancelledError:
        if timed_out and current.uncancel() <= cancelling_before:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()
    if timed_out:
        current.uncancel()  # it expired as the result came: the result wins, the cancel is undone
    return result


def install() -> None:
    if sys.version_info >= (3, 12):
        return
    patched: Any = wait_for
    asyncio.wait_for = patched
    asyncio.tasks.wait_for = patched
