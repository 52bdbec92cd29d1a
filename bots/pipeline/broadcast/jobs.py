"""How a broadcast's send loop gets to a Celery worker, and back to one after a crash.

* ``start_sending`` — the winning *Confirm* queues the loop once its UPDATE is committed (the
  webhook answers at once).
* ``queue_run`` — a run that used up its chunk (or met a retryable failure) queues the next one
  on the queue it came from, keeping the sender lease for it meanwhile.
* ``broadcasts_resume`` — a worker killed mid-send: Celery redelivers a task whose *process*
  died (``acks_late`` + ``reject_on_worker_lost``: a prefork child killed by the OOM killer, say),
  and the new run resumes from the row's counts. A whole worker that dies leaves its task with
  the broker until the visibility timeout (an hour); for that, beat runs this sweep every minute
  and a worker runs it when it starts (after the dead loop's lease has lapsed): every sending
  broadcast whose sender lease is free gets a new run (and so does one that ended without its
  end being shown: completed, or stopped from the console).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.db import transaction

from bots.models import Broadcast, BroadcastStatus
from bots.selectors import bot_current_id
from bots.services.broadcast_progress import (
    SENDER_LEASE_SECONDS,
    sender_lease_held,
    sender_lease_hold,
    sender_lease_take,
)
from bots.task_names import BROADCAST_SEND_TASK

logger = logging.getLogger(__name__)

# A worker that starts sweeps this long after its start: a loop killed with the previous
# worker still holds its lease until then.
RESUME_AFTER_START_SECONDS = SENDER_LEASE_SECONDS + 1


@dataclass
class SendJob:
    """One run of a broadcast's send loop, as it travels through the Celery queue."""

    bot_id: int
    broadcast_id: int
    lease_token: str | None = None  # None: take the lease anew (a resume by the sweep)
    retries: int = 0  # retryable failures in a row (database, the final edit)


def _queue(job: SendJob, **options: Any) -> None:
    # By name: ``bots.tasks`` imports this module to run the job (bots.task_names).
    current_app.send_task(BROADCAST_SEND_TASK, kwargs=dataclasses.asdict(job), **options)


def start_sending(*, bot_id: int, broadcast_id: int) -> None:
    """Queue the first run once the confirming transaction is committed, holding the sender
    lease for it from then on.

    The run carries its lease token from the start: should its process die, Celery redelivers
    this very message, and the redelivered run holds the dead one's lease at once (a run with
    another token would have to wait for it to lapse). Taking the lease before queueing keeps
    the resume sweep from starting a second loop while the first run waits in the queue; when
    another loop holds it already (a redelivered confirm while the first loop sends), nothing
    is queued."""
    job = SendJob(bot_id=bot_id, broadcast_id=broadcast_id, lease_token=secrets.token_hex(16))

    def queue_first_run() -> None:
        token = sender_lease_take(
            broadcast_id=broadcast_id, token=job.lease_token, ttl_seconds=SENDER_LEASE_SECONDS
        )
        if token is None:
            logger.info("broadcast %s: a send loop runs already; none queued", broadcast_id)
            return
        _queue(job)

    transaction.on_commit(queue_first_run)


def queue_run(job: SendJob, *, countdown: float, queue: str | None) -> bool:
    """Queue the job's next run after ``countdown`` seconds on ``queue`` (None: the default),
    keeping its lease until it starts. False when the lease changed hands (another loop runs)."""
    if job.lease_token is not None and not sender_lease_hold(
        broadcast_id=job.broadcast_id,
        token=job.lease_token,
        ttl_seconds=countdown + SENDER_LEASE_SECONDS,
    ):
        return False
    options: dict[str, object] = {"countdown": countdown}
    if queue:
        options["queue"] = queue
    _queue(job, **options)
    return True


def broadcasts_resume(*, queue: str | None = None) -> list[int]:
    """Queue a run for every broadcast of the bot that should have a loop and has none: sending,
    or completed / failed (stopped) but not shown yet, with a free sender lease. Returns their
    ids."""
    bot_id = bot_current_id()
    if bot_id is None:
        return []
    orphaned = [
        broadcast_id
        for broadcast_id in Broadcast.objects.filter(
            bot_id=bot_id,
            status__in=[
                BroadcastStatus.SENDING,
                BroadcastStatus.COMPLETED,
                BroadcastStatus.FAILED,
            ],
        )
        .order_by("id")
        .values_list("id", flat=True)
        if not sender_lease_held(broadcast_id=broadcast_id)
    ]
    for broadcast_id in orphaned:
        logger.warning("broadcast %s has no send loop: resuming it", broadcast_id)
        queue_run(SendJob(bot_id=bot_id, broadcast_id=broadcast_id), countdown=0, queue=queue)
    return orphaned
