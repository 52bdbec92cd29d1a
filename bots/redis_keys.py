"""Every Redis key the support bot writes, built from REDIS_KEY_PREFIX (``cpr:`` in production).

The bot keeps its durable state in PostgreSQL; Redis only coordinates bulk deletions across
processes (web and worker). docs/redis-keys.md lists each key with its TTL and what a FLUSHALL
does to it.
"""

from __future__ import annotations

from django.conf import settings


def _prefix() -> str:
    return f"{settings.REDIS_KEY_PREFIX}bots:"


def bulk_deletion_lock(bot_id: int) -> str:
    """The one running /purgemsg or /wipealldata of a bot (its holder's token); PX while held."""
    return f"{_prefix()}bulk_deletion:{bot_id}"


def wipe_decision(bot_id: int, prompt_message_id: int) -> str:
    """The first click on a /wipealldata prompt ("cancelled" or "confirmed:<callback id>")."""
    return f"{_prefix()}wipe_decision:{bot_id}:{prompt_message_id}"
