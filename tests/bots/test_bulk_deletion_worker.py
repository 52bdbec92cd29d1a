"""Bulk deletions that outgrow a webhook continue in a real Celery worker: a 3,000-message purge
under Telegram's flood control, and a wipe handed over half-way. The worker's bot talks to the
session's fake Bot API (its environment is fixed when it starts), so these tests use that fake."""

from __future__ import annotations

import re
import time

import pytest

from bots import texts
from bots.models import BotUser, RelayedMessage, Topic
from bots.pipeline import bulk
from tests.bots.helpers import busiest_second, general_texts, open_conversation, topic_texts
from tests.conftest import BOT_DELETES_PER_SECOND

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]

CARD = "昵称：Iris\n用户 ID：7601\n首次对话：2026-10-01 12:00 (UTC)\n验证状态：✅ 已验证"


@pytest.fixture
def telegram(worker_telegram):
    worker_telegram.reset()
    yield worker_telegram
    worker_telegram.reset()


def _wait_until(condition, *, timeout: float = 180) -> None:
    """Wait for the worker to get there (it runs in its own process)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the worker did not finish in time"
        time.sleep(0.2)


def test_a_topic_of_3000_messages_is_purged_within_telegrams_rate_limit(
    celery_worker, webhook, telegram, admin, clock
):
    user = telegram.user(7601, "Iris")
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    chat = telegram.support_chat_id
    copies = [
        telegram.bot_sends(chat, text=f"message {number}", thread_id=topic.thread_id)
        for number in range(2998)
    ]
    RelayedMessage.objects.bulk_create(
        RelayedMessage(
            bot_id=telegram.bot.id,
            user_id=user.id,
            thread_id=topic.thread_id,
            direction="in",
            group_msg_id=message_id,
            private_msg_id=number + 10,
            created_at=clock.now,
        )
        for number, message_id in enumerate(copies)
    )
    targets = sorted(
        [topic.pinned_msg_id, *RelayedMessage.objects.values_list("group_msg_id", flat=True)]
    )
    assert len(targets) == 3000
    telegram.limit_rate(500)  # Telegram's flood control, stricter than the bot's pace of 400/s
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/purgemsg"))

    # The webhook did its share, handed the rest to Celery and said so.
    [progress] = [text for text in topic_texts(telegram, topic.thread_id) if "/3000" in text]
    done = int(re.fullmatch(r"已删除 (\d+)/3000 条消息，.*", progress)[1])
    assert 0 < done < 3000
    assert progress == texts.purge_continues(done=done, total=3000)
    report = "\n".join([texts.purge_done(3000), texts.purge_card_pinned()])
    _wait_until(lambda: topic_texts(telegram, topic.thread_id)[-1:] == [report])

    deletions = telegram.calls("deleteMessage")
    assert [call.status for call in deletions] == [200] * 3000  # not a single 429
    # ... because the bot kept its own pace (web process and worker alike), not because the
    # fake's limit happens to be above whatever speed this machine reaches.
    assert busiest_second([call.at for call in deletions]) <= int(BOT_DELETES_PER_SECOND) + 1
    assert sorted(call.params["message_id"] for call in deletions) == targets
    assert RelayedMessage.objects.count() == 0
    new_card = Topic.objects.get().pinned_msg_id
    assert topic_texts(telegram, topic.thread_id) == [progress, CARD, report]
    assert telegram.pinned() == [new_card]


def test_a_wipe_handed_over_half_way_finishes_in_the_worker(
    celery_worker, webhook, telegram, admin, clock, monkeypatch
):
    people = [telegram.user(7700 + number, f"P{number}") for number in range(10)]
    for person in people:
        open_conversation(webhook, telegram, person, bot_id=telegram.bot.id, now=clock.now)
    threads = list(Topic.objects.order_by("thread_id").values_list("thread_id", flat=True))
    # This web process may only do a few deletions before handing over.
    monkeypatch.setattr(bulk, "INLINE_BUDGET_SECONDS", 0.02)
    webhook.deliver_ok(telegram.group_message(admin, thread_id=threads[0], text="/wipealldata"))
    prompt = telegram.topic_messages(threads[0])[-1]
    confirm = prompt.reply_markup["inline_keyboard"][0][0]["callback_data"]
    click = telegram.click(
        admin, message_id=prompt.message_id, data=confirm, chat_id=telegram.support_chat_id
    )

    webhook.deliver_ok(click)

    assert telegram.callback_answer(click["callback_query"]["id"]) == texts.toast_wiping()
    [progress] = general_texts(telegram)
    done = int(re.fullmatch(r"清空进行中：已删除 (\d+)/10 个话题，.*", progress)[1])
    assert done < 10
    _wait_until(lambda: general_texts(telegram)[-1:] == [texts.wipe_done()])

    deletions = telegram.calls("deleteForumTopic")
    assert [call.params["message_thread_id"] for call in deletions] == threads
    assert [call.status for call in deletions] == [200] * 10
    assert (BotUser.objects.count(), Topic.objects.count(), RelayedMessage.objects.count()) == (
        0,
        0,
        0,
    )
