"""The pinned user-info card: one per topic (spec §2.7).

The card is the admins' view of who writes in the topic (the bot is the visible sender of every
relayed message). It is sent and pinned once per topic and edited in place afterwards.
"""

from __future__ import annotations

import logging

from bots import texts
from bots.clients.telegram import TelegramPermanentError, is_message_not_modified
from bots.models import BotUser, Topic
from bots.outbound.limiter import Priority
from bots.outbound.paced import outbound_priority
from bots.pipeline.context import BotContext
from bots.pipeline.failures import best_effort, required
from bots.selectors import topic_get_for_user, user_get
from bots.services.topics import topic_set_pinned_message

logger = logging.getLogger(__name__)

# Telegram's limit for a topic name.
TOPIC_TITLE_MAX_LENGTH = 128


def display_name(user: BotUser) -> str:
    """First and last name (``(@username)`` appended when known), else ``@username``, else
    ``ID_<id>``."""
    name = " ".join(part for part in (user.first_name.strip(), user.last_name.strip()) if part)
    username = user.username.strip()
    if name:
        return f"{name} (@{username})" if username else name
    if username:
        return f"@{username}"
    return f"ID_{user.user_id}"


def topic_title(user: BotUser) -> str:
    """The topic's name, fixed at creation: first name, else ``@username``, else ``ID_<id>``."""
    title = user.first_name.strip()
    if not title:
        title = f"@{user.username.strip()}" if user.username.strip() else f"ID_{user.user_id}"
    return title[:TOPIC_TITLE_MAX_LENGTH]


def compose_card(user: BotUser, *, note: str | None, verification_enabled: bool) -> str:
    """The card's text, line by line as spec §2.7 orders it."""
    if not verification_enabled:
        verification = texts.card_verification_disabled()
    elif user.is_verified:
        verification = texts.card_verified()
    else:
        verification = texts.card_unverified()
    lines = [
        texts.card_nickname(display_name(user)),
        texts.card_user_id(user.user_id),
        texts.card_first_seen(user.first_seen_at.strftime("%Y-%m-%d %H:%M")),
        verification,
    ]
    if user.is_risk:
        lines.append(texts.card_risk())
    if note:
        lines.append(texts.card_note(note))
    return "\n".join(lines)


def post_card(ctx: BotContext, *, user: BotUser, topic: Topic, verification_enabled: bool) -> None:
    """Send the card into the topic, store its message id, then pin it silently.

    Send retryable ⇒ raise; send permanent ⇒ skip (nothing stored, the next message tries
    again). The id is stored before the pin so that a redelivery never sends a second card
    (one card per topic); the pin itself is best effort — a card that could not be pinned is
    still the card, edited in place from then on.
    """
    text = compose_card(user, note=topic.note, verification_enabled=verification_enabled)
    sent = required(
        "card send",
        lambda: ctx.client.send_message(
            chat_id=ctx.support_chat_id, text=text, message_thread_id=topic.thread_id
        ),
    )
    if sent is None:
        return
    if not topic_set_pinned_message(
        bot_id=ctx.bot_id,
        user_id=user.user_id,
        thread_id=topic.thread_id,
        message_id=sent["message_id"],
    ):
        # Another message of the user stored its card first (two deliveries overlapped), or
        # the binding changed meanwhile: this card is one too many.
        logger.info("card: topic %s has a card already; removing this one", topic.thread_id)
        best_effort(
            "surplus card delete",
            lambda: ctx.client.delete_message(
                chat_id=ctx.support_chat_id, message_id=sent["message_id"]
            ),
        )
        return
    best_effort(
        "card pin",
        lambda: ctx.client.pin_chat_message(
            chat_id=ctx.support_chat_id, message_id=sent["message_id"]
        ),
    )


def edit_card(ctx: BotContext, *, user: BotUser, topic: Topic, verification_enabled: bool) -> bool:
    """Edit the topic's card to show ``user`` as given, best effort (never raises). Returns
    whether Telegram took the edit (False too for a topic without a card: nothing to edit).

    ``verification_enabled`` is the switch this message read (settings are read once per
    message).
    """
    card_msg_id = topic.pinned_msg_id
    if card_msg_id is None:
        return False
    text = compose_card(user, note=topic.note, verification_enabled=verification_enabled)

    def edit() -> bool:
        try:
            ctx.client.edit_message_text(
                chat_id=ctx.support_chat_id, message_id=card_msg_id, text=text
            )
        except TelegramPermanentError as error:
            if is_message_not_modified(error):
                return True  # the card shows exactly this already
            raise
        return True

    # Card edits yield to live relays in the shared outbound limiter.
    with outbound_priority(Priority.CARD):
        edited = best_effort("card refresh", edit)
    return edited is True


def refresh_card(ctx: BotContext, *, user_id: int, verification_enabled: bool) -> None:
    """Edit the user's card to the profile as stored now, if they have a topic with a card."""
    topic = topic_get_for_user(bot_id=ctx.bot_id, user_id=user_id)
    user = user_get(bot_id=ctx.bot_id, user_id=user_id)
    if topic is not None and user is not None:
        edit_card(ctx, user=user, topic=topic, verification_enabled=verification_enabled)
