"""Writes to ``bots``."""

from __future__ import annotations

from datetime import datetime

from bots.models import Bot


def bot_upsert(*, bot_id: int, username: str, display_name: str, now: datetime) -> None:
    """Insert the bot, or refresh its username and display name (``created_at`` is kept).

    One ``INSERT … ON CONFLICT (bot_id) DO UPDATE`` statement.
    """
    Bot.objects.bulk_create(
        [Bot(bot_id=bot_id, username=username, display_name=display_name, created_at=now)],
        update_conflicts=True,
        unique_fields=["bot_id"],
        update_fields=["username", "display_name"],
    )
