"""The frozen recipient list of a confirmed broadcast (``broadcasts.recipient_ids_json``)."""

from __future__ import annotations

import json

from bots.conf import MAX_SAFE_INTEGER
from bots.models import Broadcast


def decode_recipients(row: Broadcast) -> list[int] | None:
    """The frozen list, or None when it is not exactly ``expected_count`` positive safe
    integers in strictly ascending order (fail closed: send nothing)."""
    try:
        ids = json.loads(row.recipient_ids_json)
    except ValueError:
        return None
    if not isinstance(ids, list) or len(ids) != row.expected_count:
        return None
    previous = 0
    for user_id in ids:
        if not isinstance(user_id, int) or isinstance(user_id, bool):
            return None
        if not previous < user_id <= MAX_SAFE_INTEGER:
            return None
        previous = user_id
    return ids
