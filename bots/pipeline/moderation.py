"""What admins do to a user: mark high-risk, annotate, archive (spec §4.3, §4.4, §4.7).

Two callers share these steps — the admin's ``/command`` in the user's topic and the operators'
Django admin — so both change exactly the same rows and refresh the pinned card the same way.
(/ban and /unban change no card: they are one service call each, ``bots.services.users``.)
Card refreshes here are best effort; the other Telegram steps follow the failure policy:
retryable ⇒ raise, permanent ⇒ as each function says.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bots import texts
from bots.clients.telegram import TelegramPermanentError, is_topic_gone, is_topic_not_modified
from bots.models import Topic
from bots.pipeline.card import refresh_card
from bots.pipeline.context import BotContext
from bots.pipeline.failures import required
from bots.selectors import verification_settings_get
from bots.services.topics import topic_set_note
from bots.services.users import user_archive, user_set_risk

logger = logging.getLogger(__name__)


def _refresh_card(ctx: BotContext, *, user_id: int) -> None:
    # The card's verification line depends on the global switch, read now (never cached).
    refresh_card(ctx, user_id=user_id, verification_enabled=verification_settings_get().enabled)


def set_risk(ctx: BotContext, *, user_id: int, is_risk: bool) -> bool:
    """Mark (or unmark) the user high-risk, reset the 24 h reminder, refresh the card.

    False: the user has no row (nothing changed).
    """
    if not user_set_risk(bot_id=ctx.bot_id, user_id=user_id, is_risk=is_risk):
        return False
    _refresh_card(ctx, user_id=user_id)
    return True


def set_note(ctx: BotContext, *, topic: Topic, note: str | None) -> str | None:
    """Store (truncated to 500 code points) or clear the topic's note, refresh the card.

    Returns the note as stored.
    """
    stored = topic_set_note(
        bot_id=ctx.bot_id, user_id=topic.user_id, thread_id=topic.thread_id, note=note
    )
    _refresh_card(ctx, user_id=topic.user_id)
    return stored


@dataclass(frozen=True)
class ArchiveOutcome:
    archived: bool  # False: Telegram refused to close the topic, and nothing was changed
    topic_gone: bool = False  # the topic had been deleted in Telegram (replaced on return)
    user_notified: bool = False  # the "session ended" DM was delivered


def archive_conversation(ctx: BotContext, *, topic: Topic) -> ArchiveOutcome:
    """Close the user's topic in Telegram, then soft-archive the user (spec §4.7 steps 2–4).

    ``closeForumTopic``: ok, ``TOPIC_NOT_MODIFIED`` (already closed) and topic-gone all count as
    closed; any other permanent error changes nothing (``archived`` False). Then, in one
    transaction, verification is cleared, the user becomes ``deleted`` and the binding
    ``closed`` (users row, binding, note and ledger are kept); the card is edited to ❌ (best
    effort); the user gets the "session ended" DM (no notice slot: an admin asked for it).
    Retryable Telegram errors raise: repeating the whole sequence converges (the close then
    answers TOPIC_NOT_MODIFIED and the rows are already archived).
    """
    topic_gone = False
    try:
        ctx.client.close_forum_topic(chat_id=ctx.support_chat_id, message_thread_id=topic.thread_id)
    except TelegramPermanentError as error:
        topic_gone = is_topic_gone(error)
        if not topic_gone and not is_topic_not_modified(error):
            logger.warning("archive: topic %s not closed: %s", topic.thread_id, error)
            return ArchiveOutcome(archived=False)
    user_archive(bot_id=ctx.bot_id, user_id=topic.user_id, thread_id=topic.thread_id, now=ctx.now)
    if not topic_gone:  # a deleted topic took its card with it
        _refresh_card(ctx, user_id=topic.user_id)
    notice = required(
        "archive notice",
        lambda: ctx.client.send_message(chat_id=topic.user_id, text=texts.archive_notice()),
    )
    return ArchiveOutcome(archived=True, topic_gone=topic_gone, user_notified=notice is not None)
