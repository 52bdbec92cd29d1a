"""Albums relayed as albums (issue #24), against the fake Bot API, both ways: the webhook
stores each item and answers at once; the flush (the Celery task's body, run here) sends them
with one sendMediaGroup after the collection window and writes each item to the ledger."""

from __future__ import annotations

import pytest

from bots.models import AlbumItem, RelayedMessage, Topic
from bots.pipeline import albums
from bots.pipeline.albums import ALBUM_FLUSH_TASK, collect_album_item, flush_album, sweep_albums
from bots.pipeline.content import Content
from bots.pipeline.context import BotContext
from tests.bots.helpers import open_conversation


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
