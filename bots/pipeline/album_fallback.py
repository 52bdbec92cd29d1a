"""A user's album whose topic was closed or deleted while it was collected (issue #24): its
items relayed one at a time through the single relay, so that the topic is reopened or
replaced (and its card posted) as for any message, and nothing is lost.

The flush (``bots.pipeline.albums``) calls this inside its transaction, the items locked. Each
item relayed gets its ledger row (written by the relay) and loses its ``album_items`` row at
once, in that transaction: a flush stopped part way (a retryable Telegram error, a deletion of
the user running) leaves only the items not yet relayed for the next one, so each item lands in
the ledger once.
"""

from __future__ import annotations

import logging

from bots.clients.telegram import TelegramRetryableError
from bots.models import AlbumItem, BotUser
from bots.pipeline.card import post_card
from bots.pipeline.content import Content
from bots.pipeline.context import BotContext
from bots.pipeline.relay import relay_inbound
from bots.pipeline.topics import TopicBindingLost, resolve_topic
from bots.selectors import user_get, verification_settings_get
from bots.services.deletion_fence import DeletionInProgress

logger = logging.getLogger(__name__)


def relay_one_by_one(ctx: BotContext, items: list[AlbumItem]) -> bool:
    """Relay a user's album ``items`` (oldest first) one at a time. True when each is handled
    (relayed, or dropped as a single message would be); False when the rest must wait for a
    later flush (their rows are kept)."""
    user = user_get(bot_id=ctx.bot_id, user_id=items[0].user_id)
    if user is None:  # deleted since the items came in: nobody to relay for
        logger.warning("album of deleted user %s dropped", items[0].user_id)
        AlbumItem.objects.filter(id__in=[item.id for item in items]).delete()
        return True
    verification_enabled = verification_settings_get().enabled
    for item in items:
        try:
            _relay(ctx, user, item, verification_enabled=verification_enabled)
        except (TelegramRetryableError, DeletionInProgress, TopicBindingLost) as error:
            logger.warning("album item %s: %s; the rest later", item.source_msg_id, error)
            return False
        AlbumItem.objects.filter(id=item.id).delete()
    return True


def _relay(ctx: BotContext, user: BotUser, item: AlbumItem, *, verification_enabled: bool) -> None:
    """One item as ``handle_inbound`` relays a message: the topic found, reopened or created,
    its card posted when it has none, then the relay (which replaces a topic found gone)."""
    topic = resolve_topic(ctx, user)
    if topic is None:
        return  # Telegram refused the topic for good: dropped, as a single message is
    if topic.pinned_msg_id is None:
        post_card(ctx, user=user, topic=topic, verification_enabled=verification_enabled)
    relay_inbound(
        ctx,
        user=user,
        topic=topic,
        content=Content(kind=item.kind, file_id=item.file_id, caption=item.caption),
        private_msg_id=item.source_msg_id,
        verification_enabled=verification_enabled,
    )
