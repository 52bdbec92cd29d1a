"""/wipealldata (spec §4.10): reset the instance — every bound topic and every business row.

The command answers with a danger warning and two buttons ``w:yes|no:<epoch>``; no row is
written (the 60 s window is in the payload). A click: the payload's shape, admins only, the
window (−5 s skew), then the decision. The first click on a prompt decides it
(``bots.services.wipe.wipe_decision_claim``): a cancel and a confirm cannot both win, two admins'
confirms run one wipe, and Telegram's redelivery of the winning confirm resumes the wipe even
after the window has passed.

A confirmed wipe: broadcasts stopped (drafts cancelled, a running send failed), then
``deleteForumTopic`` for every bound thread, paced (``bots.pipeline.bulk``): ok or already gone
counts as deleted, any other permanent error as failed, retryable ⇒ raise (the redelivery
resumes; deleted topics answer "gone"). Only when no deletion failed are the rows of users,
topics, messages, delete_confirmations and broadcasts removed; otherwise nothing is, and running
/wipealldata again converges. The outcome is posted in General (the prompt's own topic is gone
by then, and Telegram shows only the first answer to a click). A wipe longer than the inline
budget continues in ``wipe_continue_task``.

Its audit trail, in the name of the admin who confirmed: a wipe that ends within the click is
one row, done (with the counts of topics deleted, already gone, failed) or failed when some
topic could not be deleted; one that continues in Celery is recorded "started", and the task
adds the outcome's row when the wipe ends — done, or failed when some topic could not be
deleted, the wipe was interrupted, another job took its lock or the worker has no bot
configuration — once per wipe (``bots.pipeline.bulk_audit``). A running broadcast it stops
gets its own outcome's row (``bots.services.broadcast_audit``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bots import texts
from bots.clients.telegram import TelegramPermanentError, is_topic_gone
from bots.models import AuditAction, AuditOutcome
from bots.pipeline.audit import audit_from_telegram, telegram_audit_actor
from bots.pipeline.bulk import (
    DELETED,
    FAILED,
    GONE,
    QUEUED_LOCK_SECONDS,
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
from bots.pipeline.classify import GENERAL_THREAD_ID
from bots.pipeline.confirmations import (
    edit_prompt,
    epoch_seconds,
    send_prompt,
    toast,
    toast_best_effort,
    within_window,
)
from bots.pipeline.context import BotContext, UpdateContext
from bots.pipeline.failures import best_effort
from bots.pipeline.inbox_queue import queue_drain
from bots.pipeline.issued import Issued
from bots.pipeline.replies import reply_in_thread
from bots.selectors import bound_thread_ids
from bots.services.audit import AuditActor
from bots.services.broadcasts import broadcasts_stop
from bots.services.bulk_lock import bulk_lock_acquire, bulk_lock_release
from bots.services.deletion_fence import deletion_fence_lower, deletion_fence_raise
from bots.services.wipe import (
    CANCELLED,
    bot_data_wipe,
    confirmed_by,
    wipe_decision_claim,
    wipe_decision_done,
    wipe_decision_get,
)
from bots.task_names import WIPE_CONTINUE_TASK

logger = logging.getLogger(__name__)

_PAYLOAD = re.compile(r"w:(yes|no):([0-9]{1,12})")


def request_wipe(issued: Issued) -> bool:
    """The command: the danger warning with its two buttons, in the thread it was sent in (in
    General when that topic is closed). True when the warning was posted."""
    started_at = epoch_seconds(issued.ctx.now)
    sent = send_prompt(
        issued.ctx,
        thread_id=issued.thread_id,
        text=texts.wipe_warning(),
        confirm_label=texts.wipe_confirm_label(),
        confirm_data=f"w:yes:{started_at}",
        cancel_data=f"w:no:{started_at}",
    )
    return sent is not None


@dataclass
class WipeJob:
    """One confirmed wipe, as it travels from the webhook to its Celery continuations."""

    bot_id: int
    lock_token: str
    prompt_message_id: int
    total: int  # bound topics when the wipe began
    after_thread_id: int = 0  # the cursor: every binding up to this thread id is handled
    deleted: int = 0
    gone: int = 0
    failed: int = 0
    retries: int = 0
    # Who confirmed it, for the outcome's row a continuation writes (``bulk_audit``).
    audit_surface: str = ""
    audit_actor_id: int | None = None
    audit_actor_name: str = ""

    @property
    def handled(self) -> int:
        return self.deleted + self.gone + self.failed

    def record(self, thread_id: int, outcome: str) -> None:
        self.after_thread_id = thread_id
        setattr(self, outcome, getattr(self, outcome) + 1)


def wipe_outcome(job: WipeJob) -> AuditOutcome:
    """Done, or failed when some topic could not be deleted (then no row was deleted)."""
    return AuditOutcome.FAILED if job.failed else AuditOutcome.DONE


def wipe_counts(job: WipeJob) -> str:
    """The audit row's detail: what became of the bound topics (and of the rows)."""
    counts = f"topics deleted {job.deleted}, already gone {job.gone}, failed {job.failed}"
    return f"{counts}; no row deleted" if job.failed else counts


def _prompt_with(line: str) -> str:
    return f"{texts.wipe_warning()}\n\n{line}"


# ------------------------------------------------------------------ the buttons


def handle_wipe_callback(ctx: UpdateContext, callback: Mapping[str, Any]) -> None:
    """A click on a /wipealldata prompt (any other payload is ignored)."""
    match = _PAYLOAD.fullmatch(callback["data"])
    if match is None:
        return
    message = callback["message"]
    if message["chat"]["id"] != ctx.support_chat_id or message["chat"]["type"] != "supergroup":
        return
    callback_id = callback["id"]
    if not ctx.config.is_admin(callback["from"]["id"]):
        toast(ctx, callback_id, texts.admins_only())
        return
    confirm = match[1] == "yes"
    prompt_id = message["message_id"]
    decided = wipe_decision_get(bot_id=ctx.bot_id, prompt_msg_id=prompt_id)
    resuming = confirm and decided == confirmed_by(callback_id)
    if not resuming and not within_window(int(match[2]), ctx.now):
        toast(ctx, callback_id, texts.toast_wipe_timeout())
        edit_prompt(ctx, message_id=prompt_id, text=_prompt_with(texts.toast_wipe_timeout()))
        return
    if not confirm:
        if _cancel(ctx, prompt_id=prompt_id, callback_id=callback_id):
            _audit(ctx, callback, AuditOutcome.CANCELLED)
    elif decided is not None and not resuming:
        toast(ctx, callback_id, texts.toast_wipe_already_decided())
    else:
        confirmed = _confirm(
            ctx,
            prompt_id=prompt_id,
            callback_id=callback_id,
            resuming=resuming,
            started_by=telegram_audit_actor(callback["from"]),
        )
        if confirmed is not None:
            _audit(ctx, callback, *confirmed)


def _audit(
    ctx: UpdateContext, callback: Mapping[str, Any], outcome: AuditOutcome, detail: str = ""
) -> None:
    audit_from_telegram(
        ctx, admin=callback["from"], action=AuditAction.WIPE, outcome=outcome, detail=detail
    )


def _cancel(ctx: BotContext, *, prompt_id: int, callback_id: str) -> bool:
    """True when the wipe is cancelled (by this click or an earlier cancel)."""
    decision = wipe_decision_claim(bot_id=ctx.bot_id, prompt_msg_id=prompt_id, decision=CANCELLED)
    if decision != CANCELLED:
        toast(ctx, callback_id, texts.toast_wipe_already_decided())
        return False
    toast(ctx, callback_id, texts.toast_wipe_cancelled())
    edit_prompt(ctx, message_id=prompt_id, text=_prompt_with(texts.toast_wipe_cancelled()))
    return True


def _confirm(
    ctx: BotContext, *, prompt_id: int, callback_id: str, resuming: bool, started_by: AuditActor
) -> tuple[AuditOutcome, str] | None:
    """The audit row of the click: DONE or FAILED (``wipe_outcome``) with the counts when the
    wipe ended here, STARTED when the rest went to Celery (which records the end in the name
    of ``started_by``); None when it did not start the wipe."""
    token = bulk_lock_acquire(bot_id=ctx.bot_id, ttl_seconds=RUNNING_LOCK_SECONDS)
    if token is None:
        # A purge or another wipe runs (a resumed wipe's own continuation, say): nothing is
        # decided here, so the button still works once that job is done.
        toast(ctx, callback_id, texts.bulk_busy())
        return None
    handed_off = False
    try:
        ours = confirmed_by(callback_id)
        if not resuming and (
            wipe_decision_claim(bot_id=ctx.bot_id, prompt_msg_id=prompt_id, decision=ours) != ours
        ):
            toast(ctx, callback_id, texts.toast_wipe_already_decided())
            return None
        # No topic is created or replaced until the wipe ends (bots.services.deletion_fence).
        deletion_fence_raise(bot_id=ctx.bot_id, ttl_seconds=QUEUED_LOCK_SECONDS)
        toast_best_effort(ctx, callback_id, texts.toast_wiping())
        edit_prompt(ctx, message_id=prompt_id, text=_prompt_with(texts.toast_wiping()))
        broadcasts_stop(bot_id=ctx.bot_id, now=ctx.now, stopped_by=started_by)
        job = WipeJob(
            bot_id=ctx.bot_id,
            lock_token=token,
            prompt_message_id=prompt_id,
            total=len(bound_thread_ids(bot_id=ctx.bot_id, after_thread_id=0)),
        )
        carry_starter(job, started_by)
        pacer = Pacer(ctx.config.deletes_per_second)
        budget = Budget.inline(pacer, per_second=ctx.config.deletes_per_second)
        stopped = _advance(ctx, job, pacer=pacer, budget=budget)
        if stopped is None:
            finish_wipe(ctx, job)
            return wipe_outcome(job), wipe_counts(job)
        hand_off(job, countdown=stopped.countdown)
        handed_off = True
        text = texts.wipe_continues(done=job.handled, total=job.total)
        best_effort(
            "wipe progress",
            lambda: reply_in_thread(ctx, thread_id=GENERAL_THREAD_ID, text=text),
        )
        return AuditOutcome.STARTED, "continues in the worker"
    finally:
        if not handed_off:
            bulk_lock_release(bot_id=ctx.bot_id, token=token)


# ------------------------------------------------------------------ the run


def _delete_topic(ctx: BotContext, thread_id: int) -> str:
    try:
        ctx.client.delete_forum_topic(chat_id=ctx.support_chat_id, message_thread_id=thread_id)
    except TelegramPermanentError as error:
        if is_topic_gone(error):
            return GONE
        logger.warning("wipe: topic %s not deleted: %s", thread_id, error)
        return FAILED
    return DELETED


def _advance(ctx: BotContext, job: WipeJob, *, pacer: Pacer, budget: Budget) -> Stopped | None:
    """Delete the bound topics after the job's cursor; None when there are none left — a topic
    bound while the pass ran (by a message that passed the fence before the wipe began) is
    deleted too, so that the rows' delete orphans no topic."""
    lock = LockKeeper(bot_id=job.bot_id, token=job.lock_token, pacer=pacer)
    while True:
        stopped = run_paced(
            bound_thread_ids(bot_id=job.bot_id, after_thread_id=job.after_thread_id),
            lambda thread_id: _delete_topic(ctx, thread_id),
            pacer=pacer,
            budget=budget,
            lock=lock,
            record=job.record,
        )
        if stopped is not None:
            return stopped
        if not bound_thread_ids(bot_id=job.bot_id, after_thread_id=job.after_thread_id):
            return None


def hand_off(job: WipeJob, *, countdown: float) -> None:
    """Queue the wipe's continuation (the lock and the fence are kept for it meanwhile)."""
    deletion_fence_raise(bot_id=job.bot_id, ttl_seconds=countdown + QUEUED_LOCK_SECONDS)
    queue_continuation(job, WIPE_CONTINUE_TASK, countdown=countdown)


def continue_wipe(job: WipeJob) -> str | None:
    """One Celery chunk of a wipe (``bots.pipeline.bulk.continue_in_worker``); returns the
    outcome posted in General when the wipe ended here."""

    def interrupt(ctx: BotContext) -> str:
        _end(job)
        _report(ctx, job, texts.wipe_interrupted())  # no row was deleted
        _audit_outcome(job, AuditOutcome.FAILED, f"interrupted in the worker: {_kept(job)}")
        return texts.wipe_interrupted()

    def finish(ctx: BotContext) -> str:
        text = finish_wipe(ctx, job)
        _audit_outcome(job, wipe_outcome(job), f"finished in the worker: {wipe_counts(job)}")
        return text

    return continue_in_worker(
        job,
        advance=lambda ctx, pacer, budget: _advance(ctx, job, pacer=pacer, budget=budget),
        hand_off=lambda countdown: hand_off(job, countdown=countdown),
        finish=finish,
        interrupt=interrupt,
        abandon=lambda why: _audit_outcome(
            job, AuditOutcome.FAILED, f"stopped in the worker ({why}): {_kept(job)}"
        ),
    )


def _kept(job: WipeJob) -> str:
    """The counts of a wipe that stopped before its end: no row was deleted."""
    counts = wipe_counts(job)
    return counts if job.failed else f"{counts}; no row deleted"


def _audit_outcome(job: WipeJob, outcome: AuditOutcome, detail: str) -> None:
    """The outcome's row of a wipe that ended in Celery (the confirm's row says "started")."""
    audit_job_outcome(job, action=AuditAction.WIPE, outcome=outcome, detail=detail)


def finish_wipe(ctx: BotContext, job: WipeJob) -> str:
    """Remove the rows — only when every topic deletion succeeded — and report in General."""
    if job.failed:
        text = texts.wipe_failed(job.failed)
    else:
        bot_data_wipe(bot_id=job.bot_id)
        text = texts.wipe_done()
    _end(job)
    _report(ctx, job, text)
    return text


def _end(job: WipeJob) -> None:
    """The wipe is over: its prompt starts no other (a late redelivery of the confirm), topics
    may be created again, and the updates that waited for the wipe in the inbox go now."""
    wipe_decision_done(bot_id=job.bot_id, prompt_msg_id=job.prompt_message_id)
    deletion_fence_lower(bot_id=job.bot_id)
    queue_drain(bot_id=job.bot_id)


def _report(ctx: BotContext, job: WipeJob, text: str) -> None:
    # The prompt usually went with its topic; General always exists.
    edit_prompt(ctx, message_id=job.prompt_message_id, text=_prompt_with(text))
    best_effort("wipe report", lambda: reply_in_thread(ctx, thread_id=GENERAL_THREAD_ID, text=text))
