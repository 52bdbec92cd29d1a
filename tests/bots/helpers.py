"""Row factories and small shortcuts shared by the bot's tests."""

from __future__ import annotations

import re
from bisect import bisect_left
from contextlib import contextmanager
from datetime import datetime

from django.db import connection

from bots.models import BotUser, RelayedMessage, Setting, Topic
from tests.fakes.telegram import FakeTelegram, FakeUser

# The math challenge's question, as the user reads it: "a + b = ?" or "a - b = ?".
MATH_QUESTION = re.compile(r"([0-9]) ([+-]) ([0-9]) = \?")


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


def user_row(telegram: FakeTelegram, user: FakeUser) -> BotUser:
    """The user's ``users`` row as stored now."""
    return BotUser.objects.get(bot_id=telegram.bot.id, user_id=user.id)


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


def solve_challenge(text: str) -> int:
    """The answer to a math challenge, found the way the user finds it: by reading the question."""
    first, operator, second = MATH_QUESTION.search(text).groups()
    return int(first) + int(second) if operator == "+" else int(first) - int(second)


def click(
    webhook, telegram: FakeTelegram, user: FakeUser, message_id: int, data: str
) -> str | None:
    """The user presses a button under ``message_id``; returns the toast Telegram showed."""
    update = telegram.click(user, message_id=message_id, data=data)
    webhook.deliver_ok(update)
    return telegram.callback_answer(update["callback_query"]["id"])


def answer_rightly(webhook, telegram: FakeTelegram, user: FakeUser, challenge) -> str | None:
    """The user presses the right answer of the math challenge ``challenge`` (a FakeMessage, as
    the user saw it); returns the toast."""
    answer = solve_challenge(challenge.text)
    return click(webhook, telegram, user, challenge.message_id, f"v:{answer}")


@contextmanager
def deletes_refused(table: str):
    """While inside, PostgreSQL refuses every DELETE on ``table`` (a trigger raises): a crash of
    the database step, between Telegram's side of an operation and the rows' side."""
    with connection.cursor() as cursor:
        cursor.execute(
            "create function test_refuse_deletes() returns trigger language plpgsql as $$"
            " begin raise exception 'deletes refused by the test'; end $$"
        )
        cursor.execute(
            f"create trigger test_refuse_deletes before delete on {table}"
            " for each statement execute function test_refuse_deletes()"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"drop trigger test_refuse_deletes on {table}")
            cursor.execute("drop function test_refuse_deletes()")


def click_in_group(
    webhook, telegram: FakeTelegram, who: FakeUser, message_id: int, data: str
) -> str | None:
    """``who`` presses a button under the bot's message ``message_id`` in the support group;
    returns the toast Telegram showed (None: the click was not answered)."""
    update = telegram.click(who, message_id=message_id, data=data, chat_id=telegram.support_chat_id)
    webhook.deliver_ok(update)
    return telegram.callback_answer(update["callback_query"]["id"])


def group_click(telegram: FakeTelegram, who: FakeUser, message_id: int, data: str) -> dict:
    """The update of ``who`` pressing a button under the bot's group message (not delivered)."""
    return telegram.click(who, message_id=message_id, data=data, chat_id=telegram.support_chat_id)


def keyboard_data(message) -> list[str]:
    """The callback data of a message's buttons, row by row (a FakeMessage as Telegram shows it)."""
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return [button["callback_data"] for row in rows for button in row]


def busiest_second(times: list[float]) -> int:
    """The most calls that reached Telegram within one second (any window [t, t + 1) starting
    at a call), from the fake's arrival times."""
    ordered = sorted(times)
    return max(
        (bisect_left(ordered, start + 1.0) - index for index, start in enumerate(ordered)),
        default=0,
    )
