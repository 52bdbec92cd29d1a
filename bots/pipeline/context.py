"""What every pipeline step of one update needs: the bot, the configuration, the client, now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bots.clients.telegram import TelegramClient
from bots.conf import BotConfig


@dataclass(frozen=True)
class UpdateContext:
    bot_id: int
    update_id: int
    config: BotConfig
    client: TelegramClient
    now: datetime  # the one clock reading of this delivery; every claim compares against it

    @property
    def support_chat_id(self) -> int:
        # Classification ignores every update when SUPPORT_CHAT_ID is invalid, so the pipelines
        # only ever run with a valid one.
        assert self.config.support_chat_id is not None
        return self.config.support_chat_id
