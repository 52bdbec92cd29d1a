"""Text from Telegram made storable in PostgreSQL.

Telegram delivers whatever a user typed, including a NUL character or half of a surrogate pair
(JSON may carry both as ``\\u`` escapes). PostgreSQL text columns accept neither, so a user
named with one would be refused by every write and never relayed. The webhook cleans the
whole update once, at the door. (The proxy's ledger has its own copy,
``telemetry.services.ledger.storable``: the bot and the proxy share no code.)
"""

from __future__ import annotations

import re
from typing import Any

_UNSTORABLE_CHARACTERS = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT_CHARACTER = "\ufffd"


def storable_update(value: Any) -> Any:
    """``value`` (a parsed update) with NUL and lone surrogates in every string, keys
    included, replaced by U+FFFD (containers are copied)."""
    if isinstance(value, str):
        return _UNSTORABLE_CHARACTERS.sub(REPLACEMENT_CHARACTER, value)
    if isinstance(value, dict):
        return {storable_update(key): storable_update(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable_update(item) for item in value]
    return value
