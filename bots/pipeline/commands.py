"""Admin commands (spec §4): parsing, where each may be issued, the binding, the replies.

Only admins get here (``handle_outbound`` answers everybody else's ``/command`` with "admins
only"), and a command is never relayed to a user nor written to the ledger.

* Name = the first whitespace-separated token without its ``@botname`` suffix, case-sensitive;
  arguments = the rest of the text, trimmed (inner whitespace kept).
* Where: every command works in a topic; in General (thread 1) only /help and the verification
  settings commands arrive at all (classification ignores other General text). The settings
  commands in a topic get "use these in General" and change nothing.
* Commands about "the topic's user" find the user through the binding (open or closed); a topic
  without one gets the "cannot find the user" notice — a target is never guessed.
* Order: the database first, then the best-effort card refresh, then the reply. The reply goes to
  the same thread (General without message_thread_id; General too when the topic is closed); a
  retryable failure raises, so the update is tried again later (the inbox) and the idempotent
  setters run again, re-sending only the reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bots import texts
from bots.models import AuditAction, AuditOutcome, Topic
from bots.pipeline.classify import GENERAL_THREAD_ID, command_name
from bots.pipeline.context import UpdateContext
from bots.pipeline.deluser import request_user_deletion
from bots.pipeline.issued import Issued
from bots.pipeline.moderation import archive_conversation, set_note, set_risk
from bots.pipeline.purge import purge_topic
from bots.pipeline.wipe import request_wipe
from bots.selectors import (
    DISABLED,
    ENABLED,
    MODE_BUTTON,
    MODE_MATH,
    MODE_TURNSTILE,
    VERIFICATION_MODES,
    VERIFY_ENABLED,
    VERIFY_MODE,
    topic_get_for_thread,
    verification_settings_get,
)
from bots.services.settings import verification_setting_change
from bots.services.users import user_ban, user_unban
from bots.verification.turnstile import missing_keys

# Audit details (short, in English: the console's language).
NO_USER = "no user row"
NOT_CLOSED = "Telegram refused to close the topic"
BUSY = "another purge or wipe runs"
IN_CELERY = "continues in the worker"


@dataclass(frozen=True)
class Command:
    name: str  # "/ban" (suffix removed, case kept)
    arguments: str  # the rest of the text, trimmed


def parse_command(text: str) -> Command:
    parts = text.split(maxsplit=1)
    return Command(name=command_name(text), arguments=parts[1].strip() if len(parts) > 1 else "")


def handle_admin_command(
    ctx: UpdateContext, text: str, *, thread_id: int, admin: Mapping[str, Any]
) -> None:
    """Run ``admin``'s ``/command`` written in ``thread_id`` (GENERAL_THREAD_ID = General)."""
    command = parse_command(text)
    issued = Issued(ctx=ctx, thread_id=thread_id, arguments=command.arguments, admin=admin)
    in_general = thread_id == GENERAL_THREAD_ID
    if command.name in ANYWHERE:
        ANYWHERE[command.name](issued)
    elif command.name in ANY_TOPIC:
        ANY_TOPIC[command.name](issued)
    elif command.name in GENERAL_ONLY:
        if in_general:
            GENERAL_ONLY[command.name](issued)
        else:
            issued.reply(texts.use_in_general())
    elif command.name == "/note" and not command.arguments:
        issued.reply(texts.note_usage())  # checked before the binding (spec §4.3)
    elif command.name in ABOUT_THE_TOPIC_USER:
        _with_binding(issued, ABOUT_THE_TOPIC_USER[command.name])
    elif command.name == "/broadcast":
        issued.reply(texts.broadcast_in_general())
    else:
        issued.reply(texts.unknown_command())


def _with_binding(issued: Issued, run: Callable[[Issued, Topic], None]) -> None:
    topic = topic_get_for_thread(bot_id=issued.ctx.bot_id, thread_id=issued.thread_id)
    if topic is None:
        issued.reply(texts.no_binding())
        return
    run(issued, topic)


# ------------------------------------------------------------------ /help (anywhere)


def _help(issued: Issued) -> None:
    switches = verification_settings_get()
    issued.reply(texts.help_text(verification_enabled=switches.enabled, mode=switches.mode))


# ------------------------------------------------------------------ about the topic's user


def _ban(issued: Issued, topic: Topic) -> None:
    # The card does not show the ban; the user learns it from the (throttled) ban notice.
    if not user_ban(bot_id=issued.ctx.bot_id, user_id=topic.user_id):
        issued.audit(AuditAction.BAN, AuditOutcome.REFUSED, user_id=topic.user_id, detail=NO_USER)
        issued.reply(texts.no_binding())  # a binding whose user row is gone
        return
    issued.audit(AuditAction.BAN, AuditOutcome.DONE, user_id=topic.user_id)
    issued.reply(texts.user_banned(topic.user_id))


def _unban(issued: Issued, topic: Topic) -> None:
    if not user_unban(bot_id=issued.ctx.bot_id, user_id=topic.user_id):
        issued.audit(AuditAction.UNBAN, AuditOutcome.REFUSED, user_id=topic.user_id, detail=NO_USER)
        issued.reply(texts.no_binding())
        return
    issued.audit(AuditAction.UNBAN, AuditOutcome.DONE, user_id=topic.user_id)
    issued.reply(texts.user_unbanned(topic.user_id))


def _note(issued: Issued, topic: Topic) -> None:
    stored = set_note(issued.ctx, topic=topic, note=issued.arguments)
    issued.audit(
        AuditAction.NOTE,
        AuditOutcome.DONE,
        user_id=topic.user_id,
        detail=f"{len(stored or '')} characters",
    )
    issued.reply(texts.note_saved(stored or ""))


def _unnote(issued: Issued, topic: Topic) -> None:
    set_note(issued.ctx, topic=topic, note=None)
    issued.audit(AuditAction.UNNOTE, AuditOutcome.DONE, user_id=topic.user_id)
    issued.reply(texts.note_cleared())


def _risk(issued: Issued, topic: Topic) -> None:
    _set_risk(issued, topic, is_risk=True)


def _unrisk(issued: Issued, topic: Topic) -> None:
    _set_risk(issued, topic, is_risk=False)


def _set_risk(issued: Issued, topic: Topic, *, is_risk: bool) -> None:
    action = AuditAction.RISK if is_risk else AuditAction.UNRISK
    if not set_risk(issued.ctx, user_id=topic.user_id, is_risk=is_risk):
        issued.audit(action, AuditOutcome.REFUSED, user_id=topic.user_id, detail=NO_USER)
        issued.reply(texts.no_binding())
        return
    issued.audit(action, AuditOutcome.DONE, user_id=topic.user_id)
    issued.reply(texts.risk_marked(topic.user_id) if is_risk else texts.risk_cleared(topic.user_id))


def _archive(issued: Issued, topic: Topic) -> None:
    """Spec §4.7: announce in the topic (before it closes), archive, report in General (a closed
    topic cannot receive messages)."""
    issued.reply(texts.archive_started())
    outcome = archive_conversation(issued.ctx, topic=topic)
    if not outcome.archived:
        issued.audit(
            AuditAction.ARCHIVE, AuditOutcome.FAILED, user_id=topic.user_id, detail=NOT_CLOSED
        )
        issued.report_in_general(texts.archive_failed(topic.user_id, topic.thread_id))
        return
    issued.audit(AuditAction.ARCHIVE, AuditOutcome.DONE, user_id=topic.user_id)
    lines = [texts.archive_done(topic.user_id, topic.thread_id)]
    if outcome.topic_gone:
        lines.append(texts.archive_topic_gone())
    if not outcome.user_notified:
        lines.append(texts.archive_notice_failed())
    issued.report_in_general("\n".join(lines))


def _purge(issued: Issued, topic: Topic) -> None:
    """Spec §4.9; the report is posted by the purge itself (here, or by its Celery
    continuation when the topic holds more than the webhook's budget)."""
    started = purge_topic(issued.ctx, topic=topic, started_by=issued.actor())
    if started.busy:
        issued.audit(AuditAction.PURGE, AuditOutcome.REFUSED, user_id=topic.user_id, detail=BUSY)
        issued.reply(texts.bulk_busy())
    elif started.continues is not None:
        # The Celery task adds the outcome's row when the purge ends.
        issued.audit(
            AuditAction.PURGE, AuditOutcome.STARTED, user_id=topic.user_id, detail=IN_CELERY
        )
        issued.reply(started.continues)
    else:
        issued.audit(
            AuditAction.PURGE,
            started.outcome or AuditOutcome.DONE,
            user_id=topic.user_id,
            detail=started.counts,
        )


def _delete_user(issued: Issued, topic: Topic) -> None:
    """/deluser posts its prompt, recorded as requested once it is posted (a prompt Telegram
    refused requested nothing); the deletion itself is recorded when it is confirmed."""
    if request_user_deletion(issued, topic):
        issued.audit(AuditAction.DELETE_USER, AuditOutcome.REQUESTED, user_id=topic.user_id)


def _wipe(issued: Issued) -> None:
    """/wipealldata posts its prompt, recorded as requested once it is posted; the wipe is
    recorded when it is confirmed."""
    if request_wipe(issued):
        issued.audit(AuditAction.WIPE, AuditOutcome.REQUESTED)


# ------------------------------------------------------------------ verification settings (General)


def _verify_on(issued: Issued) -> None:
    verification_setting_change(bot_id=issued.ctx.bot_id, key=VERIFY_ENABLED, value=ENABLED)
    issued.audit(AuditAction.VERIFICATION, AuditOutcome.DONE, detail="verification on")
    issued.reply(texts.verification_turned_on())


def _verify_off(issued: Issued) -> None:
    verification_setting_change(bot_id=issued.ctx.bot_id, key=VERIFY_ENABLED, value=DISABLED)
    issued.audit(AuditAction.VERIFICATION, AuditOutcome.DONE, detail="verification off")
    issued.reply(texts.verification_turned_off())


def _verify_mode(issued: Issued) -> None:
    """``/verifymode`` shows the mode (no writes); ``/verifymode <mode>`` switches it."""
    if not issued.arguments:
        switches = verification_settings_get()
        issued.reply(texts.verification_mode_current(mode=switches.mode, enabled=switches.enabled))
    elif issued.arguments in VERIFICATION_MODES:
        _switch_mode(issued, issued.arguments)
    else:
        issued.reply(texts.verification_mode_usage())


def _switch_mode(issued: Issued, mode: str) -> None:
    """Set the mode; a same-value switch bumps nothing but is confirmed all the same (so a
    redelivered switch shows the same confirmation)."""
    if mode == MODE_TURNSTILE:
        # Spec §4.6: both keys, or users would be stranded on a mode that cannot verify them.
        missing = missing_keys(issued.ctx.config)
        if missing:
            issued.audit(
                AuditAction.VERIFICATION,
                AuditOutcome.REFUSED,
                detail=f"mode {mode}: missing {', '.join(missing)}",
            )
            issued.reply(texts.turnstile_missing_keys(missing))
            return
    verification_setting_change(bot_id=issued.ctx.bot_id, key=VERIFY_MODE, value=mode)
    issued.audit(AuditAction.VERIFICATION, AuditOutcome.DONE, detail=f"mode {mode}")
    issued.reply(MODE_SET_REPLIES[mode]())


MODE_SET_REPLIES: dict[str, Callable[[], str]] = {
    MODE_MATH: texts.verification_mode_set_math,
    MODE_BUTTON: texts.verification_mode_set_button,
    MODE_TURNSTILE: texts.verification_mode_set_turnstile,
}


# ------------------------------------------------------------------ routing

ANYWHERE: dict[str, Callable[[Issued], None]] = {"/help": _help}
# A global effect, but no binding needed; General never classifies it, so only topics send it.
ANY_TOPIC: dict[str, Callable[[Issued], None]] = {"/wipealldata": _wipe}
GENERAL_ONLY: dict[str, Callable[[Issued], None]] = {
    "/verifyon": _verify_on,
    "/verifyoff": _verify_off,
    "/verifymode": _verify_mode,
    "/verifymode_math": lambda issued: _switch_mode(issued, MODE_MATH),
    "/verifymode_button": lambda issued: _switch_mode(issued, MODE_BUTTON),
    "/verifymode_turnstile": lambda issued: _switch_mode(issued, MODE_TURNSTILE),
}
ABOUT_THE_TOPIC_USER: dict[str, Callable[[Issued, Topic], None]] = {
    "/ban": _ban,
    "/unban": _unban,
    "/note": _note,
    "/unnote": _unnote,
    "/risk": _risk,
    "/unrisk": _unrisk,
    "/archive": _archive,
    "/deluser": _delete_user,
    "/purgemsg": _purge,
}
