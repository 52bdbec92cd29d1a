"""``processed_updates``: the idempotency claim of each Telegram update (spec §6).

The claim is written with the update's inbox row, in one transaction (``bots.services.inbox``):
``processing`` while the inbox holds the update, ``processed`` or ``failed`` (poison) when its
row is deleted — never reclaimed, so a finished update cannot run again. Here: the constants
the claim follows, and the daily trim.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef

from bots.models import Bot, InboxUpdate, ProcessedUpdate

# A `processing` claim older than this, without an inbox row (one written before the inbox
# existed), is a crashed attempt that the next delivery takes over.
STALE_CLAIM_AFTER = timedelta(seconds=60)
# Telegram stops redelivering an update long before this; older rows only take space.
RETENTION = timedelta(days=7)


def processed_update_trim(*, now: datetime) -> int:
    """Delete the claims older than seven days, bot by bot (but for a claim whose update still
    waits in the inbox); return how many were deleted."""
    cutoff = now - RETENTION
    waiting = InboxUpdate.objects.filter(bot_id=OuterRef("bot_id"), update_id=OuterRef("update_id"))
    deleted = 0
    for bot_id in Bot.objects.values_list("bot_id", flat=True):
        count, _ = (
            ProcessedUpdate.objects.filter(bot_id=bot_id, created_at__lt=cutoff)
            .exclude(Exists(waiting))
            .delete()
        )
        deleted += count
    return deleted
