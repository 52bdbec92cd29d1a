"""A user's data as JSON, for the operators to hand over (or keep) before a physical delete.

/archive keeps a user's data and /deluser removes it; this export is what an operator can save
in between: the profile, the topic binding with its note, and every ledger row of the user. The
ledger holds message ids and types, never contents (the bot stores no message text); the
pending-challenge and throttle columns are the bot's own machinery, not the user's data, and
are left out.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.core.serializers.json import DjangoJSONEncoder

from bots.models import BotUser, RelayedMessage, Topic

EXPORT_FORMAT = "hodor-user-export/1"

USER_FIELDS = (
    "user_id",
    "first_name",
    "last_name",
    "username",
    "status",
    "is_banned",
    "is_risk",
    "is_verified",
    "verified_at",
    "first_seen_at",
    "last_seen_at",
)
TOPIC_FIELDS = (
    "thread_id",
    "title",
    "status",
    "note",
    "pinned_msg_id",
    "created_at",
    "closed_at",
)
MESSAGE_FIELDS = (
    "id",
    "thread_id",
    "direction",
    "content_type",
    "group_msg_id",
    "private_msg_id",
    "created_at",
)


def user_export(*, bot_id: int, user_id: int, now: datetime) -> dict | None:
    """The user's data (None: no such user), ledger rows oldest first."""
    user = BotUser.objects.filter(bot_id=bot_id, user_id=user_id).values(*USER_FIELDS).first()
    if user is None:
        return None
    topic = Topic.objects.filter(bot_id=bot_id, user_id=user_id).values(*TOPIC_FIELDS).first()
    messages = (
        RelayedMessage.objects.filter(bot_id=bot_id, user_id=user_id)
        .order_by("created_at", "id")
        .values(*MESSAGE_FIELDS)
    )
    return {
        "format": EXPORT_FORMAT,
        "exported_at": now,
        "bot_id": bot_id,
        "user": user,
        "topic": topic,
        "messages": list(messages),
    }


def export_json(export: dict) -> str:
    """The export as JSON text (timestamps ISO 8601, names as written)."""
    return json.dumps(export, cls=DjangoJSONEncoder, ensure_ascii=False, indent=2)
