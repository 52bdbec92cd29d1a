"""A user's private message (spec §2.1–§2.5): what is dropped, and the three gates."""

from __future__ import annotations

import pytest

from bots import texts
from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import CARD_BOB, START
from tests.bots.helpers import (
    answer_rightly,
    card_text,
    dm_texts,
    make_user,
    open_conversation,
    set_switches,
    topic_texts,
    user_row,
)

# ------------------------------------------------------------------ what never gets a user row


@pytest.mark.parametrize(
    "content",
    [
        {"location": {"latitude": 1.0, "longitude": 2.0}},
        {"video_note": {"file_id": "vn"}},
        {"text": ""},
    ],
)
def test_unsupported_content_finishes_silently(webhook, telegram, user, content):
    update = telegram.private_message(user, **content)

    webhook.deliver_ok(update)

    assert BotUser.objects.count() == 0
    assert telegram.calls() == []
    assert ProcessedUpdate.objects.get().status == "processed"


def test_a_message_without_sender_finishes_silently(webhook, telegram, user):
    update = telegram.private_message(user, text="hi")
    del update["message"]["from"]

    webhook.deliver_ok(update)

    assert BotUser.objects.count() == 0
    assert telegram.calls() == []


# ------------------------------------------------------------------ gate 1: ban


def test_a_banned_user_gets_one_notice_a_minute_and_nothing_else(webhook, telegram, user, clock):
    make_user(user, bot_id=telegram.bot.id, now=clock.now, is_banned=True)

    webhook.deliver_ok(telegram.private_message(user, text="one"))
    clock.advance(seconds=59)
    webhook.deliver_ok(telegram.private_message(user, text="two"))

    assert dm_texts(telegram, user) == [texts.ban_notice()]
    row = user_row(telegram, user)
    assert (row.rate_count, row.rate_window_start, row.last_notice_at) == (0, None, START)
    assert Topic.objects.count() == 0
    assert RelayedMessage.objects.count() == 0

    clock.advance(seconds=1)
    webhook.deliver_ok(telegram.private_message(user, text="three"))
    assert dm_texts(telegram, user) == [texts.ban_notice(), texts.ban_notice()]


def test_a_banned_unverified_user_gets_no_challenge(webhook, telegram, user, clock):
    make_user(user, bot_id=telegram.bot.id, now=clock.now, verified=False, is_banned=True)

    webhook.deliver_ok(telegram.private_message(user, text="/start"))

    assert dm_texts(telegram, user) == [texts.ban_notice()]
    assert user_row(telegram, user).verify_request_hash is None


# ------------------------------------------------------------------ gate 2: verification


def test_first_contact_gets_welcome_and_challenge_and_is_not_relayed(webhook, telegram, user):
    webhook.deliver_ok(telegram.private_message(user, text="I need help"))

    welcome, challenge = telegram.bot_messages(user.id)
    assert welcome.text == texts.welcome_default()
    assert challenge.text.startswith("为了确认你是真人，请回答下面的问题：\n")
    [buttons] = challenge.reply_markup["inline_keyboard"]
    assert len(buttons) == 4
    row = user_row(telegram, user)
    assert (row.first_name, row.last_name, row.username, row.status) == (
        "Bob",
        "Stone",
        "bob",
        "active",
    )
    assert (row.is_verified, row.verify_msg_id, row.verify_request_generation) == (
        False,
        challenge.message_id,
        0,
    )
    assert f"v:{row.verify_answer}" in [button["callback_data"] for button in buttons]
    assert len(row.verify_request_hash) == 64
    assert Topic.objects.count() == 0
    assert RelayedMessage.objects.count() == 0
    assert telegram.calls("createForumTopic") == []


def test_custom_welcome_text(webhook, bot_settings, telegram, user):
    bot_settings.WELCOME_TEXT = "Welcome!\\nAsk away."

    webhook.deliver_ok(telegram.private_message(user, text="hi"))

    assert dm_texts(telegram, user)[0] == "Welcome!\nAsk away."


def test_an_unverified_user_gets_at_most_one_new_challenge_a_minute(webhook, telegram, user, clock):
    webhook.deliver_ok(telegram.private_message(user, text="one"))
    first_hash = user_row(telegram, user).verify_request_hash
    clock.advance(seconds=30)
    webhook.deliver_ok(telegram.private_message(user, text="two"))
    assert len(telegram.bot_messages(user.id)) == 2  # welcome + the first challenge only

    clock.advance(seconds=30)
    webhook.deliver_ok(telegram.private_message(user, text="three"))

    messages = telegram.bot_messages(user.id)
    assert len(messages) == 3
    row = user_row(telegram, user)
    assert row.verify_msg_id == messages[-1].message_id
    assert row.verify_request_hash != first_hash
    assert Topic.objects.count() == 0


def test_start_from_an_unverified_user_gets_the_welcome_and_no_challenge(
    webhook, telegram, user, clock
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now, verified=False)

    webhook.deliver_ok(telegram.private_message(user, text="/start"))

    assert dm_texts(telegram, user) == [texts.welcome_default()]
    assert user_row(telegram, user).verify_request_hash is None


def test_verification_off_relays_unverified_users(webhook, telegram, user, clock):
    set_switches(verify_enabled="0")

    webhook.deliver_ok(telegram.private_message(user, text="hello"))

    topic = Topic.objects.get()
    assert topic_texts(telegram, topic.thread_id) == [
        CARD_BOB.replace("验证状态：✅ 已验证", "验证状态：未启用"),
        "hello",
    ]
    assert dm_texts(telegram, user) == []
    assert user_row(telegram, user).is_verified is False


def test_verification_expires_after_the_ttl_boundary_included(
    webhook, bot_settings, telegram, user, clock
):
    bot_settings.VERIFY_TTL_HOURS = "24"
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    clock.advance(hours=23, minutes=59)
    webhook.deliver_ok(telegram.private_message(user, text="still fine"))
    assert topic_texts(telegram, topic.thread_id)[-1] == "still fine"

    clock.advance(minutes=1)  # exactly 24 h after verification
    webhook.deliver_ok(telegram.private_message(user, text="too late"))

    row = user_row(telegram, user)
    assert (row.is_verified, row.verified_at) == (False, None)
    assert topic_texts(telegram, topic.thread_id)[-1] == "still fine"
    assert card_text(telegram, topic) == CARD_BOB.replace("✅ 已验证", "❌ 未验证")
    [challenge] = telegram.bot_messages(user.id)
    assert row.verify_msg_id == challenge.message_id


# ------------------------------------------------------------------ gate 3: rate limit


def test_the_rate_limit_relays_n_then_re_verifies(webhook, bot_settings, telegram, user, clock):
    bot_settings.MAX_MESSAGES_PER_MINUTE = "3"
    make_user(user, bot_id=telegram.bot.id, now=clock.now)

    for number in range(1, 6):
        webhook.deliver_ok(telegram.private_message(user, text=f"message {number}"))
        clock.advance(seconds=5)

    topic = Topic.objects.get()
    assert topic_texts(telegram, topic.thread_id)[1:] == ["message 1", "message 2", "message 3"]
    [overflow] = telegram.bot_messages(user.id)  # the 5th message hit gate 2 silently
    assert overflow.text.startswith(
        "发送太快了：每分钟最多 3 条消息，刚才这条没有送达。请重新完成验证后再发送。\n\n"
        "为了确认你是真人，请回答下面的问题：\n"
    )
    assert len(overflow.reply_markup["inline_keyboard"][0]) == 4
    row = user_row(telegram, user)
    assert (row.is_verified, row.verify_msg_id) == (False, overflow.message_id)
    assert card_text(telegram, topic) == CARD_BOB.replace("✅ 已验证", "❌ 未验证")
    assert RelayedMessage.objects.count() == 3

    clock.advance(seconds=50)  # 60 s after the overflow notice (sent at +15 s): a new challenge
    webhook.deliver_ok(telegram.private_message(user, text="message 6"))
    assert len(telegram.bot_messages(user.id)) == 2


def test_the_rate_window_restarts_after_sixty_seconds(webhook, bot_settings, telegram, user, clock):
    bot_settings.MAX_MESSAGES_PER_MINUTE = "2"
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="a"))
    webhook.deliver_ok(telegram.private_message(user, text="b"))

    clock.advance(seconds=60)
    webhook.deliver_ok(telegram.private_message(user, text="c"))
    webhook.deliver_ok(telegram.private_message(user, text="d"))

    assert RelayedMessage.objects.count() == 4
    row = user_row(telegram, user)
    assert (row.rate_window_start, row.rate_count) == (clock.now, 2)


def test_overflow_in_turnstile_mode_without_keys_says_verification_is_unavailable(
    webhook, bot_settings, telegram, user, clock
):
    """Turnstile is never downgraded to a challenge of another mode (tests/bots/turnstile/
    test_challenge.py has the overflow with the keys set)."""
    bot_settings.MAX_MESSAGES_PER_MINUTE = "1"
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    set_switches(verify_mode="turnstile")
    webhook.deliver_ok(telegram.private_message(user, text="a"))

    webhook.deliver_ok(telegram.private_message(user, text="b"))

    assert dm_texts(telegram, user) == [
        f"{texts.rate_limited_prefix(1)}\n\n{texts.verification_unavailable()}"
    ]
    row = user_row(telegram, user)
    assert (row.is_verified, row.verify_request_hash) == (False, None)


def test_with_verification_off_messages_over_the_limit_leave_card_and_challenge_alone(
    webhook, bot_settings, telegram, user, clock
):
    """Verification off: no gate stops the messages after the overflow, so each one meets the
    rate limit again. The card says "not enabled" whatever happens, and the challenge of the
    overflow notice stays answerable."""
    bot_settings.MAX_MESSAGES_PER_MINUTE = "2"
    set_switches(verify_enabled="0")
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    card_before = card_text(telegram, topic)

    for number in range(2, 7):  # the 3rd to 6th messages of the minute are over the limit
        clock.advance(seconds=1)
        webhook.deliver_ok(telegram.private_message(user, text=f"message {number}"))

    assert topic_texts(telegram, topic.thread_id)[1:] == ["hello", "message 2"]
    assert telegram.calls("editMessageText") == []
    assert card_text(telegram, topic) == card_before
    [overflow] = telegram.bot_messages(user.id)
    assert overflow.text.startswith("发送太快了：每分钟最多 2 条消息")
    assert answer_rightly(webhook, telegram, user, overflow) == texts.toast_verified()
