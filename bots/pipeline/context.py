"""What the bot's Telegram-side steps need: the bot, the configuration, the client and ``now``.

``BotContext`` is enough for an action on a user (the Django admin's actions build one);
``UpdateContext`` adds the Telegram update being processed by the webhook.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from bots.clients.telegram import TelegramClient
from bots.conf import BotConfig, load_config

logger = logging.getLogger(__name__)


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


# Steps of an update's pipeline that an attempt may settle and a later attempt of the same
# update need not repeat (kept on the update's inbox row when an attempt gives it back).
CARD_SETTLED = "card"  # the user's pinned card shows the names this update carries
MESSAGE_COUNTED = "counted"  # the message passed the user's rate gate (counted once)


@dataclass
class AttemptProgress:
    """What this attempt of an update has settled so far (written as the pipeline goes)."""

    settled: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class UpdateContext(BotContext):
    update_id: int
    attempts: int  # earlier attempts at this update (0 at the first; the inbox counts them)
    # The origin Telegram delivered the update to (scheme and host through trusted proxies):
    # the Turnstile button's origin when PUBLIC_BASE_URL is not set. None: not known.
    request_origin: str | None = None
    # The steps an earlier attempt of this update settled before it was given back for want
    # of a send permit (CARD_SETTLED, MESSAGE_COUNTED): this attempt does not repeat them.
    settled_before: frozenset[str] = frozenset()
    progress: AttemptProgress = field(default_factory=AttemptProgress)

    def settled(self, step: str) -> bool:
        """Whether ``step`` is settled for this update: by this attempt or a given-back one."""
        return step in self.settled_before or step in self.progress.settled

    def settle(self, step: str) -> None:
        self.progress.settled.add(step)

    @property
    def is_redelivery(self) -> bool:
        """An earlier attempt of this update ran (it failed, waited, or its holder died): some of
        its writes may be done. (The name is the original's: Telegram's redelivery was the retry
        before the inbox, issue 36.)"""
        return self.attempts > 0


def worker_context(
    bot_id: int, *, in_place_retry: bool = True, paced: bool = True
) -> BotContext | None:
    """The Telegram context of a Celery job, or None when the bot is not configured in the
    worker (no token or no valid SUPPORT_CHAT_ID). ``in_place_retry`` and ``paced``: see
    ``BotConfig.telegram_client``."""
    config = load_config()
    if not config.bot_token or config.support_chat_id is None:
        logger.error("bot %s: the worker has no bot configuration", bot_id)
        return None
    return BotContext(
        bot_id=bot_id,
        config=config,
        client=config.telegram_client(in_place_retry=in_place_retry, paced=paced),
        now=timezone.now(),
    )
