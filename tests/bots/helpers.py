"""Row factories and small shortcuts shared by the bot's tests."""

from __future__ import annotations

from datetime import datetime

from bots.models import BotUser, RelayedMessage, Setting, Topic
from tests.fakes.telegram import FakeTelegram, FakeUser


def make_user(
    telegram_user: FakeUser, *, bot_id: int, now: datetime, verified: bool = True, **fields
) -> BotUser:
    """A ``users`` row as a returning user has it (verified unless said otherwise)."""
    return BotUser.objects.create(
        bot_id=bot_id,
        user_id=telegram_user.id,
        first_name=telegram_user.first_name,
        last_name=telegram_user.last_name or "",
        username=telegram_user.username or "",
        is_verified=verified,
        verified_at=now if verified else None,
        first_seen_at=now,
        last_seen_at=now,
        **fields,
    )


def set_switches(**values: str) -> None:
    """Write verification switches (``verify_enabled="0"``, ``verify_mode="button"``, ...)."""
    for key, value in values.items():
        Setting.objects.update_or_create(key=key, defaults={"value": value})


def open_conversation(
    webhook, telegram: FakeTelegram, user: FakeUser, *, bot_id: int, now
) -> Topic:
    """A verified user's first message: creates the topic and the card. Returns the binding."""
    make_user(user, bot_id=bot_id, now=now)
    webhook.deliver_ok(telegram.private_message(user, text="hello"))
    return Topic.objects.get(bot_id=bot_id, user_id=user.id)


def dm_texts(telegram: FakeTelegram, user: FakeUser) -> list[str | None]:
    """The texts of the bot's live messages in the user's private chat, oldest first."""
    return [message.text for message in telegram.bot_messages(user.id)]


def topic_texts(telegram: FakeTelegram, thread_id: int) -> list[str | None]:
    """The texts of the bot's live messages in a topic (card included), oldest first."""
    return [message.text for message in telegram.topic_messages(thread_id)]


def general_texts(telegram: FakeTelegram) -> list[str | None]:
    """The texts of the bot's live messages in the support group's General topic."""
    return [
        message.text
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.thread_id is None
    ]


def card_text(telegram: FakeTelegram, topic: Topic) -> str | None:
    """The pinned card of ``topic`` as Telegram shows it now."""
    return telegram.message(telegram.support_chat_id, topic.pinned_msg_id).text


def table_state() -> dict:
    """Every row of the tables a command may change, for "nothing changed" assertions."""
    return {
        "users": list(BotUser.objects.order_by("bot_id", "user_id").values()),
        "topics": list(Topic.objects.order_by("bot_id", "user_id").values()),
        "messages": list(RelayedMessage.objects.order_by("id").values()),
        "settings": dict(Setting.objects.values_list("key", "value")),
    }
