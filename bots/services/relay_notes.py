"""Markers in Redis that keep two of the bot's notes to once (issue 36):

* a reply an admin wrote that the user's private chat refused for good (the user blocked the
  bot, deleted their account) leaves a note in the user's topic — once, until a reply reaches
  the user again (``relay_refused``);
* a user whose names changed while none of their messages was relayed (banned, unverified,
  over the rate limit) gets their pinned card edited with the next message that is relayed
  (``card_stale``).

Both are hints with a TTL: after a Redis flush a refusal is noted once more, and a stale card
waits for the next change of names (the behaviour before the marker).
"""

from __future__ import annotations

import logging

from django_redis import get_redis_connection
from redis.exceptions import RedisError

from bots import redis_keys

logger = logging.getLogger(__name__)

# How long a refusal is remembered (a user who blocked the bot rarely comes back soon).
REFUSED_TTL_SECONDS = 30 * 24 * 3600
# How long a stale card waits for the user's next relayed message.
CARD_STALE_TTL_SECONDS = 30 * 24 * 3600


def _redis():
    return get_redis_connection("default")


def relay_refusal_first(*, bot_id: int, user_id: int) -> bool:
    """Record that the user's chat refused a reply; True when it is the first refusal since
    a reply last reached them (the note is due). Redis unreachable: True (a note too many is
    better than none)."""
    try:
        return bool(
            _redis().set(
                redis_keys.relay_refused(bot_id, user_id), "1", nx=True, ex=REFUSED_TTL_SECONDS
            )
        )
    except RedisError:
        logger.warning("relay refusal of user %s: Redis unreachable", user_id)
        return True


def relay_refusal_clear(*, bot_id: int, user_id: int) -> None:
    """A reply reached the user: a later refusal is noted again."""
    try:
        _redis().delete(redis_keys.relay_refused(bot_id, user_id))
    except RedisError:
        logger.warning("relay refusal of user %s: Redis unreachable", user_id)


def card_mark_stale(*, bot_id: int, user_id: int) -> None:
    try:
        _redis().set(redis_keys.card_stale(bot_id, user_id), "1", ex=CARD_STALE_TTL_SECONDS)
    except RedisError:
        logger.warning("stale card of user %s: Redis unreachable", user_id)


def card_take_stale(*, bot_id: int, user_id: int) -> bool:
    """Whether the user's card was marked stale (the mark is taken: one edit fixes it)."""
    try:
        return _redis().delete(redis_keys.card_stale(bot_id, user_id)) == 1
    except RedisError:
        logger.warning("stale card of user %s: Redis unreachable", user_id)
        return False
