"""/purgemsg (spec §4.9): delete the topic's tracked messages and its card, then a fresh card.

1. The targets: the distinct group message ids of the thread's ledger rows (both directions) and
   the card's message id, ascending.
2. ``deleteMessage`` each, paced (``bots.pipeline.bulk``): ok ⇒ deleted; "message to delete not
   found" ⇒ already gone; any other permanent error (no delete right, ...) ⇒ failed. Retryable ⇒
   raise inside the webhook: Telegram redelivers and the purge runs again from the start — what
   the first attempt deleted is "already gone" then, so it converges.
3. However many failed: the thread's ledger rows (up to the last one that existed when the purge
   began) are deleted and the card id is cleared.
4. A fresh card is sent and pinned, from the database.
5. The report in the topic: deleted / already gone / failed, and whether the card is back.

A purge that does not fit in the inline budget continues in ``purge_continue_task`` (the admins
are told so) and the task posts the report when done. Its audit trail: the start's row says
"started" (written by the caller), and the task adds the outcome's row when the purge ends —
done, or failed when some message could not be deleted, the purge was interrupted, another job
took its lock or the worker has no bot configuration — with the counts, in the name of the
admin who started it, once per purge (``bots.pipeline.bulk_audit``). Not deleted: the topic,
private-chat messages, untracked messages (commands, bot replies, notices).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bots import texts
from bots.clients.telegram import TelegramPermanentError, is_message_to_delete_missing
from bots.models import AuditAction, AuditOutcome, Topic
from bots.pipeline.bulk import (
    DELETED,
    FAILED,
    GONE,
    RUNNING_LOCK_SECONDS,
    Budget,
    LockKeeper,
    Pacer,
    Stopped,
    continue_in_worker,
    queue_continuation,
    run_paced,
)
from bots.pipeline.bulk_audit import audit_job_outcome, carry_starter
from bots.pipeline.card import post_card
from bots.pipeline.context import BotContext
from bots.pipeline.failures import best_effort
from bots.pipeline.replies import reply_in_thread
from bots.selectors import (
    ledger_group_message_ids,
    ledger_last_id,
    topic_get_for_thread,
    user_get,
    verification_settings_get,
)
from bots.services.audit import AuditActor
from bots.services.bulk_lock import bulk_lock_acquire, bulk_lock_release
from bots.services.relayed_messages import relayed_messages_delete_for_thread
from bots.services.topics import topic_clear_pinned_message
from bots.task_names import PURGE_CONTINUE_TASK

logger = logging.getLogger(__name__)


@dataclass
class PurgeJob:
    """One purge of one topic, as it travels from the webhook to its Celery continuations."""

    bot_id: int
    thread_id: int
    lock_token: str
    # The thread's newest ledger row when the purge began (None: no rows): the purge covers
    # the rows up to it, and messages relayed meanwhile stay tracked.
    ledger_up_to_id: int | None
    card_message_id: int | None  # the card when the purge began
    total: int  # messages to delete when the purge began (card included)
    after_message_id: int = 0  # the cursor: every target up to this id is handled
    deleted: int = 0
    gone: int = 0
    failed: int = 0
    retries: int = 0  # retryable failures in a row (continuations only)
    # Who started it, for the outcome's row a continuation writes (``bulk_audit``).
    audit_surface: str = ""
    audit_actor_id: int | None = None
    audit_actor_name: str = ""
    audit_user_id: int | None = None

    @property
    def handled(self) -> int:
        return self.deleted + self.gone + self.failed

    def record(self, message_id: int, outcome: str) -> None:
        self.after_message_id = message_id
        setattr(self, outcome, getattr(self, outcome) + 1)


@dataclass(frozen=True)
class PurgeStart:
    """What starting a purge did."""

    busy: bool = False  # another purge or wipe of the bot is running: nothing was done
    report: str | None = None  # finished here: the report (also posted in the topic)
    continues: str | None = None  # handed to Celery: what the admins are told
    # Finished here: the audit row's outcome and counts (``purge_outcome``).
    outcome: AuditOutcome | None = None
    counts: str = ""


def purge_outcome(job: PurgeJob) -> AuditOutcome:
    """Done, or failed when some message could not be deleted (the bot lacks the right, ...)."""
    return AuditOutcome.FAILED if job.failed else AuditOutcome.DONE


def purge_counts(job: PurgeJob) -> str:
    """The audit row's detail: what became of the purge's messages."""
    return f"deleted {job.deleted}, already gone {job.gone}, failed {job.failed} of {job.total}"


def remaining_targets(job: PurgeJob) -> list[int]:
    """The message ids still to delete, ascending: ledger ones beyond the cursor and the card."""
    targets = set(
        ledger_group_message_ids(
            bot_id=job.bot_id,
            thread_id=job.thread_id,
            up_to_id=job.ledger_up_to_id,
            after_message_id=job.after_message_id,
        )
    )
    if job.card_message_id is not None and job.card_message_id > job.after_message_id:
        targets.add(job.card_message_id)
    return sorted(targets)


def _delete_message(ctx: BotContext, message_id: int) -> str:
    try:
        ctx.client.delete_message(chat_id=ctx.support_chat_id, message_id=message_id)
    except TelegramPermanentError as error:
        if is_message_to_delete_missing(error):
            return GONE
        logger.warning("purge: message %s not deleted: %s", message_id, error)
        return FAILED
    return DELETED


def _advance(ctx: BotContext, job: PurgeJob, *, pacer: Pacer, budget: Budget) -> Stopped | None:
    lock = LockKeeper(bot_id=job.bot_id, token=job.lock_token, pacer=pacer)
    return run_paced(
        remaining_targets(job),
        lambda message_id: _delete_message(ctx, message_id),
        pacer=pacer,
        budget=budget,
        lock=lock,
        record=job.record,
    )


def purge_topic(
    ctx: BotContext, *, topic: Topic, started_by: AuditActor | None = None
) -> PurgeStart:
    """Purge ``topic`` (the command's and the operators' console's entry point).

    Takes the bot's bulk-deletion lock (busy: nothing done), works within the inline budget,
    then either finishes (ledger cleared, fresh card, report posted) or hands the rest to
    Celery — which records the outcome in the audit trail in the name of ``started_by``.
    Retryable Telegram errors raise (the lock is released first).
    """
    token = bulk_lock_acquire(bot_id=ctx.bot_id, ttl_seconds=RUNNING_LOCK_SECONDS)
    if token is None:
        return PurgeStart(busy=True)
    handed_off = False
    try:
        job = PurgeJob(
            bot_id=ctx.bot_id,
            thread_id=topic.thread_id,
            lock_token=token,
            ledger_up_to_id=ledger_last_id(bot_id=ctx.bot_id, thread_id=topic.thread_id),
            card_message_id=topic.pinned_msg_id,
            total=0,
        )
        carry_starter(job, started_by)
        job.audit_user_id = topic.user_id
        job.total = len(remaining_targets(job))
        pacer = Pacer(ctx.config.deletes_per_second)
        budget = Budget.inline(pacer, per_second=ctx.config.deletes_per_second)
        stopped = _advance(ctx, job, pacer=pacer, budget=budget)
        if stopped is None:
            report = finish_purge(ctx, job)
            return PurgeStart(report=report, outcome=purge_outcome(job), counts=purge_counts(job))
        hand_off(job, countdown=stopped.countdown)
        handed_off = True
        return PurgeStart(continues=texts.purge_continues(done=job.handled, total=job.total))
    finally:
        if not handed_off:
            bulk_lock_release(bot_id=ctx.bot_id, token=token)


def hand_off(job: PurgeJob, *, countdown: float) -> None:
    """Queue the purge's continuation (the lock is kept for it meanwhile)."""
    queue_continuation(job, PURGE_CONTINUE_TASK, countdown=countdown)


def continue_purge(job: PurgeJob) -> str | None:
    """One Celery chunk of a purge (``bots.pipeline.bulk.continue_in_worker``); returns the
    report when the purge ended here."""

    def interrupt(ctx: BotContext) -> str:
        # Nothing is cleared: running /purgemsg again carries on from the ledger.
        report = _report(job, card_pinned=None)
        best_effort(
            "purge report", lambda: reply_in_thread(ctx, thread_id=job.thread_id, text=report)
        )
        _audit_outcome(job, AuditOutcome.FAILED, f"interrupted in the worker: {purge_counts(job)}")
        return report

    def finish(ctx: BotContext) -> str:
        report = finish_purge(ctx, job)
        _audit_outcome(job, purge_outcome(job), f"finished in the worker: {purge_counts(job)}")
        return report

    return continue_in_worker(
        job,
        advance=lambda ctx, pacer, budget: _advance(ctx, job, pacer=pacer, budget=budget),
        hand_off=lambda countdown: hand_off(job, countdown=countdown),
        finish=finish,
        interrupt=interrupt,
        # Nothing is cleared, nothing reported in the topic: the ledger still holds the rest.
        abandon=lambda why: _audit_outcome(
            job, AuditOutcome.FAILED, f"stopped in the worker ({why}): {purge_counts(job)}"
        ),
    )


def _audit_outcome(job: PurgeJob, outcome: AuditOutcome, detail: str) -> None:
    """The outcome's row of a purge that ended in Celery (the start's row says "started")."""
    audit_job_outcome(
        job,
        action=AuditAction.PURGE,
        outcome=outcome,
        detail=detail,
        target_user_id=job.audit_user_id,
    )


def finish_purge(ctx: BotContext, job: PurgeJob) -> str:
    """Steps 3–5: clear the ledger rows and the card id, send a fresh card, post the report.

    The card and the report are best effort: a redelivery after the ledger was cleared would
    find nothing left to purge but the fresh card, so nothing here may fail the update.
    """
    if job.ledger_up_to_id is not None:
        relayed_messages_delete_for_thread(
            bot_id=job.bot_id, thread_id=job.thread_id, up_to_id=job.ledger_up_to_id
        )
    if job.card_message_id is not None:
        topic_clear_pinned_message(
            bot_id=job.bot_id, thread_id=job.thread_id, message_id=job.card_message_id
        )
    card_pinned = _fresh_card(ctx, thread_id=job.thread_id)
    report = _report(job, card_pinned=card_pinned)
    best_effort("purge report", lambda: reply_in_thread(ctx, thread_id=job.thread_id, text=report))
    return report


def _fresh_card(ctx: BotContext, *, thread_id: int) -> bool:
    """Send and pin a card from the database values unless the topic has one again (the user
    wrote during the purge); True when the topic has a card now."""
    topic = topic_get_for_thread(bot_id=ctx.bot_id, thread_id=thread_id)
    if topic is None:
        return False
    user = user_get(bot_id=ctx.bot_id, user_id=topic.user_id)
    if user is None:
        return False
    if topic.pinned_msg_id is None:
        enabled = verification_settings_get().enabled
        without_card = topic
        best_effort(
            "purge card",
            lambda: post_card(ctx, user=user, topic=without_card, verification_enabled=enabled),
        )
        topic = topic_get_for_thread(bot_id=ctx.bot_id, thread_id=thread_id)
    return topic is not None and topic.pinned_msg_id is not None


def _report(job: PurgeJob, *, card_pinned: bool | None) -> str:
    """The report's lines (``card_pinned`` None: the purge was interrupted, nothing cleared)."""
    lines = [texts.purge_interrupted()] if card_pinned is None else []
    lines.append(texts.purge_done(job.deleted))
    if job.gone:
        lines.append(texts.purge_already_gone(job.gone))
    if job.failed:
        lines.append(texts.purge_failed(job.failed))
    if card_pinned is not None:
        lines.append(texts.purge_card_pinned() if card_pinned else texts.purge_card_not_pinned())
    return "\n".join(lines)
