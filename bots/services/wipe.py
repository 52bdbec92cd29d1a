"""Writes of /wipealldata (spec §4.10): the prompt's first-click decision and removing every row
of the bot's business tables (stopping the broadcasts is ``bots.services.broadcasts``'s).

The prompt itself is stateless (its 60 s window travels in the payload); the first click on it is
recorded in Redis with one atomic script, so that a cancel and a confirm (or two admins'
confirms) cannot both win, and Telegram's redelivery of the winning confirm can carry a
half-done wipe on after the window has passed.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django_redis import get_redis_connection

from bots.models import (
    AlbumItem,
    BotUser,
    Broadcast,
    DeleteConfirmation,
    RelayedMessage,
    Topic,
)
from bots.redis_keys import wipe_decision
from common.redis_scripts import lua_script

CANCELLED = "cancelled"
CONFIRMED_BY = "confirmed:"  # + the winning callback id
# Longer than Telegram keeps redelivering an update (a day at most).
DECISION_TTL = timedelta(days=2)

# The stored decision, or the given one stored now if there was none: one atomic step.
_CLAIM = lua_script("bots", "wipe_decision_claim")


DONE = "done"  # the wipe the confirm started has ended: a redelivery of it starts nothing


def wipe_decision_done(*, bot_id: int, prompt_msg_id: int) -> None:
    """The prompt's wipe ended (wiped, refused or interrupted): a late redelivery of its confirm
    must not start another, which would delete what was created since."""
    get_redis_connection("default").set(
        wipe_decision(bot_id, prompt_msg_id), DONE, ex=int(DECISION_TTL.total_seconds())
    )


def confirmed_by(callback_id: str) -> str:
    return f"{CONFIRMED_BY}{callback_id}"


def wipe_decision_get(*, bot_id: int, prompt_msg_id: int) -> str | None:
    """The first click's decision on the prompt, or None while nobody decided."""
    value = get_redis_connection("default").get(wipe_decision(bot_id, prompt_msg_id))
    return value.decode() if value is not None else None


def wipe_decision_claim(*, bot_id: int, prompt_msg_id: int, decision: str) -> str:
    """Decide the prompt (``CANCELLED`` or ``confirmed_by(callback_id)``) unless it was decided
    already; returns the decision in force — ``decision`` itself when this call won."""
    script = get_redis_connection("default").register_script(_CLAIM)
    stored = script(
        keys=[wipe_decision(bot_id, prompt_msg_id)],
        args=[decision, int(DECISION_TTL.total_seconds())],
    )
    return stored.decode() if isinstance(stored, bytes) else str(stored)


@transaction.atomic
def bot_data_wipe(*, bot_id: int) -> None:
    """Delete every row of the bot in users, topics, messages, delete_confirmations and
    broadcasts, and the album items waiting to be relayed (settings, processed_updates and bots
    are kept). One transaction here (the
    original's D1 could not), and a repeat finds nothing more to delete."""
    RelayedMessage.objects.filter(bot_id=bot_id).delete()
    AlbumItem.objects.filter(bot_id=bot_id).delete()
    DeleteConfirmation.objects.filter(bot_id=bot_id).delete()
    Topic.objects.filter(bot_id=bot_id).delete()
    BotUser.objects.filter(bot_id=bot_id).delete()
    Broadcast.objects.filter(bot_id=bot_id).delete()
