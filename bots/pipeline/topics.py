"""Finding the user's forum topic, creating, reopening and replacing it (spec §2.6, §2.9)."""

from __future__ import annotations

import logging
import time

from bots.clients.telegram import (
    TelegramError,
    TelegramPermanentError,
    TelegramRetryableError,
    is_topic_gone,
    is_topic_not_modified,
)
from bots.models import BotUser, Topic, TopicStatus, UserStatus
from bots.pipeline.card import topic_title
from bots.pipeline.classify import is_positive_integer
from bots.pipeline.context import BotContext
from bots.pipeline.failures import recorded, required
from bots.selectors import topic_get_for_user
from bots.services.deletion_fence import DeletionInProgress, deletion_fenced
from bots.services.topics import topic_create, topic_delete, topic_mark_open
from bots.services.users import user_mark_active

logger = logging.getLogger(__name__)


class TopicBindingLost(Exception):
    """A topic-creation race was lost but no winner's binding can be read: retry the update."""


def resolve_topic(ctx: BotContext, user: BotUser) -> Topic | None:
    """The open topic this user's message goes to, or None to drop the message.

    Open binding ⇒ reuse. Closed ⇒ reopen it (topic gone ⇒ replace it; other permanent error ⇒
    drop). No binding ⇒ create one. Retryable Telegram errors propagate. Resolving a topic
    resumes the conversation (``users.status='active'``).
    """
    topic = topic_get_for_user(bot_id=ctx.bot_id, user_id=user.user_id)
    if topic is not None and topic.status == TopicStatus.CLOSED:
        topic = reopen_topic(ctx, user, topic)
        if topic is None:
            return None
    if topic is None:
        topic = create_topic(ctx, user)
    if topic is not None and user.status != UserStatus.ACTIVE:
        # ``user`` was read at the start of this message: only an archived user needs the write.
        user_mark_active(bot_id=ctx.bot_id, user_id=user.user_id)
    return topic


def reopen_topic(ctx: BotContext, user: BotUser, topic: Topic) -> Topic | None:
    """Reopen a topic closed in Telegram (native close, /archive, or TOPIC_CLOSED on a send).

    Returns the reopened topic, a replacement when Telegram says the topic is gone, or None
    (another permanent error: the binding is kept and the message dropped).
    """
    try:
        ctx.client.reopen_forum_topic(
            chat_id=ctx.support_chat_id, message_thread_id=topic.thread_id
        )
    except TelegramPermanentError as error:
        if is_topic_gone(error):
            return replace_topic(ctx, user, topic)
        if not is_topic_not_modified(error):  # TOPIC_NOT_MODIFIED: it is open already
            logger.warning("reopen topic %s failed, message dropped: %s", topic.thread_id, error)
            return None
    topic_mark_open(bot_id=ctx.bot_id, thread_id=topic.thread_id)
    topic.status, topic.closed_at = TopicStatus.OPEN, None
    return topic


def replace_topic(ctx: BotContext, user: BotUser, topic: Topic) -> Topic | None:
    """The topic was deleted by hand in Telegram: drop the binding (its note is lost; ledger rows
    stay with a dangling thread id) and create a new topic. None when that fails permanently;
    raises DeletionInProgress (nothing changed) while a wipe or this user's deletion runs."""
    _unless_fenced(ctx, user)  # before the binding goes: a running deletion still needs it
    logger.info("topic %s is gone; creating a replacement", topic.thread_id)
    topic_delete(bot_id=ctx.bot_id, user_id=user.user_id, thread_id=topic.thread_id)
    return create_topic(ctx, user)


def _unless_fenced(ctx: BotContext, user: BotUser) -> None:
    """Raises DeletionInProgress while a wipe or this user's deletion runs: a topic made now
    would outlive it (bots.services.deletion_fence)."""
    if deletion_fenced(bot_id=ctx.bot_id, user_id=user.user_id):
        raise DeletionInProgress(f"user {user.user_id}: deletion in progress")


def create_topic(ctx: BotContext, user: BotUser) -> Topic | None:
    """Create the user's forum topic and bind it; None when Telegram refuses permanently.

    Two first messages of one user can race: both create a topic, one binding wins, and the
    loser deletes the topic it created (best effort) and continues with the winner's binding.
    Raises DeletionInProgress (nothing created) while a wipe or this user's deletion runs.
    """
    _unless_fenced(ctx, user)
    title = topic_title(user)
    created = required(
        "createForumTopic",
        lambda: ctx.client.create_forum_topic(chat_id=ctx.support_chat_id, name=title),
    )
    if created is None:
        return None
    thread_id = created.get("message_thread_id") if isinstance(created, dict) else None
    if not is_positive_integer(thread_id):
        raise ValueError("createForumTopic returned no message_thread_id")
    bound = recorded(
        "topic binding",
        lambda: topic_create(
            bot_id=ctx.bot_id, user_id=user.user_id, thread_id=thread_id, title=title, now=ctx.now
        ),
    )
    if bound:
        return topic_get_for_user(bot_id=ctx.bot_id, user_id=user.user_id)
    mine = topic_get_for_user(bot_id=ctx.bot_id, user_id=user.user_id)
    if mine is not None and mine.thread_id == thread_id:
        return mine  # the first try was written after all, its answer lost with the connection
    logger.info("topic race lost for user %s; deleting topic %s", user.user_id, thread_id)
    _delete_lost_topic(ctx, thread_id)
    winner = topic_get_for_user(bot_id=ctx.bot_id, user_id=user.user_id)
    if winner is None:
        raise TopicBindingLost(f"user {user.user_id}: no binding after a lost creation race")
    return winner


# The loser's topic is known only to this attempt: a redelivery could not find it again.
LOST_TOPIC_DELETE_ATTEMPTS = 3
LOST_TOPIC_RETRY_PAUSE_SECONDS = 0.5


def _delete_lost_topic(ctx: BotContext, thread_id: int) -> None:
    """Delete the topic a lost creation race made, trying again after a retryable failure (a
    5xx, a 429, the network): left behind it would be an empty second topic of the user."""
    for attempt in range(1, LOST_TOPIC_DELETE_ATTEMPTS + 1):
        try:
            ctx.client.delete_forum_topic(chat_id=ctx.support_chat_id, message_thread_id=thread_id)
            return
        except TelegramRetryableError as error:
            logger.warning("deleteForumTopic (race loser), attempt %s: %s", attempt, error)
            if attempt < LOST_TOPIC_DELETE_ATTEMPTS:
                time.sleep(LOST_TOPIC_RETRY_PAUSE_SECONDS)
        except TelegramError as error:
            logger.warning("deleteForumTopic (race loser) failed: %s", error)
            return
        except Exception:  # best effort: the update itself went well
            logger.exception("deleteForumTopic (race loser) failed")
            return
