"""The deletion fence: while /wipealldata or a user's deletion runs, no forum topic is created
or replaced for the users it deletes.

Without it a message arriving mid-deletion undoes it: the user's topic is already gone in
Telegram, so the inbound path replaces it (spec §2.9) with a new topic and binding — which the
wipe's row delete then orphans (a topic nobody is bound to), or which makes a redelivered /deluser
confirm find its binding changed and leave the user's data in place. Fenced, the inbound
update is answered 500 instead (nothing is written about it), and Telegram redelivers it once
the deletion is over: the user is then a stranger and gets a fresh topic. Nothing is lost.

The fence is a Redis key with a TTL (a crashed deletion lifts it by itself): one for the whole
bot (a wipe), one per user (a deletion of that user).
"""

from __future__ import annotations

from django_redis import get_redis_connection

from bots.redis_keys import deletion_fence_all, deletion_fence_user


class DeletionInProgress(Exception):
    """The user's data is being deleted: the update waits for Telegram's redelivery."""


def _redis():
    return get_redis_connection("default")


def _key(bot_id: int, user_id: int | None) -> str:
    return deletion_fence_all(bot_id) if user_id is None else deletion_fence_user(bot_id, user_id)


def deletion_fence_raise(*, bot_id: int, user_id: int | None = None, ttl_seconds: float) -> None:
    """Fence the user (``user_id`` None: every user) for ``ttl_seconds`` from now."""
    _redis().set(_key(bot_id, user_id), "1", px=int(ttl_seconds * 1000))


def deletion_fence_lower(*, bot_id: int, user_id: int | None = None) -> None:
    _redis().delete(_key(bot_id, user_id))


def deletion_fenced(*, bot_id: int, user_id: int) -> bool:
    """Is a deletion of this user (or of everybody) running?"""
    return _redis().exists(deletion_fence_all(bot_id), deletion_fence_user(bot_id, user_id)) > 0
