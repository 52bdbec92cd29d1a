"""Reply mapping both ways (issue #24), against the fake Bot API: a reply to a relayed message
is relayed as a reply to its counterpart, found through the ledger; a target that is gone or
unknown falls back to a plain message; a redelivered reply is relayed once."""

from __future__ import annotations

import pytest

from bots.models import Topic
from tests.bots.helpers import open_conversation


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def _replying_to(message_id: int) -> dict:
    return {"reply_to_message": {"message_id": message_id, "date": 0, "chat": {"id": 0}}}


def test_a_users_reply_to_an_admins_message_replies_to_the_original_in_the_topic(
    webhook, telegram, user, admin, topic
):
    answer = telegram.group_message(admin, thread_id=topic.thread_id, text="which order?")
    webhook.deliver_ok(answer)
    users_copy = telegram.bot_messages(user.id)[-1]

    reply = telegram.private_message(user, text="order 1234", **_replying_to(users_copy.message_id))
    webhook.deliver_ok(reply)
    webhook.deliver_ok(reply)  # redelivered: relayed once

    relayed = telegram.topic_messages(topic.thread_id)[-1]
    assert relayed.text == "order 1234"
    assert relayed.reply_to_message_id == answer["message"]["message_id"]
    assert [m.text for m in telegram.topic_messages(topic.thread_id)].count("order 1234") == 1


def test_a_users_reply_to_their_own_message_replies_to_its_copy(webhook, telegram, user, topic):
    first = telegram.private_message(user, text="my order is 1234")
    webhook.deliver_ok(first)
    first_copy = telegram.topic_messages(topic.thread_id)[-1]

    webhook.deliver_ok(
        telegram.private_message(
            user, photo="receipt", **_replying_to(first["message"]["message_id"])
        )
    )

    relayed = telegram.topic_messages(topic.thread_id)[-1]
    assert (relayed.kind, relayed.reply_to_message_id) == ("photo", first_copy.message_id)


def test_an_admins_reply_in_the_topic_replies_to_the_users_message(
    webhook, telegram, user, admin, topic
):
    question = telegram.private_message(user, text="where is my parcel?")
    webhook.deliver_ok(question)
    copy_in_topic = telegram.topic_messages(topic.thread_id)[-1]

    webhook.deliver_ok(
        telegram.group_message(
            admin,
            thread_id=topic.thread_id,
            text="on its way",
            **_replying_to(copy_in_topic.message_id),
        )
    )

    answer = telegram.bot_messages(user.id)[-1]
    assert answer.text == "on its way"
    assert answer.reply_to_message_id == question["message"]["message_id"]


def test_a_topic_message_marked_as_replying_to_the_topic_itself_is_no_reply(
    webhook, telegram, user, admin, topic
):
    # Telegram marks every message in a topic as a reply to the topic's creation message.
    webhook.deliver_ok(
        telegram.group_message(
            admin, thread_id=topic.thread_id, text="hi", **_replying_to(topic.thread_id)
        )
    )

    [call] = [c for c in telegram.calls("sendMessage") if c.params["chat_id"] == user.id]
    assert "reply_parameters" not in call.params
    assert telegram.bot_messages(user.id)[-1].reply_to_message_id is None


def test_a_reply_whose_target_is_gone_falls_back_to_a_plain_message(
    webhook, telegram, user, admin, topic
):
    said = telegram.group_message(admin, thread_id=topic.thread_id, text="hello?")
    webhook.deliver_ok(said)
    users_copy = telegram.bot_messages(user.id)[-1]
    # The admin deletes their message in the topic (Telegram tells the bot nothing).
    telegram.delete_message_by_hand(telegram.support_chat_id, said["message"]["message_id"])

    webhook.deliver_ok(
        telegram.private_message(user, text="yes?", **_replying_to(users_copy.message_id))
    )

    relayed = telegram.topic_messages(topic.thread_id)[-1]
    assert (relayed.text, relayed.reply_to_message_id) == ("yes?", None)
    [call] = [c for c in telegram.calls("sendMessage") if c.params.get("text") == "yes?"]
    assert call.params["reply_parameters"] == {
        "message_id": said["message"]["message_id"],
        "allow_sending_without_reply": True,
    }
    assert call.ok


def test_an_admins_reply_whose_target_is_gone_falls_back_to_a_plain_message(
    webhook, telegram, user, admin, topic
):
    question = telegram.private_message(user, text="anyone there?")
    webhook.deliver_ok(question)
    copy_in_topic = telegram.topic_messages(topic.thread_id)[-1]
    # The user deletes their message in the private chat (Telegram tells the bot nothing).
    telegram.delete_message_by_hand(user.id, question["message"]["message_id"])

    webhook.deliver_ok(
        telegram.group_message(
            admin,
            thread_id=topic.thread_id,
            text="yes, here",
            **_replying_to(copy_in_topic.message_id),
        )
    )

    answer = telegram.bot_messages(user.id)[-1]
    assert (answer.text, answer.reply_to_message_id) == ("yes, here", None)
    [call] = [c for c in telegram.calls("sendMessage") if c.params.get("text") == "yes, here"]
    assert call.params["reply_parameters"] == {
        "message_id": question["message"]["message_id"],
        "allow_sending_without_reply": True,
    }
    assert call.ok


def test_a_redelivered_admins_reply_is_relayed_once(webhook, telegram, user, admin, topic):
    question = telegram.private_message(user, text="is it shipped?")
    webhook.deliver_ok(question)
    copy_in_topic = telegram.topic_messages(topic.thread_id)[-1]
    reply = telegram.group_message(
        admin,
        thread_id=topic.thread_id,
        text="shipped today",
        **_replying_to(copy_in_topic.message_id),
    )

    webhook.deliver_ok(reply)
    webhook.deliver_ok(reply)  # Telegram redelivers: relayed once

    answers = [m for m in telegram.bot_messages(user.id) if m.text == "shipped today"]
    assert [m.reply_to_message_id for m in answers] == [question["message"]["message_id"]]
    assert [c.params.get("text") for c in telegram.calls("sendMessage")].count("shipped today") == 1


def test_a_reply_to_an_unknown_message_is_relayed_plain(webhook, telegram, user, topic):
    webhook.deliver_ok(telegram.private_message(user, text="re: ?", **_replying_to(999)))

    [call] = [c for c in telegram.calls("sendMessage") if c.params.get("text") == "re: ?"]
    assert "reply_parameters" not in call.params
