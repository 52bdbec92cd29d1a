"""What the bot's Telegram-side steps need: the bot, the configuration, the client and ``now``.

``BotContext`` is enough for an action on a user (the Django admin's actions build one);
``UpdateContext`` adds the Telegram update being processed by the webhook.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bots.clients.telegram import TelegramClient
from bots.conf import BotConfig


@dataclass(frozen=True)
class BotContext:
    bot_id: int
    config: BotConfig
    client: TelegramClient
    now: datetime  # the one clock reading of this action; every claim compares against it

    @property
    def support_chat_id(self) -> int:
        # Classification ignores every update when SUPPORT_CHAT_ID is invalid, and the admin
        # builds a context only with a valid one, so callers only ever see a valid id.
        assert self.config.support_chat_id is not None
        return self.config.support_chat_id


@dataclass(frozen=True)
class UpdateContext(BotContext):
    update_id: int
    attempts: int  # 0 on the first delivery; a redelivery takes over a failed attempt
    # The origin Telegram delivered the update to (scheme and host through trusted proxies):
    # the Turnstile button's origin when PUBLIC_BASE_URL is not set. None: not known.
    request_origin: str | None = None

    @property
    def is_redelivery(self) -> bool:
        """An earlier attempt of this update ran and failed: some of its writes may be done."""
        return self.attempts > 0
