"""Bulk deletions into the support group (/purgemsg, /wipealldata): pace, budget, hand-off.

Both commands call one Telegram method per item (deleteMessage per message, deleteForumTopic per
topic), possibly thousands of times. Three rules keep that from turning into a storm of 429s or a
webhook that runs for minutes:

* **Pace.** Calls start at most ``TELEGRAM_DELETES_PER_SECOND`` a second (``Pacer``), and only one
  bulk job runs per bot at a time (``bots.services.bulk_lock``), so the pace holds for the
  group as a whole.
* **retry_after.** A 429 pauses the pace for exactly as long as Telegram asks (after the client's
  own single in-place retry of short waits), then the same item is tried again.
* **Budget.** A webhook (or an operator's page) does at most ``INLINE_BUDGET_SECONDS`` of work —
  well inside Telegram's 60 s before it redelivers — then the rest continues in a Celery task,
  which works in chunks of ``TASK_CHUNK_SECONDS`` and re-enqueues itself until done. Jobs carry
  a cursor (the last item handled) and their counts, so each chunk resumes where the last ended.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from celery import current_app

from bots.clients.telegram import TelegramRetryableError
from bots.outbound.limiter import Priority
from bots.outbound.paced import NoSendPermit, outbound_priority
from bots.pipeline.context import BotContext, worker_context
from bots.services.bulk_lock import bulk_job_has_finished, bulk_lock_hold, bulk_lock_release
from common import clock

logger = logging.getLogger(__name__)

# What became of one item (a message, a topic); the jobs count each.
DELETED = "deleted"
GONE = "gone"  # deleted already (by hand, or by an earlier attempt of the same job)
FAILED = "failed"  # refused for good (e.g. the bot lacks the right)

# Work done inside a webhook (or an operator's request) before the rest goes to Celery.
INLINE_BUDGET_SECONDS = 5.0
# One Celery task's share of a long job (under the worker's 240 s soft time limit).
TASK_CHUNK_SECONDS = 120.0
# The lock's TTL while a job runs (refreshed every few seconds): a crashed holder frees it
# before Telegram redelivers the command (60 s).
RUNNING_LOCK_SECONDS = 30.0
LOCK_REFRESH_SECONDS = 5.0
# The lock's TTL while a continuation waits in the Celery queue.
QUEUED_LOCK_SECONDS = 15 * 60.0
# 429s in a row for one item before the job gives up on this run (Telegram's own retry_after
# is honoured each time).
MAX_RATE_LIMITED_WAITS = 5
# A continuation that met a retryable failure (5xx, network) tries again after this many
# seconds, at most MAX_TASK_RETRIES times in a row.
TASK_RETRY_SECONDS = 10.0
MAX_TASK_RETRIES = 5
# Why a continuation stopped before its end (``continue_in_worker``'s ``abandon`` is told).
LOCK_TAKEN = "another purge or wipe holds the lock"
NO_BOT_CONFIGURATION = "the worker has no bot configuration"


class Pacer:
    """Spaces calls: a call never starts sooner than 1/``per_second`` after the previous one,
    nor before a pause (a 429's retry_after) has passed."""

    def __init__(
        self,
        per_second: int,
        *,
        monotonic: Callable[[], float] = clock.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.interval = 1.0 / per_second
        self.monotonic = monotonic
        self._sleep = sleep
        self._next_start = 0.0

    def wait(self) -> None:
        """Block until the next call may start, and reserve that start."""
        now = self.monotonic()
        if self._next_start > now:
            self._sleep(self._next_start - now)
            now = self._next_start
        self._next_start = now + self.interval

    def pause(self, seconds: float) -> None:
        """No call before ``seconds`` from now."""
        self._next_start = max(self._next_start, self.monotonic() + seconds)


@dataclass(frozen=True)
class Budget:
    """How much of a job this run may do: until ``deadline`` (a ``Pacer.monotonic`` reading,
    None: no deadline) and at most ``max_items`` items (None: no limit)."""

    deadline: float | None
    max_items: int | None

    @classmethod
    def inline(cls, pacer: Pacer, *, per_second: int) -> Budget:
        # The item cap makes the hand-off point deterministic at the configured pace; the
        # deadline covers a Telegram that answers slowly.
        return cls(
            deadline=pacer.monotonic() + INLINE_BUDGET_SECONDS,
            max_items=max(1, math.floor(INLINE_BUDGET_SECONDS * per_second)),
        )

    @classmethod
    def task_chunk(cls, pacer: Pacer) -> Budget:
        return cls(deadline=pacer.monotonic() + TASK_CHUNK_SECONDS, max_items=None)


@dataclass(frozen=True)
class Stopped:
    """The run ended before the last item: continue after ``countdown`` seconds."""

    countdown: float = 0.0


class LockLost(Exception):
    """Another job holds the bulk-deletion lock now: this one must stop at once."""


class LockKeeper:
    """Keeps the job's bulk-deletion lock alive while it runs (a Redis call every few seconds)."""

    def __init__(self, *, bot_id: int, token: str, pacer: Pacer) -> None:
        self.bot_id = bot_id
        self.token = token
        self._pacer = pacer
        self._refreshed_at = pacer.monotonic()

    def keep(self, ttl_seconds: float = RUNNING_LOCK_SECONDS) -> None:
        """Extend the lock now; raises LockLost when it is no longer ours."""
        if not bulk_lock_hold(bot_id=self.bot_id, token=self.token, ttl_seconds=ttl_seconds):
            raise LockLost(f"bulk-deletion lock of bot {self.bot_id} lost")
        self._refreshed_at = self._pacer.monotonic()

    def keep_if_due(self) -> None:
        if self._pacer.monotonic() - self._refreshed_at >= LOCK_REFRESH_SECONDS:
            self.keep()


def run_paced(
    items: Iterable[int],
    attempt: Callable[[int], str],
    *,
    pacer: Pacer,
    budget: Budget,
    lock: LockKeeper,
    record: Callable[[int, str], None],
) -> Stopped | None:
    """Run ``attempt(item)`` for each item in order, at the pacer's pace, within ``budget``.

    ``attempt`` returns the item's outcome (e.g. "deleted", "gone", "failed"), handed with the
    item to ``record`` (which advances the job's cursor and counts). A 429 with retry_after
    pauses the pacer and retries the item — or, when the wait would overrun the deadline, stops
    with that wait as the countdown. Returns None when every item was handled, ``Stopped``
    when the budget ran out first (or the shared outbound limiter gave no permit within the
    request's budget: the rest goes to Celery). Raises TelegramRetryableError for other
    retryable failures (and after MAX_RATE_LIMITED_WAITS 429s for one item), LockLost when the
    lock changed hands. Deletions yield to live relays and card edits (``Priority.BULK``).
    """
    with outbound_priority(Priority.BULK):
        try:
            return _run_paced(items, attempt, pacer=pacer, budget=budget, lock=lock, record=record)
        except NoSendPermit:
            return Stopped()


def _run_paced(
    items: Iterable[int],
    attempt: Callable[[int], str],
    *,
    pacer: Pacer,
    budget: Budget,
    lock: LockKeeper,
    record: Callable[[int, str], None],
) -> Stopped | None:
    for handled, item in enumerate(items):
        if budget.max_items is not None and handled >= budget.max_items:
            return Stopped()
        if budget.deadline is not None and pacer.monotonic() >= budget.deadline:
            return Stopped()
        lock.keep_if_due()
        waits = 0
        while True:
            pacer.wait()
            try:
                outcome = attempt(item)
                break
            except TelegramRetryableError as error:
                if error.retry_after is None or waits >= MAX_RATE_LIMITED_WAITS:
                    raise
                waits += 1
                wait = float(error.retry_after)
                if budget.deadline is not None and pacer.monotonic() + wait > budget.deadline:
                    return Stopped(countdown=wait)
                logger.info("bulk deletion: 429 on %s, waiting %ss as asked", item, wait)
                # The pacer sleeps through the wait: the lock must outlive it.
                lock.keep(ttl_seconds=wait + RUNNING_LOCK_SECONDS)
                pacer.pause(wait)
        record(item, outcome)
    return None


class BulkJob(Protocol):
    """What the continuation machinery needs of a job (``PurgeJob``, ``WipeJob``): a dataclass
    with the bot, its lock token and the count of retryable failures in a row."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # a dataclass (dataclasses.asdict)
    bot_id: int
    lock_token: str
    retries: int


def queue_continuation(job: BulkJob, task_name: str, *, countdown: float) -> None:
    """Queue the Celery task named ``task_name`` (``bots.task_names``; it takes ``job=<the job
    as a dict>``) after ``countdown`` seconds; the lock is kept for it meanwhile, past the
    countdown. Raises LockLost when it is no longer ours."""
    if not bulk_lock_hold(
        bot_id=job.bot_id, token=job.lock_token, ttl_seconds=countdown + QUEUED_LOCK_SECONDS
    ):
        raise LockLost(f"bulk-deletion lock of bot {job.bot_id} lost before the hand-off")
    current_app.send_task(task_name, kwargs={"job": dataclasses.asdict(job)}, countdown=countdown)


def continue_in_worker(
    job: BulkJob,
    *,
    advance: Callable[[BotContext, Pacer, Budget], Stopped | None],
    hand_off: Callable[[float], None],
    finish: Callable[[BotContext], str],
    interrupt: Callable[[BotContext], str],
    abandon: Callable[[str], None],
) -> str | None:
    """One Celery chunk of a job: keep the lock, ``advance`` from the job's cursor for up to
    TASK_CHUNK_SECONDS, then ``finish`` (lock released) or ``hand_off`` the next chunk.

    A retryable failure queues the chunk again after TASK_RETRY_SECONDS, at most
    MAX_TASK_RETRIES times in a row; then ``interrupt`` reports and the lock is released. A job
    whose lock someone else holds now (it waited too long in the queue and another job started)
    stops without a report, and so does one whose worker has no bot configuration: ``abandon``
    is told why (``bots.pipeline.bulk_audit``). Returns what ``finish`` or ``interrupt``
    returned, None otherwise.
    """
    if bulk_job_has_finished(bot_id=job.bot_id, token=job.lock_token):
        # A late copy of a chunk (redelivered after the job ended): re-taking the lapsed lock
        # would delete what was created since the job finished.
        logger.warning("bulk deletion of bot %s: a chunk of an ended job; ignored", job.bot_id)
        return None
    ctx = worker_context(job.bot_id)
    if ctx is None:
        bulk_lock_release(bot_id=job.bot_id, token=job.lock_token)
        abandon(NO_BOT_CONFIGURATION)
        return None
    pacer = Pacer(ctx.config.deletes_per_second)
    try:
        LockKeeper(bot_id=job.bot_id, token=job.lock_token, pacer=pacer).keep()
        stopped = advance(ctx, pacer, Budget.task_chunk(pacer))
    except LockLost:
        _lock_taken(job, abandon)
        return None
    except TelegramRetryableError as error:
        if job.retries >= MAX_TASK_RETRIES:
            logger.error("bulk deletion of bot %s interrupted: %s", job.bot_id, error)
            try:
                return interrupt(ctx)
            finally:
                bulk_lock_release(bot_id=job.bot_id, token=job.lock_token)
        job.retries += 1
        # A 429 that outlasted MAX_RATE_LIMITED_WAITS: the next chunk waits out its retry_after.
        _hand_off(job, hand_off, max(TASK_RETRY_SECONDS, float(error.retry_after or 0)), abandon)
        return None
    job.retries = 0
    if stopped is not None:
        _hand_off(job, hand_off, stopped.countdown, abandon)
        return None
    try:
        return finish(ctx)
    finally:
        bulk_lock_release(bot_id=job.bot_id, token=job.lock_token)


def _hand_off(
    job: BulkJob,
    hand_off: Callable[[float], None],
    countdown: float,
    abandon: Callable[[str], None],
) -> None:
    try:
        hand_off(countdown)
    except LockLost:  # the lock changed hands before the next chunk could be queued
        _lock_taken(job, abandon)


def _lock_taken(job: BulkJob, abandon: Callable[[str], None]) -> None:
    logger.warning("bulk deletion of bot %s stopped: another job holds the lock", job.bot_id)
    abandon(LOCK_TAKEN)
