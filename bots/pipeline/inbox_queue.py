"""Queueing the inbox's worker (issue 36): a drain of the bot's inbox, now or after a while.

A drain leases the rows it may work on, one after another (``bots.pipeline.inbox_work``), so
a queued drain is a nudge, not a promise: a drain that finds nothing due ends at once, and the
beat sweep (``inbox_drain_task`` every INBOX_SWEEP_SECONDS) finishes the rows whose nudge was
lost (Redis died before the worker took it, a worker died with it). The message carries no
row: nothing is lost with it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app

from bots.task_names import INBOX_DRAIN_TASK

logger = logging.getLogger(__name__)

# The beat sweep's period (config/schedule.py): the longest a row whose nudge was lost waits
# beyond its lease (a holder that died) or its not_before.
INBOX_SWEEP_SECONDS = 15.0


def queue_drain(*, bot_id: int, countdown: float = 0.0, queue: str | None = None) -> None:
    """Nudge a worker to drain the bot's inbox after ``countdown`` seconds (on ``queue``: a
    drain queues its successors on the queue it came from; None: the task's route). Call it
    once the rows it is about are committed (a worker too early finds nothing, and the sweep
    comes later). A broker that cannot take the message is logged only: the sweep finds the
    row."""
    options: dict[str, Any] = {"queue": queue} if queue else {}
    try:
        current_app.send_task(
            INBOX_DRAIN_TASK,
            kwargs={"bot_id": bot_id},
            countdown=max(0.0, countdown),
            **options,
        )
    except Exception:  # the broker (Redis) is down: the row waits for the sweep
        logger.warning("inbox: could not queue a drain; the sweep will find the row")
