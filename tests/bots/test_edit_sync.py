"""Edit sync both ways (issue #24), against the fake Bot API: an edited message edits its
relayed copy, found through the ledger; unknown messages and vanished copies stay silent; a
redelivered edit is applied once."""

from __future__ import annotations

import pytest

from bots.models import Topic
from tests.bots.helpers import dm_texts, open_conversation, topic_texts


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def _user_writes(webhook, telegram, user, **content) -> int:
    update = telegram.private_message(user, **content)
    webhook.deliver_ok(update)
    return update["message"]["message_id"]


def _admin_writes(webhook, telegram, admin, topic, **content) -> int:
    update = telegram.group_message(admin, thread_id=topic.thread_id, **content)
    webhook.deliver_ok(update)
    return update["message"]["message_id"]


def test_a_users_edit_edits_the_copy_in_the_topic_once(webhook, telegram, user, topic):
    message_id = _user_writes(webhook, telegram, user, text="my order is 1234")
    telegram.forget_calls()

    edit = telegram.edit_private_message(user, message_id, text="my order is 1243")
    webhook.deliver_ok(edit)
    webhook.deliver_ok(edit)  # Telegram redelivers: nothing more happens

    assert topic_texts(telegram, topic.thread_id)[1:] == ["hello", "my order is 1243"]
    assert [call.method for call in telegram.calls()] == ["editMessageText"]


def test_an_admins_edit_edits_the_users_copy(webhook, telegram, user, admin, topic):
    message_id = _admin_writes(webhook, telegram, admin, topic, text="we ship on Monday")
    telegram.forget_calls()

    webhook.deliver_ok(
        telegram.edit_group_message(
            admin, message_id, thread_id=topic.thread_id, text="we ship on Tuesday"
        )
    )

    assert dm_texts(telegram, user) == ["we ship on Tuesday"]
    [call] = telegram.calls()
    assert call.method == "editMessageText" and call.params["chat_id"] == user.id


def test_a_replaced_photo_and_a_new_caption_replace_the_copys_media(webhook, telegram, user, topic):
    message_id = _user_writes(webhook, telegram, user, photo="photo-1", caption="receipt")

    webhook.deliver_ok(
        telegram.edit_private_message(user, message_id, photo="photo-2", caption="new receipt")
    )

    copy = telegram.topic_messages(topic.thread_id)[-1]
    assert (copy.kind, copy.file_id, copy.caption) == ("photo", "photo-2", "new receipt")
    [call] = telegram.calls("editMessageMedia")
    assert call.params["media"] == {"type": "photo", "media": "photo-2", "caption": "new receipt"}


def test_a_voice_messages_caption_is_edited(webhook, telegram, user, admin, topic):
    message_id = _admin_writes(webhook, telegram, admin, topic, voice="voice-1", caption="hi")

    webhook.deliver_ok(
        telegram.edit_group_message(
            admin, message_id, thread_id=topic.thread_id, voice="voice-1", caption="hello"
        )
    )

    assert telegram.bot_messages(user.id)[-1].caption == "hello"
    assert [call.method for call in telegram.calls() if call.method.startswith("edit")] == [
        "editMessageCaption"
    ]


def test_edits_of_unknown_messages_stay_silent(webhook, telegram, user, admin, member, topic):
    start = _user_writes(webhook, telegram, user, text="/start")  # never relayed
    command = _admin_writes(webhook, telegram, admin, topic, text="/note vip")
    member_says = _admin_writes(webhook, telegram, member, topic, text="not an admin")
    telegram.forget_calls()

    for update in (
        telegram.edit_private_message(user, start, text="/start again"),
        telegram.edit_private_message(user, 999, text="no such message"),
        telegram.edit_group_message(admin, command, thread_id=topic.thread_id, text="/note x"),
        telegram.edit_group_message(member, member_says, thread_id=topic.thread_id, text="edited"),
    ):
        webhook.deliver_ok(update)

    assert telegram.calls() == []


def test_an_edit_whose_copy_is_gone_is_dropped_silently(webhook, telegram, user, topic):
    message_id = _user_writes(webhook, telegram, user, text="first")
    copy = telegram.topic_messages(topic.thread_id)[-1]
    telegram.delete_message_by_hand(telegram.support_chat_id, copy.message_id)

    webhook.deliver_ok(telegram.edit_private_message(user, message_id, text="second"))

    [call] = telegram.calls("editMessageText")
    assert call.status == 400  # "message to edit not found": nothing else to do


def test_an_admins_edit_whose_user_copy_is_gone_is_dropped_silently(
    webhook, telegram, user, admin, topic
):
    message_id = _admin_writes(webhook, telegram, admin, topic, text="we ship on Monday")
    users_copy = telegram.bot_messages(user.id)[-1]
    # The user deletes the bot's message in their chat (Telegram tells the bot nothing).
    telegram.delete_message_by_hand(user.id, users_copy.message_id)
    telegram.forget_calls()

    webhook.deliver_ok(
        telegram.edit_group_message(
            admin, message_id, thread_id=topic.thread_id, text="we ship on Tuesday"
        )
    )

    # One try ("message to edit not found"), then nothing: no new message to the user, no
    # error in the topic.
    [call] = telegram.calls()
    assert (call.method, call.params["chat_id"], call.status) == ("editMessageText", user.id, 400)
    assert "we ship on Tuesday" not in dm_texts(telegram, user)
    assert "we ship on Tuesday" not in topic_texts(telegram, topic.thread_id)


def test_a_retryable_failure_is_redelivered_and_applied_once(
    webhook, telegram, user, topic, clock, inbox
):
    message_id = _user_writes(webhook, telegram, user, text="v1")
    edit = telegram.edit_private_message(user, message_id, text="v2")
    telegram.fail("editMessageText", status=502)

    webhook.deliver_ok(edit)  # stored: the inbox's worker retries it
    inbox.later(seconds=60)

    assert topic_texts(telegram, topic.thread_id)[-1] == "v2"
    assert [call.status for call in telegram.calls("editMessageText")] == [502, 200]


def test_a_banned_users_edits_are_not_relayed(webhook, telegram, user, admin, topic):
    message_id = _user_writes(webhook, telegram, user, text="before the ban")
    _admin_writes(webhook, telegram, admin, topic, text="/ban")
    telegram.forget_calls()

    webhook.deliver_ok(telegram.edit_private_message(user, message_id, text="spam"))

    assert telegram.calls("editMessageText") == []
    assert "before the ban" in topic_texts(telegram, topic.thread_id)


def test_only_edits_in_private_chats_and_topics_are_classified_as_edits():
    from bots.pipeline.classify import UpdateKind, classify_update

    group = -1001234567890
    sender = {"id": 7, "is_bot": False, "first_name": "A"}

    def kind(chat: dict, **extra) -> UpdateKind:
        message = {"message_id": 5, "from": sender, "chat": chat, "text": "x", **extra}
        return classify_update({"update_id": 1, "edited_message": message}, group).kind

    assert kind({"id": 7, "type": "private"}) == UpdateKind.EDIT_INBOUND
    assert kind({"id": group, "type": "supergroup"}, message_thread_id=9) == (
        UpdateKind.EDIT_OUTBOUND
    )
    assert kind({"id": group, "type": "supergroup"}) == UpdateKind.IGNORE  # General
    assert kind({"id": -100999, "type": "supergroup"}, message_thread_id=9) == UpdateKind.IGNORE
