"""A cancelled task stays cancelled: Python 3.11's ``asyncio.wait_for`` returned the result
instead when the cancel landed as the awaited future completed (common/asyncio_compat.py), and
redis-py sends every command of the proxy's client under it. A /v1 request whose client left
then went on waiting for an account slot as if nobody had cancelled it."""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest
from django.conf import settings

from proxy import loop_resources


def _run(coroutine):
    return asyncio.run(coroutine)


def test_a_cancel_landing_as_the_awaited_future_completes_is_raised():
    async def scenario() -> str:
        inner = asyncio.get_running_loop().create_future()

        async def waiting() -> str:
            await asyncio.wait_for(inner, timeout=10)
            return "went on as if not cancelled"

        task = asyncio.create_task(waiting())
        await asyncio.sleep(0)  # the task now waits on ``inner``
        inner.set_result("done")  # the result arrives ...
        task.cancel()  # ... and the cancel with it, before the task runs again
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    assert _run(scenario()) == "cancelled"


def test_wait_for_still_times_out_and_returns_results():
    async def scenario():
        assert await asyncio.wait_for(asyncio.sleep(0, result="ready"), timeout=1) == "ready"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(5), timeout=0.01)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(5), timeout=0)
        assert await asyncio.wait_for(asyncio.sleep(0, result="no limit"), timeout=None) == (
            "no limit"
        )

    _run(scenario())


def test_a_timeout_in_a_task_that_once_caught_a_cancel_is_still_a_timeout():
    """A task that caught a cancel and went on (a clean-up after its client left) and then
    waits with a timeout gets TimeoutError, as on 3.12 (3.11.2's asyncio.timeout raised
    CancelledError here, past every ``except TimeoutError``)."""

    async def scenario() -> str:
        async def cleaning_up() -> str:
            with contextlib.suppress(asyncio.CancelledError):  # not uncancelled: it goes on
                await asyncio.sleep(10)
            try:
                await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)
            except TimeoutError:
                return "timed out"
            return "not timed out"

        task = asyncio.create_task(cleaning_up())
        await asyncio.sleep(0)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled instead of timed out"

    assert _run(scenario()) == "timed out"


def test_every_cancel_of_a_task_busy_on_the_proxys_redis_client_ends_it():
    """Cancelled at random moments of back-to-back commands (the way a waiting request polls),
    the task ends every time. Before the fix about one in twenty went on (the first stops the
    test)."""

    async def scenario() -> list[int]:
        client = await loop_resources.async_redis.get()
        key = f"{settings.REDIS_KEY_PREFIX}test:cancel"
        went_on = []
        finished = False  # what ends a task that went on, so that the test fails, not hangs
        try:
            for attempt in range(300):

                async def polling(number: int = attempt) -> None:
                    while not finished:
                        await client.set(key, number, px=10_000)
                        await asyncio.sleep(0)

                task = asyncio.create_task(polling())
                await asyncio.sleep(random.random() * 0.003)
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=2)
                if not done:
                    went_on.append(attempt)
                    break
            await client.delete(key)
        finally:
            finished = True
            await asyncio.sleep(0.1)
            await loop_resources.close_current_loop_resources()
        return went_on

    assert _run(scenario()) == []
