"""Writes to ``topics``: the user ↔ forum topic binding."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Value
from django.db.models.functions import Coalesce

from bots.models import Topic, TopicStatus

_INSERT_SQL = """
insert into topics (bot_id, user_id, thread_id, title, status, created_at)
values (%s, %s, %s, %s, 'open', %s)
on conflict do nothing
returning thread_id
"""


def topic_create(*, bot_id: int, user_id: int, thread_id: int, title: str, now: datetime) -> bool:
    """Bind ``thread_id`` to the user; False when the user already has a binding.

    Two first messages of one user race to create a topic each; the unique key lets one insert
    win and the loser learns it here (it then deletes the topic it created).
    """
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_SQL, [bot_id, user_id, thread_id, title, now])
        return cursor.fetchone() is not None


def topic_delete(*, bot_id: int, user_id: int, thread_id: int) -> bool:
    """Delete the user's binding to ``thread_id`` (a topic deleted by hand in Telegram).

    Ledger rows are kept (their ``thread_id`` dangles, harmlessly); the note is lost.
    """
    deleted, _ = Topic.objects.filter(bot_id=bot_id, user_id=user_id, thread_id=thread_id).delete()
    return deleted == 1


def topic_mark_open(*, bot_id: int, thread_id: int) -> bool:
    """The topic is open again (reopened by the bot, or natively): ``closed_at`` cleared.

    False: no binding has this thread.
    """
    return (
        Topic.objects.filter(bot_id=bot_id, thread_id=thread_id).update(
            status=TopicStatus.OPEN, closed_at=None
        )
        == 1
    )


def topic_mark_closed(*, bot_id: int, thread_id: int, now: datetime) -> bool:
    """The topic is closed (natively, or by /archive); a repeated close keeps the first time.

    False: no binding has this thread.
    """
    return (
        Topic.objects.filter(bot_id=bot_id, thread_id=thread_id).update(
            status=TopicStatus.CLOSED, closed_at=Coalesce("closed_at", Value(now))
        )
        == 1
    )


def topic_set_pinned_message(*, bot_id: int, user_id: int, thread_id: int, message_id: int) -> bool:
    """Store the pinned card's message id, only if the topic has none (one card per topic)."""
    return (
        Topic.objects.filter(
            bot_id=bot_id, user_id=user_id, thread_id=thread_id, pinned_msg_id__isnull=True
        ).update(pinned_msg_id=message_id)
        == 1
    )


# The longest note kept, in Unicode code points (spec §4.3); longer notes are truncated.
NOTE_MAX_LENGTH = 500


def topic_set_note(*, bot_id: int, user_id: int, thread_id: int, note: str | None) -> str | None:
    """/note (``note`` truncated to 500 code points) or /unnote (``note`` None or empty).

    Returns the note as stored (None when cleared). The note lives on the binding: kept by
    /archive, lost with the binding (topic self-heal, /deluser).
    """
    stored = note[:NOTE_MAX_LENGTH] if note else None
    Topic.objects.filter(bot_id=bot_id, user_id=user_id, thread_id=thread_id).update(note=stored)
    return stored


def topic_clear_pinned_message(*, bot_id: int, thread_id: int, message_id: int) -> bool:
    """Forget the card ``message_id`` (deleted by /purgemsg), only while it is still the topic's
    card: a card posted meanwhile is kept."""
    return (
        Topic.objects.filter(bot_id=bot_id, thread_id=thread_id, pinned_msg_id=message_id).update(
            pinned_msg_id=None
        )
        == 1
    )
