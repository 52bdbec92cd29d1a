"""Albums relayed as albums (issue #24), against the fake Bot API, both ways: the webhook
stores each item and answers at once; the flush (the Celery task's body, run here) sends them
with one sendMediaGroup after the collection window and writes each item to the ledger."""

from __future__ import annotations

import pytest

from bots import texts
from bots.models import AlbumItem, BotUser, RelayedMessage, Topic
from bots.pipeline import albums
from bots.pipeline.albums import ALBUM_FLUSH_TASK, collect_album_item, flush_album, sweep_albums
from bots.pipeline.content import Content
from bots.pipeline.context import BotContext
from tests.bots.helpers import click_in_group, keyboard_data, open_conversation, topic_texts


class QueuedTasks:
    """Stands in for Celery's broker: the flushes the code queued."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict, float | None]] = []

    def send_task(self, name: str, *, kwargs: dict, countdown: float | None = None) -> None:
        self.sent.append((name, kwargs, countdown))


@pytest.fixture
def queued(monkeypatch) -> QueuedTasks:
    tasks = QueuedTasks()
    monkeypatch.setattr(albums, "current_app", tasks)
    return tasks


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def _deliver(webhook, updates, capture) -> None:
    with capture(execute=True):
        for update in updates:
            webhook.deliver_ok(update)


def test_a_users_album_is_relayed_as_one_album_with_each_item_in_the_ledger(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    updates = [
        telegram.private_message(user, photo=f"p{n}", caption=f"c{n}", media_group_id="g1")
        for n in range(3)
    ]
    telegram.forget_calls()

    _deliver(webhook, updates, django_capture_on_commit_callbacks)

    # The webhook answered without waiting: nothing sent yet, a flush queued per item.
    assert telegram.calls() == []
    assert (
        queued.sent
        == [(ALBUM_FLUSH_TASK, {"bot_id": telegram.bot.id, "media_group_id": "g1"}, 1.5)] * 3
    )
    clock.advance(seconds=2)

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g1") == "sent"
    assert flush_album(bot_id=telegram.bot.id, media_group_id="g1") == "nothing waiting"

    [call] = telegram.calls()
    assert call.method == "sendMediaGroup" and call.ok
    assert call.params["message_thread_id"] == topic.thread_id
    album = telegram.topic_messages(topic.thread_id)[-3:]
    assert [(m.kind, m.file_id, m.caption) for m in album] == [
        ("photo", f"p{n}", f"c{n}") for n in range(3)
    ]
    assert len({m.media_group_id for m in album}) == 1
    ledger = list(
        RelayedMessage.objects.filter(user_id=user.id, content_type="photo")
        .order_by("id")
        .values_list("direction", "private_msg_id", "group_msg_id")
    )
    assert ledger == [
        ("in", update["message"]["message_id"], copy.message_id)
        for update, copy in zip(updates, album, strict=True)
    ]
    assert AlbumItem.objects.count() == 0


def test_a_flush_before_the_window_ends_waits_for_the_rest(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    first = telegram.private_message(user, photo="a", media_group_id="g2")
    _deliver(webhook, [first], django_capture_on_commit_callbacks)
    clock.advance(seconds=1)
    second = telegram.private_message(user, photo="b", media_group_id="g2")
    _deliver(webhook, [second], django_capture_on_commit_callbacks)
    clock.advance(seconds=1)  # the first item's flush runs: the second is only 1 s old
    telegram.forget_calls()

    with django_capture_on_commit_callbacks(execute=True):
        assert flush_album(bot_id=telegram.bot.id, media_group_id="g2") == "waiting"

    assert telegram.calls() == []
    assert queued.sent[-1][2] == pytest.approx(0.5)
    clock.advance(seconds=1)
    assert flush_album(bot_id=telegram.bot.id, media_group_id="g2") == "sent"
    assert [len(call.params["media"]) for call in telegram.calls("sendMediaGroup")] == [2]


def test_an_admins_album_reaches_the_user_as_an_album(
    webhook, telegram, user, admin, topic, clock, queued, django_capture_on_commit_callbacks
):
    updates = [
        telegram.group_message(
            admin, thread_id=topic.thread_id, document=f"d{n}", media_group_id="g3"
        )
        for n in range(2)
    ]
    _deliver(webhook, updates, django_capture_on_commit_callbacks)
    clock.advance(seconds=2)

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g3") == "sent"

    # One album, not one message per item: a single sendMediaGroup into the user's chat.
    to_user = [call for call in telegram.calls() if call.params.get("chat_id") == user.id]
    assert [call.method for call in to_user] == ["sendMediaGroup"]
    assert [item["media"] for item in to_user[0].params["media"]] == ["d0", "d1"]
    received = telegram.bot_messages(user.id)
    assert [(m.kind, m.file_id) for m in received] == [("document", "d0"), ("document", "d1")]
    assert list(
        RelayedMessage.objects.filter(direction="out").values_list("group_msg_id", flat=True)
    ) == [update["message"]["message_id"] for update in updates]


def test_an_album_of_one_is_sent_as_an_ordinary_message(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    _deliver(
        webhook,
        [telegram.private_message(user, video="v", caption="only one", media_group_id="g4")],
        django_capture_on_commit_callbacks,
    )
    clock.advance(seconds=2)
    telegram.forget_calls()

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g4") == "sent"

    assert [call.method for call in telegram.calls()] == ["sendVideo"]
    assert RelayedMessage.objects.filter(content_type="video").count() == 1


def test_a_retryable_failure_keeps_the_album_for_the_next_flush_which_sends_it_once(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    updates = [telegram.private_message(user, photo=f"r{n}", media_group_id="g5") for n in (1, 2)]
    _deliver(webhook, updates, django_capture_on_commit_callbacks)
    clock.advance(seconds=2)
    telegram.fail("sendMediaGroup", status=502)

    with django_capture_on_commit_callbacks(execute=True):
        assert flush_album(bot_id=telegram.bot.id, media_group_id="g5") == "retrying"
    assert queued.sent[-1][2] == albums.RETRY_SECONDS
    assert (
        AlbumItem.objects.count() == 2
        and not RelayedMessage.objects.filter(content_type="photo").exists()
    )

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g5") == "sent"
    assert [call.status for call in telegram.calls("sendMediaGroup")] == [502, 200]
    assert RelayedMessage.objects.filter(content_type="photo").count() == 2


def test_a_redelivered_item_is_stored_once(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    update = telegram.private_message(user, photo="x", media_group_id="g6")
    _deliver(webhook, [update], django_capture_on_commit_callbacks)
    # A delivery that takes over (the first answer was lost after the item was stored) stores
    # the item again: ignored.
    ctx = BotContext(bot_id=telegram.bot.id, config=None, client=None, now=clock.now)  # type: ignore[arg-type]
    collect_album_item(
        ctx,
        direction="in",
        media_group_id="g6",
        user_id=user.id,
        thread_id=topic.thread_id,
        source_msg_id=update["message"]["message_id"],
        content=Content(kind="photo", file_id="x"),
    )

    assert AlbumItem.objects.count() == 1


def test_the_sweep_queues_albums_whose_flush_was_lost(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    _deliver(
        webhook,
        [telegram.private_message(user, photo="s", media_group_id="g7")],
        django_capture_on_commit_callbacks,
    )
    queued.sent.clear()

    assert sweep_albums() == 0
    clock.advance(seconds=31)
    assert sweep_albums() == 1
    assert queued.sent == [
        (ALBUM_FLUSH_TASK, {"bot_id": telegram.bot.id, "media_group_id": "g7"}, None)
    ]


def _album(webhook, telegram, user, capture, group: str, count: int = 3) -> list[dict]:
    updates = [
        telegram.private_message(user, photo=f"{group}-{n}", caption=f"c{n}", media_group_id=group)
        for n in range(count)
    ]
    _deliver(webhook, updates, capture)
    return updates


def _photos(telegram, thread_id: int) -> list[tuple[str, str | None]]:
    return [(m.file_id, m.caption) for m in telegram.topic_messages(thread_id) if m.kind == "photo"]


def _ledger(user_id: int) -> list[tuple[int, int]]:
    return list(
        RelayedMessage.objects.filter(user_id=user_id, content_type="photo")
        .order_by("id")
        .values_list("private_msg_id", "thread_id")
    )


def test_an_album_whose_topic_was_deleted_in_the_window_goes_item_by_item_into_a_new_topic(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    updates = _album(webhook, telegram, user, django_capture_on_commit_callbacks, "g8")
    telegram.delete_topic_by_hand(topic.thread_id)  # by an admin, within the window
    clock.advance(seconds=2)
    telegram.forget_calls()

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g8") == "relayed one by one"

    # The album was refused (the thread is gone); a new topic with its card took the items,
    # each relayed on its own as a single message is after a topic replacement.
    calls = telegram.calls()
    assert [(calls[0].method, calls[0].ok)] == [("sendMediaGroup", False)]
    assert "createForumTopic" in [call.method for call in calls]
    replacement = Topic.objects.get(user_id=user.id)
    assert replacement.thread_id != topic.thread_id and replacement.pinned_msg_id is not None
    assert _photos(telegram, replacement.thread_id) == [(f"g8-{n}", f"c{n}") for n in range(3)]
    assert [call.method for call in telegram.calls() if call.ok].count("sendPhoto") == 3
    # Nothing lost, each item in the ledger once, with the topic it is in now.
    assert _ledger(user.id) == [
        (update["message"]["message_id"], replacement.thread_id) for update in updates
    ]
    assert AlbumItem.objects.count() == 0
    assert flush_album(bot_id=telegram.bot.id, media_group_id="g8") == "nothing waiting"


def test_an_album_whose_topic_was_closed_in_the_window_reopens_it_item_by_item(
    webhook, telegram, user, admin, topic, clock, queued, django_capture_on_commit_callbacks
):
    updates = _album(webhook, telegram, user, django_capture_on_commit_callbacks, "g9")
    # An admin closes the topic within the window (the bot learns it from the service update).
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    clock.advance(seconds=2)
    telegram.forget_calls()

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g9") == "relayed one by one"

    assert telegram.calls()[0].method == "sendMediaGroup" and not telegram.calls()[0].ok
    assert [call.method for call in telegram.calls("reopenForumTopic") if call.ok] == [
        "reopenForumTopic"
    ]
    assert not telegram.topic(topic.thread_id).closed
    assert Topic.objects.get(user_id=user.id).status == "open"
    assert _photos(telegram, topic.thread_id) == [(f"g9-{n}", f"c{n}") for n in range(3)]
    assert _ledger(user.id) == [
        (update["message"]["message_id"], topic.thread_id) for update in updates
    ]
    assert AlbumItem.objects.count() == 0


def test_a_fallback_stopped_part_way_relays_only_the_items_left_next_time(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    updates = _album(webhook, telegram, user, django_capture_on_commit_callbacks, "g10")
    telegram.delete_topic_by_hand(topic.thread_id)
    clock.advance(seconds=2)
    telegram.forget_calls()
    # The second item's send meets an outage (the 7th call: the album, the first item to the
    # old thread, the new topic, its card and pin, the first item again, the second).
    telegram.fail_call(7, status=502)

    with django_capture_on_commit_callbacks(execute=True):
        assert flush_album(bot_id=telegram.bot.id, media_group_id="g10") == "retrying"

    replacement = Topic.objects.get(user_id=user.id)
    assert _ledger(user.id) == [(updates[0]["message"]["message_id"], replacement.thread_id)]
    assert AlbumItem.objects.count() == 2
    assert queued.sent[-1][2] == albums.RETRY_SECONDS
    assert flush_album(bot_id=telegram.bot.id, media_group_id="g10") == "relayed one by one"

    # The retry found the replacement topic (no second one, no second card) and relayed the
    # two items left: each of the three is in the topic and the ledger once.
    assert len(telegram.calls("createForumTopic")) == 1
    assert Topic.objects.get(user_id=user.id).thread_id == replacement.thread_id
    assert _photos(telegram, replacement.thread_id) == [(f"g10-{n}", f"c{n}") for n in range(3)]
    assert _ledger(user.id) == [
        (update["message"]["message_id"], replacement.thread_id) for update in updates
    ]
    assert AlbumItem.objects.count() == 0


def test_an_album_refused_for_another_reason_is_still_dropped(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    _album(webhook, telegram, user, django_capture_on_commit_callbacks, "g11", count=2)
    clock.advance(seconds=2)
    telegram.fail("sendMediaGroup", status=400, description="Bad Request: wrong file identifier")

    assert flush_album(bot_id=telegram.bot.id, media_group_id="g11") == "dropped"
    assert telegram.calls("sendPhoto") == [] and AlbumItem.objects.count() == 0


# ------------------------------------------------------------------ issue 36


def test_a_high_risk_users_album_gets_the_reminder_like_a_single_message(
    webhook, telegram, user, topic, clock, queued, django_capture_on_commit_callbacks
):
    BotUser.objects.filter(user_id=user.id).update(is_risk=True)
    updates = [telegram.private_message(user, photo=f"k{n}", media_group_id="gr") for n in (1, 2)]
    _deliver(webhook, updates, django_capture_on_commit_callbacks)
    clock.advance(seconds=2)

    assert flush_album(bot_id=telegram.bot.id, media_group_id="gr") == "sent"

    reminder = texts.risk_reminder("Bob Stone (@bob)")
    after_album = [message.text for message in telegram.topic_messages(topic.thread_id)[-3:]]
    assert after_album == [None, None, reminder]  # the two photos, then the reminder
    # At most once in 24 h, as for single messages: the next album reminds nobody.
    second = [telegram.private_message(user, photo=f"m{n}", media_group_id="gs") for n in (1, 2)]
    _deliver(webhook, second, django_capture_on_commit_callbacks)
    clock.advance(seconds=2)
    flush_album(bot_id=telegram.bot.id, media_group_id="gs")
    assert topic_texts(telegram, topic.thread_id).count(reminder) == 1


def _collect_two_items(webhook, telegram, user, capture) -> None:
    updates = [telegram.private_message(user, photo=f"w{n}", media_group_id="gw") for n in (1, 2)]
    _deliver(webhook, updates, capture)
    assert AlbumItem.objects.count() == 2


def test_a_deleted_users_waiting_album_items_go_with_the_user(
    webhook, telegram, user, admin, topic, queued, django_capture_on_commit_callbacks
):
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/deluser"))
    [prompt] = [m for m in telegram.topic_messages(topic.thread_id) if m.reply_markup]
    _collect_two_items(webhook, telegram, user, django_capture_on_commit_callbacks)

    click_in_group(webhook, telegram, admin, prompt.message_id, keyboard_data(prompt)[0])

    assert not Topic.objects.exists()
    assert AlbumItem.objects.count() == 0  # nothing left to relay into a topic that is gone


def test_a_wipe_removes_the_waiting_album_items(
    webhook, telegram, user, admin, topic, queued, django_capture_on_commit_callbacks
):
    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=topic.thread_id, text="/wipealldata")
    )
    [prompt] = [m for m in telegram.topic_messages(topic.thread_id) if m.reply_markup]
    _collect_two_items(webhook, telegram, user, django_capture_on_commit_callbacks)

    click_in_group(webhook, telegram, admin, prompt.message_id, keyboard_data(prompt)[0])

    assert not Topic.objects.exists()
    assert AlbumItem.objects.count() == 0
