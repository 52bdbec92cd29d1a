"""Every Redis key the support bot writes, built from REDIS_KEY_PREFIX (``cpr:`` in production).

The bot keeps its durable state in PostgreSQL; Redis only coordinates work across processes
(web and worker): bulk deletions, the outbound limiter, the broadcast sender.
docs/redis-keys.md lists each key with its TTL and what a FLUSHALL does to it.
"""

from __future__ import annotations

from django.conf import settings


def _prefix() -> str:
    return f"{settings.REDIS_KEY_PREFIX}bots:"


def bulk_deletion_lock(bot_id: int) -> str:
    """The one running /purgemsg or /wipealldata of a bot (its holder's token); PX while held."""
    return f"{_prefix()}bulk_deletion:{bot_id}"


def bulk_job_finished(bot_id: int, token_digest: str) -> str:
    """A bulk-deletion job that ended (its lock token's SHA-256, never the token): a late
    continuation of it stops instead of deleting what was created since."""
    return f"{_prefix()}bulk_finished:{bot_id}:{token_digest}"


def deletion_fence_all(bot_id: int) -> str:
    """A /wipealldata deletes every topic: no topic is created or replaced meanwhile."""
    return f"{_prefix()}deletion_fence:{bot_id}:all"


def deletion_fence_user(bot_id: int, user_id: int) -> str:
    """A /deluser (or the console's delete) of this user runs: no topic for them meanwhile."""
    return f"{_prefix()}deletion_fence:{bot_id}:user:{user_id}"


def wipe_decision(bot_id: int, prompt_message_id: int) -> str:
    """The first click on a /wipealldata prompt ("cancelled" or "confirmed:<callback id>")."""
    return f"{_prefix()}wipe_decision:{bot_id}:{prompt_message_id}"


def relay_refused(bot_id: int, user_id: int) -> str:
    """The user's private chat refused an admin's reply for good (blocked, deactivated): the
    note in the user's topic is posted once, until a reply reaches them again."""
    return f"{_prefix()}relay_refused:{bot_id}:{user_id}"


def card_stale(bot_id: int, user_id: int) -> str:
    """The user's names changed while no message of theirs was relayed (banned, unverified,
    over the rate limit): their pinned card is edited with the next relayed message."""
    return f"{_prefix()}card_stale:{bot_id}:{user_id}"


# ------------------------------------------------------------------ the outbound limiter


def outbound_global(bot_id: int) -> str:
    """ZSET of the bot's permits (permit id → when its call ended, or will at the latest)."""
    return f"{_prefix()}outbound:{bot_id}:global"


def outbound_next_start(bot_id: int) -> str:
    """The earliest start of the bot's next call (epoch ms): calls spread over the second."""
    return f"{_prefix()}outbound:{bot_id}:next_start"


def outbound_chat(bot_id: int, chat_id: int) -> str:
    """When the next call into ``chat_id`` may start, and the permit that set it."""
    return f"{_prefix()}outbound:{bot_id}:chat:{chat_id}"


def outbound_blocked(bot_id: int) -> str:
    """Until when nobody may call (epoch ms): the last retry_after Telegram answered."""
    return f"{_prefix()}outbound:{bot_id}:blocked"


def outbound_waiters(bot_id: int) -> str:
    """ZSET of the callers waiting for the global bucket (waiter → priority, expiry)."""
    return f"{_prefix()}outbound:{bot_id}:waiters"


def outbound_group(bot_id: int, chat_id: int) -> str:
    """ZSET of the permits into a group (permit id → when its call ended): 20 a minute."""
    return f"{_prefix()}outbound:{bot_id}:group:{chat_id}"


def outbound_chat_blocked(bot_id: int, chat_id: int) -> str:
    """Until when no message may go into ``chat_id`` (a 429 answered in that group)."""
    return f"{_prefix()}outbound:{bot_id}:chat_blocked:{chat_id}"


def outbound_chat_waiters(bot_id: int, chat_id: int) -> str:
    """ZSET of the callers waiting for ``chat_id``'s bucket (waiter → priority, expiry)."""
    return f"{_prefix()}outbound:{bot_id}:chat_waiters:{chat_id}"


# ------------------------------------------------------------------ the broadcast sender


def broadcast_sender(broadcast_id: int) -> str:
    """The one send loop of a broadcast (its holder's token)."""
    return f"{_prefix()}broadcast:{broadcast_id}:sender"


def broadcast_in_flight(broadcast_id: int) -> str:
    """The recipient index whose send is in flight (set before the call, deleted after it)."""
    return f"{_prefix()}broadcast:{broadcast_id}:in_flight"


def broadcast_unknown(broadcast_id: int) -> str:
    """How many recipients were in flight when a send loop died (their outcome is unknown)."""
    return f"{_prefix()}broadcast:{broadcast_id}:unknown"
