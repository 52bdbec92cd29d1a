"""Albums relayed as albums (issue #24).

Telegram delivers an album (``media_group_id``) as one update per item, a moment apart. The
webhook does not hold an update waiting for the others: each item is stored in
``album_items`` (once: a redelivered item is ignored) and a flush is queued in Celery for
ALBUM_WINDOW_SECONDS later. The flush takes the album's items under row locks (two flushes
never both send it), waits once more if the newest item is younger than the window, then sends
them with one ``sendMediaGroup`` (a lone item as an ordinary message), records each in the
ledger and deletes the items, in one transaction after the send. A retryable failure queues
the flush again. A user's album whose topic was closed or deleted within the window
(``TOPIC_CLOSED``, "message thread not found") is relayed item by item through the single
relay instead (``bots.pipeline.album_fallback``: the topic reopened or replaced as for any
message); any other permanent failure drops the album (logged). The beat sweep
(``albums_sweep_task``) flushes albums whose queued flush was lost.

While an album's items wait, the later updates of its conversation wait in the inbox behind it
(issue 36: an album then a text arrives as the album then the text, both ways); the flush
nudges the inbox's worker once the items are gone. A user marked high-risk gets the topic's
reminder after the album as after a single message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.db import IntegrityError, transaction
from django.utils import timezone

from bots.clients.telegram import (
    TelegramPermanentError,
    TelegramRetryableError,
    is_topic_closed,
    is_topic_gone,
)
from bots.models import AlbumItem, Direction, RelayedMessage
from bots.pipeline.album_fallback import relay_one_by_one
from bots.pipeline.content import Content, send_content
from bots.pipeline.context import BotContext, worker_context
from bots.pipeline.failures import best_effort
from bots.pipeline.inbox_queue import queue_drain
from bots.pipeline.relay import remind_risk
from bots.selectors import user_get
from bots.task_names import ALBUM_FLUSH_TASK

logger = logging.getLogger(__name__)

# How long an album's items are collected after its newest arrived.
ALBUM_WINDOW_SECONDS = 1.5
# Items Telegram takes in one sendMediaGroup; and the kinds an album may hold.
ALBUM_MAX_ITEMS = 10
ALBUM_KINDS = frozenset({"photo", "video", "document", "audio"})
RETRY_SECONDS = 10.0
# The sweep flushes albums whose items waited this long (their queued flush was lost).
STALE_SECONDS = 30.0


def album_id(message: Mapping[str, Any], content: Content) -> str | None:
    """The message's ``media_group_id`` when it is an album item the bot relays as one."""
    group = message.get("media_group_id")
    if isinstance(group, str) and 0 < len(group) <= 64 and content.kind in ALBUM_KINDS:
        return group
    return None


def collect_album_item(
    ctx: BotContext,
    *,
    direction: Direction,
    media_group_id: str,
    user_id: int,
    thread_id: int,
    source_msg_id: int,
    content: Content,
) -> None:
    """Store one album item and queue the album's flush (a redelivered item is ignored)."""
    assert content.file_id is not None  # album items are media (album_id), media has a file
    try:
        with transaction.atomic():
            AlbumItem.objects.create(
                bot_id=ctx.bot_id,
                direction=direction,
                media_group_id=media_group_id,
                user_id=user_id,
                thread_id=thread_id,
                source_msg_id=source_msg_id,
                kind=content.kind,
                file_id=content.file_id,
                caption=content.caption,
                created_at=ctx.now,
            )
    except IntegrityError:
        return  # stored by an earlier delivery of this update
    queue_flush(bot_id=ctx.bot_id, media_group_id=media_group_id, countdown=ALBUM_WINDOW_SECONDS)


def queue_flush(*, bot_id: int, media_group_id: str, countdown: float) -> None:
    kwargs = {"bot_id": bot_id, "media_group_id": media_group_id}
    transaction.on_commit(
        lambda: current_app.send_task(ALBUM_FLUSH_TASK, kwargs=kwargs, countdown=countdown)
    )


# The outcomes after which the album's items are gone: the conversation's updates waiting
# behind the album (issue 36) may go now.
ALBUM_DONE = frozenset({"sent", "dropped", "relayed one by one"})


def flush_album(*, bot_id: int, media_group_id: str, now: datetime | None = None) -> str:
    """Send the album's waiting items (see the module docstring); what happened. Once they
    are gone, a worker is nudged for the updates of the conversation queued behind them."""
    outcome = _flush_album(bot_id=bot_id, media_group_id=media_group_id, now=now)
    if outcome in ALBUM_DONE:
        queue_drain(bot_id=bot_id)  # committed: the items' rows are gone
    return outcome


def _flush_album(*, bot_id: int, media_group_id: str, now: datetime | None) -> str:
    ctx = worker_context(bot_id)
    if ctx is None:
        return "not configured"
    now = now or timezone.now()
    with transaction.atomic():
        items = list(
            AlbumItem.objects.select_for_update(skip_locked=True)
            .filter(bot_id=bot_id, media_group_id=media_group_id)
            .order_by("source_msg_id")
        )
        if not items:
            return "nothing waiting"
        newest = max(item.created_at for item in items)
        if newest > now - timedelta(seconds=ALBUM_WINDOW_SECONDS):
            wait = (newest + timedelta(seconds=ALBUM_WINDOW_SECONDS) - now).total_seconds()
            queue_flush(bot_id=bot_id, media_group_id=media_group_id, countdown=wait)
            return "waiting"
        batch = items[:ALBUM_MAX_ITEMS]
        try:
            sent = _send(ctx, batch)
        except TelegramRetryableError as error:
            logger.warning("album %s: %s; trying again", media_group_id, error)
            queue_flush(bot_id=bot_id, media_group_id=media_group_id, countdown=RETRY_SECONDS)
            return "retrying"
        except TelegramPermanentError as error:
            if not _topic_lost(batch[0], error):
                logger.warning("album %s dropped: %s", media_group_id, error)
                AlbumItem.objects.filter(id__in=[item.id for item in items]).delete()
                return "dropped"
            logger.info("album %s: %s; relaying its items one by one", media_group_id, error)
            if not relay_one_by_one(ctx, batch):
                queue_flush(bot_id=bot_id, media_group_id=media_group_id, countdown=RETRY_SECONDS)
                return "retrying"
            outcome = "relayed one by one"
        else:
            _record(batch, sent, now=now)
            AlbumItem.objects.filter(id__in=[item.id for item in batch]).delete()
            _remind_risk(ctx, batch[0])
            outcome = "sent"
        if len(items) > ALBUM_MAX_ITEMS:
            queue_flush(bot_id=bot_id, media_group_id=media_group_id, countdown=0)
    return outcome


def _remind_risk(ctx: BotContext, first: AlbumItem) -> None:
    """A user marked high-risk: the topic's reminder after the album, as after a single
    message (spec §2.10: best effort, at most once in 24 h)."""
    if first.direction != Direction.IN:
        return
    user = user_get(bot_id=first.bot_id, user_id=first.user_id)
    if user is not None and user.is_risk:
        best_effort("risk reminder", lambda: remind_risk(ctx, user=user, thread_id=first.thread_id))


def _topic_lost(item: AlbumItem, error: TelegramPermanentError) -> bool:
    """A user's album met a topic closed or deleted since its items came in."""
    return item.direction == Direction.IN and (is_topic_closed(error) or is_topic_gone(error))


def _send(ctx: BotContext, items: list[AlbumItem]) -> list[dict[str, Any]]:
    first = items[0]
    inbound = first.direction == Direction.IN
    chat_id = ctx.support_chat_id if inbound else first.user_id
    thread_id = first.thread_id if inbound else None
    if len(items) == 1:
        content = Content(kind=first.kind, file_id=first.file_id, caption=first.caption)
        return [send_content(ctx.client, content, chat_id=chat_id, message_thread_id=thread_id)]
    media = [
        {"type": item.kind, "media": item.file_id}
        | ({"caption": item.caption} if item.caption else {})
        for item in items
    ]
    return ctx.client.send_media_group(chat_id=chat_id, media=media, message_thread_id=thread_id)


def _record(items: list[AlbumItem], sent: list[dict[str, Any]], *, now: datetime) -> None:
    """One ledger row per item, paired with its message in the sent album."""
    rows = []
    for item, message in zip(items, sent, strict=False):
        inbound = item.direction == Direction.IN
        rows.append(
            RelayedMessage(
                bot_id=item.bot_id,
                user_id=item.user_id,
                thread_id=item.thread_id,
                direction=item.direction,
                group_msg_id=message["message_id"] if inbound else item.source_msg_id,
                private_msg_id=item.source_msg_id if inbound else message["message_id"],
                content_type=item.kind,
                created_at=now,
            )
        )
    RelayedMessage.objects.bulk_create(rows)


def sweep_albums(*, now: datetime | None = None) -> int:
    """Queue a flush for every album whose items waited past STALE_SECONDS; how many."""
    now = now or timezone.now()
    stale = (
        AlbumItem.objects.filter(created_at__lte=now - timedelta(seconds=STALE_SECONDS))
        .values_list("bot_id", "media_group_id")
        .distinct()
    )
    count = 0
    for bot_id, media_group_id in stale:
        current_app.send_task(
            ALBUM_FLUSH_TASK, kwargs={"bot_id": bot_id, "media_group_id": media_group_id}
        )
        count += 1
    return count
