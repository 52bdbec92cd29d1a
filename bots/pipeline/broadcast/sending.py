"""The send loop of a confirmed broadcast (spec §7.5 step 6), one Celery run at a time.

A run takes the broadcast's sender lease (one loop per broadcast), then:

* ``completed`` row ⇒ the final statistics are shown and the row deleted (a run after the final
  edit failed); ``failed`` / ``cancelled`` / ``expired`` ⇒ their end is shown, the row deleted;
* ``sending`` ⇒ the frozen recipient list is decoded fail-closed (a JSON array of
  ``expected_count`` positive, strictly ascending ids; otherwise nothing is sent and every
  recipient counts as a failure) and intersected once with the users eligible now (the others
  count as failures, unsent); then, from the row's counts on, for each recipient:
  a permit from the shared limiter (``bots.pipeline.broadcast.pacing``), the in-flight marker,
  the claim (one conditional UPDATE: counted as a failure, heartbeat refreshed — or the row left
  ``sending`` and the loop stops before this recipient), ``sendMessage`` (parse_mode HTML), the
  outcome:
  accepted ⇒ a success; a 429 ⇒ the limiter blocks everybody for its retry_after, the claim is
  given back (Telegram delivered nothing) and the same recipient is tried again, at most
  MAX_RATE_LIMITED_SENDS times; any other failure (blocked by the user, 5xx, network) stays a
  failure and is never retried (it may have been delivered: at most once).

Every PROGRESS_EDIT_SECONDS the control message shows sent / failed / remaining. A run works
for at most TASK_CHUNK_SECONDS, then queues the next run (``jobs.queue_run``). A wait the run
cannot finish within its chunk (a retry_after of minutes) ends the run as well: the heartbeat is
refreshed and the next run queued after the wait, in steps of at most WAIT_STEP_SECONDS so that
the heartbeat keeps being refreshed (a send without one for ten minutes is stale) — never a run
that starts again at once to find the same wait. Every path that learns a retry_after honours
it: a run whose final edit is refused for one runs again after it. The counts on the
row are the cursor, so a run killed anywhere resumes where it stopped, and the recipient whose
send was in flight counts as a failure whose outcome is unknown — never resent. While it runs,
the run keeps its sender lease and the row's heartbeat (``bots.pipeline.broadcast.keepalive``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError
from django.utils import timezone

from bots.clients.telegram import (
    TelegramError,
    TelegramPermanentError,
    TelegramRetryableError,
)
from bots.models import Broadcast, BroadcastStatus
from bots.outbound.limiter import Permit, Priority
from bots.pipeline.broadcast.display import edit_control, finish, progress_text
from bots.pipeline.broadcast.jobs import SendJob, queue_run
from bots.pipeline.broadcast.keepalive import Keepalive, LeaseLost, LeftSending
from bots.pipeline.broadcast.pacing import DEFAULT_RETRY_AFTER_SECONDS, Pacing, Result
from bots.pipeline.broadcast.recipients import decode_recipients
from bots.pipeline.context import BotContext, worker_context
from bots.selectors import broadcast_eligible_user_ids
from bots.services.broadcast_progress import (
    SENDER_LEASE_SECONDS,
    in_flight_clear,
    in_flight_mark,
    in_flight_take,
    sender_lease_release,
    sender_lease_take,
    unknown_add,
)
from bots.services.broadcasts import (
    broadcast_claim_recipient,
    broadcast_complete,
    broadcast_fail_remaining,
    broadcast_record_success,
    broadcast_unclaim_recipient,
)
from common import clock

logger = logging.getLogger(__name__)

# One run's share of a broadcast (under the worker's 240 s soft time limit).
TASK_CHUNK_SECONDS = 120.0
# The control message shows the progress this often while sending.
PROGRESS_EDIT_SECONDS = 5.0
# 429s for one recipient before it counts as a failure.
MAX_RATE_LIMITED_SENDS = 5
# A run that met a retryable failure (the database, the final edit) runs again after this
# many seconds, at most MAX_RUN_RETRIES times in a row.
RUN_RETRY_SECONDS = 10.0
MAX_RUN_RETRIES = 5
# A wait longer than the run has left: the next run starts after the wait, or after this long
# if the wait is longer (it refreshes the heartbeat and queues the next step).
WAIT_STEP_SECONDS = 60.0

# What one run ended with (the task's return value).
COMPLETED = "completed"  # the final statistics are shown
STOPPED = "stopped"  # the row left sending (wiped, stopped, stale): its end is shown
CONTINUES = "continues"  # the next run is queued
BUSY = "busy"  # another loop holds the broadcast
GONE = "gone"  # no row (shown and deleted already), or nothing to send (a draft)
NOT_CONFIGURED = "not configured"
GIVEN_UP = "given up"

SENT = "sent"
FAILED = "failed"
RATE_LIMITED = "rate limited"


def run_send_job(
    job: SendJob,
    *,
    queue: str | None = None,
    monotonic: Callable[[], float] = clock.monotonic,
) -> str:
    """One run of the loop (``bots.tasks.broadcast_send_task``); returns what it ended with.

    ``queue``: where the next run goes (the queue this one came from)."""
    row = Broadcast.objects.filter(bot_id=job.bot_id, id=job.broadcast_id).first()
    if row is None:
        return GONE
    # The loop takes its permits from the shared limiter itself (with their on_wait heartbeat).
    ctx = worker_context(row.bot_id, in_place_retry=False, paced=False)
    if ctx is None:
        return NOT_CONFIGURED
    token = sender_lease_take(
        broadcast_id=row.id, token=job.lease_token, ttl_seconds=SENDER_LEASE_SECONDS
    )
    if token is None:
        return BUSY
    job.lease_token = token
    handed_off = False
    try:
        sender = Sender(ctx, job, row, monotonic=monotonic)
        outcome = sender.run()
        job.retries = 0  # this run got through: the next one starts a fresh count
        if outcome == CONTINUES:
            handed_off = queue_run(job, countdown=sender.next_run_after, queue=queue)
        return outcome
    except LeaseLost:
        return BUSY
    except (DatabaseError, TelegramRetryableError) as error:
        if job.retries >= MAX_RUN_RETRIES:
            logger.error(
                "broadcast %s: run given up after %s retries in a row: %s",
                row.id,
                job.retries,
                error,
            )
            return GIVEN_UP
        # A retry_after learned on the way (the final edit refused with a 429, or held back
        # by one) is waited out before the next run.
        retry_after = getattr(error, "retry_after", None) or 0
        countdown = max(RUN_RETRY_SECONDS, float(retry_after))
        logger.warning("broadcast %s: run failed (%s); next run in %.0fs", row.id, error, countdown)
        job.retries += 1
        handed_off = queue_run(job, countdown=countdown, queue=queue)
        return CONTINUES
    finally:
        if not handed_off:
            sender_lease_release(broadcast_id=row.id, token=token)


class Sender:
    """One run over one broadcast row (see the module docstring)."""

    def __init__(
        self,
        ctx: BotContext,
        job: SendJob,
        row: Broadcast,
        *,
        monotonic: Callable[[], float] = clock.monotonic,
    ) -> None:
        self.ctx = ctx
        self.job = job
        self.row = row  # kept up to date with what this run wrote
        self.monotonic = monotonic
        self.pacing = Pacing(ctx.config.outbound_limiter(row.bot_id), monotonic=monotonic)
        started = monotonic()
        lease_token = job.lease_token
        assert lease_token is not None  # run_send_job takes the lease before the Sender exists
        self.keepalive = Keepalive(
            bot_id=row.bot_id,
            broadcast_id=row.id,
            lease_token=lease_token,
            monotonic=monotonic,
            started=started,
        )
        self.deadline = started + TASK_CHUNK_SECONDS
        self.progress_at = started
        # When the run ends with CONTINUES: the seconds before the next run may start.
        self.next_run_after = 0.0

    # -------------------------------------------------------------- the run

    def run(self) -> str:
        row = self.row
        if row.status == BroadcastStatus.COMPLETED:
            finish(self.ctx, row, edit=self.paced)
            return COMPLETED
        if row.status in (
            BroadcastStatus.FAILED,
            BroadcastStatus.CANCELLED,
            BroadcastStatus.EXPIRED,
        ):
            finish(self.ctx, row, edit=self.paced)
            return STOPPED
        if row.status != BroadcastStatus.SENDING:
            return GONE
        recipients = decode_recipients(row)
        if recipients is None:
            logger.error("broadcast %s: recipient list unreadable; nothing sent", row.id)
            broadcast_fail_remaining(bot_id=row.bot_id, broadcast_id=row.id, now=timezone.now())
        else:
            self._note_unknown()
            if self._handled == 0:
                self._best_effort_edit(progress_text(row))
            try:
                stopped = self._send_from(recipients)
            except LeftSending:
                stopped = self._stopped()
            if stopped is not None:
                return stopped
        return self._complete()

    @property
    def _handled(self) -> int:
        return self.row.success_count + self.row.failure_count

    def _note_unknown(self) -> None:
        """A previous loop died during a send: that recipient's outcome is unknown."""
        marker = in_flight_take(broadcast_id=self.row.id)
        if marker is None:
            return
        index, successes = marker
        if index == self._handled - 1 and successes == self.row.success_count:
            logger.warning(
                "broadcast %s: the send to recipient #%s was in flight when its loop died: "
                "outcome unknown, counted as a failure, not resent",
                self.row.id,
                index,
            )
            unknown_add(broadcast_id=self.row.id)

    def _send_from(self, recipients: list[int]) -> str | None:
        """Send from the row's counts on; None when every recipient is handled."""
        eligible = set(broadcast_eligible_user_ids(bot_id=self.row.bot_id))
        rate_limited = 0
        while self._handled < len(recipients):
            if self.monotonic() >= self.deadline:
                return CONTINUES
            self.keepalive.keep_lease_if_due()
            index = self._handled
            user_id = recipients[index]
            if user_id not in eligible:
                # Banned, unbound or deleted since the confirm: a failure, never sent.
                if not self._claim(index):
                    return self._stopped()
                continue
            permit = self.pacing.permit(
                chat_id=user_id,
                priority=Priority.BULK,
                deadline=self.deadline,
                on_wait=self.keepalive.while_waiting,
            )
            if not isinstance(permit, Permit):
                return self._wait_in_the_queue(permit)
            last_try = rate_limited >= MAX_RATE_LIMITED_SENDS
            outcome = self._send_one(index, user_id, permit, keep_claim=last_try)
            if outcome is None:
                return self._stopped()
            if outcome == RATE_LIMITED and rate_limited < MAX_RATE_LIMITED_SENDS:
                rate_limited += 1
                continue
            rate_limited = 0
            self._progress_if_due()
        return None

    def _send_one(
        self, index: int, user_id: int, permit: Permit, *, keep_claim: bool
    ) -> str | None:
        """Claim, send, record. None when the claim failed (the row left sending).
        ``keep_claim``: a 429 now counts as this recipient's failure (its last try)."""
        row = self.row
        try:
            in_flight_mark(broadcast_id=row.id, index=index, successes=row.success_count)
            if not self._claim(index):
                in_flight_clear(broadcast_id=row.id)
                return None
            self.keepalive.keep_lease_if_due()  # the lease outlives the call that follows
            outcome = self._deliver(user_id)
        finally:
            self.pacing.release(permit)
        if outcome == SENT:
            broadcast_record_success(bot_id=row.bot_id, broadcast_id=row.id)
            row.failure_count -= 1
            row.success_count += 1
        elif (
            outcome == RATE_LIMITED
            and not keep_claim
            # Telegram refused it unseen: whoever sends next sends it again.
            and broadcast_unclaim_recipient(
                bot_id=row.bot_id, broadcast_id=row.id, index=index, now=timezone.now()
            )
        ):
            row.failure_count -= 1
        in_flight_clear(broadcast_id=row.id)
        return outcome

    def _wait_in_the_queue(self, wait: float) -> str:
        """The bot is held back for longer than this run has left: refresh the heartbeat and
        end the run; the next one starts after the wait (or after WAIT_STEP_SECONDS, to
        refresh the heartbeat again)."""
        if not self.keepalive.heartbeat():
            return self._stopped()
        self.next_run_after = min(wait, WAIT_STEP_SECONDS)
        logger.info(
            "broadcast %s: sends held back for %.1fs more; next run in %.1fs",
            self.row.id,
            wait,
            self.next_run_after,
        )
        return CONTINUES

    def _claim(self, index: int) -> bool:
        if not broadcast_claim_recipient(
            bot_id=self.row.bot_id, broadcast_id=self.row.id, index=index, now=timezone.now()
        ):
            return False
        self.row.failure_count += 1
        self.keepalive.heartbeat_written()
        return True

    def _deliver(self, user_id: int) -> str:
        try:
            self.ctx.client.send_message(
                chat_id=user_id, text=self.row.message_html, parse_mode="HTML"
            )
        except TelegramRetryableError as error:
            if error.status == 429:
                self._learn_retry_after(error)
                return RATE_LIMITED
            # Telegram may have delivered it before failing: never resent (at most once).
            logger.info(
                "broadcast %s: send to %s failed (%s): outcome unknown, counted as a failure, "
                "not resent",
                self.row.id,
                user_id,
                error,
            )
            return FAILED
        except TelegramPermanentError as error:
            logger.info(
                "broadcast %s: Telegram refused the send to %s (%s): counted as a failure",
                self.row.id,
                user_id,
                error,
            )
            return FAILED
        return SENT

    def _learn_retry_after(self, error: TelegramError) -> None:
        seconds = error.retry_after if error.retry_after else DEFAULT_RETRY_AFTER_SECONDS
        logger.info(
            "broadcast %s: %s answered 429: every call of the bot waits %ss",
            self.row.id,
            error.method,
            seconds,
        )
        self.pacing.block_the_bot(seconds=seconds)

    def _complete(self) -> str:
        if broadcast_complete(bot_id=self.row.bot_id, broadcast_id=self.row.id, now=timezone.now()):
            # The statistics as stored (what every claim and success wrote).
            done = (
                Broadcast.objects.filter(bot_id=self.row.bot_id, id=self.row.id).first() or self.row
            )
            done.status = BroadcastStatus.COMPLETED
            logger.info(
                "broadcast %s: every recipient handled: %s accepted by Telegram, %s failed",
                done.id,
                done.success_count,
                done.failure_count,
            )
            finish(self.ctx, done, edit=self.paced)
            return COMPLETED
        return self._stopped()

    def _stopped(self) -> str:
        """The row left ``sending``: show its end (the row may be gone: a wipe deleted it)."""
        current = Broadcast.objects.filter(bot_id=self.row.bot_id, id=self.row.id).first()
        if current is not None and current.status in (
            BroadcastStatus.SENDING,
            BroadcastStatus.COMPLETED,
        ):
            return BUSY  # another loop moved on meanwhile: it shows the end
        row = current or self.row
        if current is None:
            row.status = BroadcastStatus.FAILED
        finish(self.ctx, row, edit=self.paced)
        return STOPPED

    # -------------------------------------------------------------- while it runs

    def _progress_if_due(self) -> None:
        if self.monotonic() - self.progress_at < PROGRESS_EDIT_SECONDS:
            return
        self.progress_at = self.monotonic()
        self._best_effort_edit(progress_text(self.row))

    def _best_effort_edit(self, text: str) -> None:
        try:
            edit_control(self.ctx, self.row, text, edit=self.paced)
        except TelegramError as error:
            logger.info("broadcast %s: progress not shown: %s", self.row.id, error)

    def paced(self, call: Callable[[], Result]) -> Result:
        """Run a call into the support group under the shared limiter (``Pacing.in_group``),
        the lease kept while it waits."""
        return self.pacing.in_group(
            call, chat_id=self.row.support_chat_id, keep_alive=self.keepalive.keep_lease_if_due
        )
