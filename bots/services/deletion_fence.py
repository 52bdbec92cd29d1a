"""The deletion fence: while /wipealldata or a user's deletion runs, the updates of the users
it deletes wait in the inbox, and no forum topic is created or replaced for them.

Without it a message arriving mid-deletion undoes it: the user's topic is already gone in
Telegram, so the inbound path replaces it (spec §2.9) with a new topic and binding — which the
wipe's row delete then orphans (a topic nobody is bound to), or which makes a redelivered /deluser
confirm find its binding changed and leave the user's data in place; or the message is relayed
into a topic the deletion is about to remove, and lost with it. Fenced, the update is given back
to the inbox (``bots.pipeline.inbox_work``: nothing of it is done, it is not counted as a
failure) and tried again every few seconds; once the deletion is over the user is a stranger
and their message comes in fresh — a new profile, a new topic, relayed once. Nothing is lost.

The fence is a Redis key with a TTL (a crashed deletion lifts it by itself): one for the whole
bot (a wipe), one per user (a deletion of that user). Topic creation checks it too (an album's
items relayed one by one by the album flush, outside the inbox).
"""

from __future__ import annotations

from django_redis import get_redis_connection

from bots.redis_keys import deletion_fence_all, deletion_fence_user


class DeletionInProgress(Exception):
    """The user's data is being deleted: the update waits in the inbox until it is over."""


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
