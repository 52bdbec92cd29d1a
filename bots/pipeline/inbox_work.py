"""Working on an update the inbox holds (issue 36): the webhook right after storing it, a
Celery worker later (``drain_inbox``) — the same pipeline, the same limiter, the same claim.

An attempt ends in one of these ways:

* **finished** — the pipeline ran to its end (permanent Telegram errors are swallowed by
  design, spec §6): the row deleted, the claim processed;
* **given back, not counted** — a call got no send permit within the attempt's budget (the bot
  pacing itself under Telegram's limits), a deletion of the user (or a wipe) runs, Telegram
  answered 429 (its ``retry_after`` is honoured: the row is due again after it), or Redis was
  unreachable: the row waits, with the steps the attempt settled (its card, its rate count)
  kept, so the next attempt does not repeat them;
* **given back, counted** — a retryable failure (a 5xx, the network, the database, a bug): the
  row is due again after a back-off (1 min, 1 min, 2 min, 5 min, then 10 min), and once MAX_ATTEMPTS
  attempts failed the update is poison: its claim is marked failed, its row deleted;
* **lease lost** — another holder took the row over (this one was taken for dead): no further
  call was made, and the other holder finishes it.

A take-over never repeats what the ledger records: a user's message or an admin's reply
already relayed is not sent again (``relay_inbound``, ``handle_outbound``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError
from redis.exceptions import RedisError

from bots.clients.telegram import TelegramRetryableError
from bots.conf import BotConfig, load_config
from bots.models import UpdateStatus
from bots.outbound.paced import NoSendPermit
from bots.pipeline.context import UpdateContext
from bots.pipeline.inbox_queue import queue_drain
from bots.pipeline.router import route_update
from bots.services.deletion_fence import DeletionInProgress, deletion_fenced
from bots.services.inbox import (
    LeasedUpdate,
    inbox_claim_next,
    inbox_finish,
    inbox_release,
    new_lease_token,
)
from bots.services.inbox_lease import InboxLease, LeaseLost
from common import clock

logger = logging.getLogger(__name__)

# How long one worker attempt may wait for all its send permits together (the webhook's
# attempt waits TELEGRAM_SEND_BUDGET_MS): beyond it the row is given back and taken again.
WORKER_SEND_BUDGET_SECONDS = 20.0
# A row whose call got no permit is tried again when the limiter expects one: at the soonest
# after NO_PERMIT_RETRY_SECONDS, at the latest after NO_PERMIT_RETRY_MAX_SECONDS — then a worker
# waits for the permit itself (up to WORKER_SEND_BUDGET_SECONDS), ready to take it the moment it
# comes (the limiter's guess is for the next slot, which another caller may take first).
NO_PERMIT_RETRY_SECONDS = 0.5
NO_PERMIT_RETRY_MAX_SECONDS = 10.0
# A row that waits for a deletion (or for Redis) is tried again after this long.
DELETION_RETRY_SECONDS = 5.0
# After the n-th failed attempt a row is due again after BACKOFF_SECONDS[n - 1] (the last one
# for the rest). The first two are the 60 s Telegram's redelivery took before (spec §6: a
# stale claim is taken over after 60 s), which the per-user windows assume (a notice slot a
# failed attempt used is free again); with MAX_ATTEMPTS = 3 the fourth attempt, 4 minutes
# after the first, declares the update poison — longer MAX_ATTEMPTS wait longer between tries.
BACKOFF_SECONDS = (60.0, 60.0, 120.0, 300.0, 600.0)
# One drain's share of the worker (then it queues the next drain, if rows are left).
DRAIN_SECONDS = 50.0


class Ending(enum.StrEnum):
    FINISHED = "finished"
    WAITING = "waiting"  # given back, not counted
    FAILED = "failed"  # given back, counted
    POISON = "poison"
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True)
class Outcome:
    ending: Ending
    due_in: float = 0.0  # WAITING / FAILED: seconds until the row is due again
    more_in_conversation: bool = False  # FINISHED / POISON: rows wait behind this one


def backoff_seconds(failed_attempts: int) -> float:
    return BACKOFF_SECONDS[min(max(failed_attempts, 1), len(BACKOFF_SECONDS)) - 1]


def work_on(
    leased: LeasedUpdate, *, config: BotConfig, budget_seconds: float, now: datetime
) -> Outcome:
    """One attempt at a leased update (module docstring); never raises for the update's sake
    (a database that fails even to give the row back leaves its lease to expire)."""
    if leased.attempts >= config.max_attempts:
        logger.error(
            "update %s failed %s times; skipped as poison", leased.update_id, leased.attempts
        )
        return _finish(leased, UpdateStatus.FAILED, Ending.POISON)
    lease = InboxLease(leased)
    context = UpdateContext(
        bot_id=leased.bot_id,
        update_id=leased.update_id,
        config=config,
        client=config.telegram_client(budget_seconds=budget_seconds, guard=lease.keep),
        attempts=leased.earlier_attempts,
        now=now,
        request_origin=leased.origin,
        settled_before=leased.settled,
    )
    try:
        if leased.conversation_user_id is not None and deletion_fenced(
            bot_id=leased.bot_id, user_id=leased.conversation_user_id
        ):
            raise DeletionInProgress(f"user {leased.conversation_user_id}: deletion in progress")
        route_update(context, leased.payload)
    except LeaseLost:
        logger.warning("update %s: taken over by another holder; left to it", leased.update_id)
        return Outcome(Ending.LEASE_LOST)
    except NoSendPermit as error:
        due_in = min(max(error.wait_seconds, NO_PERMIT_RETRY_SECONDS), NO_PERMIT_RETRY_MAX_SECONDS)
        return _give_back(context, leased, error, due_in=due_in, counted=False)
    except DeletionInProgress as error:
        return _give_back(context, leased, error, due_in=DELETION_RETRY_SECONDS, counted=False)
    except TelegramRetryableError as error:
        if error.status == 429:  # Telegram's pace, learned by the limiter: wait, do not count
            return _give_back(
                context, leased, error, due_in=float(error.retry_after or 1), counted=False
            )
        return _give_back(
            context, leased, error, due_in=backoff_seconds(leased.attempts + 1), counted=True
        )
    except RedisError as error:  # the limiter's or the fence's store: not the update's fault
        return _give_back(context, leased, error, due_in=DELETION_RETRY_SECONDS, counted=False)
    except Exception as error:  # the database, a bug: retried like a retryable failure
        logger.exception("update %s failed", leased.update_id)
        return _give_back(
            context, leased, error, due_in=backoff_seconds(leased.attempts + 1), counted=True
        )
    return _finish(leased, UpdateStatus.PROCESSED, Ending.FINISHED)


def _finish(leased: LeasedUpdate, status: UpdateStatus, ending: Ending) -> Outcome:
    try:
        finished = inbox_finish(leased=leased, status=status)
    except DatabaseError:
        logger.exception(
            "update %s: could not finish its row; its lease will expire", leased.update_id
        )
        return Outcome(Ending.LEASE_LOST)
    if not finished.owned:
        logger.warning("update %s was taken over while it ran", leased.update_id)
        return Outcome(Ending.LEASE_LOST)
    return Outcome(ending, more_in_conversation=finished.more_in_conversation)


def _give_back(
    context: UpdateContext, leased: LeasedUpdate, error: Exception, *, due_in: float, counted: bool
) -> Outcome:
    # str(error) of a Telegram error is sanitized (method, status, description): no token.
    logger.info(
        "update %s: %s; %s in %.1f s",
        leased.update_id,
        error,
        "retried" if counted else "waits, tried again",
        due_in,
    )
    try:
        released = inbox_release(
            leased=leased,
            not_before=context.now + timedelta(seconds=due_in),
            counted=counted,
            settled=context.progress.settled,
            error=f"{type(error).__name__}: {error}",
        )
    except DatabaseError:
        logger.exception(
            "update %s: could not give its row back; its lease will expire", leased.update_id
        )
        return Outcome(Ending.LEASE_LOST)
    if not released:
        return Outcome(Ending.LEASE_LOST)
    return Outcome(Ending.FAILED if counted else Ending.WAITING, due_in=due_in)


def follow_up(outcome: Outcome, *, bot_id: int) -> None:
    """Nudge a worker for what the attempt left: the row given back (when it is due), or the
    rows of the conversation waiting behind a finished one."""
    if outcome.ending in (Ending.WAITING, Ending.FAILED):
        queue_drain(bot_id=bot_id, countdown=outcome.due_in)
    elif outcome.more_in_conversation:
        queue_drain(bot_id=bot_id)


class DueAgain:
    """When the rows a drain gave back are due again, so that its one nudge comes then.

    Each row counts with its latest giving-back only: a drain that runs for tens of seconds
    may give a row back early (due in 1 s), take it again and give it back later (due in
    10 s); a nudge for the first due time would come before any row is due, find nothing and
    leave the rows to the beat sweep.
    """

    def __init__(self) -> None:
        self._at: dict[int, float] = {}  # update id -> monotonic time it is due again

    def given_back(self, update_id: int, *, due_in: float, at: float) -> None:
        self._at[update_id] = at + due_in

    def settled(self, update_id: int) -> None:
        self._at.pop(update_id, None)

    def countdown(self, *, at: float) -> float | None:
        """Seconds from ``at`` until the soonest row is due again; None: nothing given back."""
        return max(0.0, min(self._at.values()) - at) if self._at else None


@dataclass
class DrainReport:
    worked: int = 0  # attempts made
    finished: int = 0  # rows finished (poison included)
    stopped_early: bool = False  # DRAIN_SECONDS ran out with rows possibly left


def drain_inbox(
    *,
    bot_id: int,
    # common.clock.now, which looks timezone.now up on every call: a default bound to
    # timezone.now itself would keep whatever it was when this module was first imported
    # (a test's moved clock, for good).
    clock: Callable[[], datetime] = clock.now,
    drain_seconds: float = DRAIN_SECONDS,
    budget_seconds: float = WORKER_SEND_BUDGET_SECONDS,
    monotonic: Callable[[], float] = clock.monotonic,
    queue: str | None = None,
) -> DrainReport:
    """Work on the bot's rows that are due, oldest first and each conversation in order, for
    up to ``drain_seconds``; then queue the next drain (on ``queue``, the one this drain came
    from) when rows may be left. A row given back for later is nudged for when it is due."""
    report = DrainReport()
    config = load_config()
    if not config.bot_token or config.support_chat_id is None or config.bot_id != bot_id:
        logger.error("inbox of bot %s: the worker has no bot configuration for it", bot_id)
        return report
    started = monotonic()
    due_again = DueAgain()
    while True:
        if monotonic() - started >= drain_seconds:
            report.stopped_early = True
            queue_drain(bot_id=bot_id, queue=queue)
            return report
        leased = inbox_claim_next(bot_id=bot_id, now=clock(), token=new_lease_token())
        if leased is None:
            break
        outcome = work_on(leased, config=config, budget_seconds=budget_seconds, now=clock())
        report.worked += 1
        if outcome.ending in (Ending.WAITING, Ending.FAILED):
            due_again.given_back(leased.update_id, due_in=outcome.due_in, at=monotonic())
        else:
            due_again.settled(leased.update_id)
            if outcome.ending in (Ending.FINISHED, Ending.POISON):
                report.finished += 1
    countdown = due_again.countdown(at=monotonic())
    if countdown is not None:
        # One nudge for all the rows given back here (a burst gives many back at once).
        queue_drain(bot_id=bot_id, countdown=countdown, queue=queue)
    return report
