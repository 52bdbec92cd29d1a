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
    included, replaced by U+FFFD (containers are copied). Iterative, so a value nested as deep
    as the JSON parser accepts (800 levels inside ``message``) is cleaned like any other
    instead of exceeding Python's recursion limit."""
    if not isinstance(value, dict | list):
        return _storable_leaf(value)
    root: dict | list = {} if isinstance(value, dict) else []
    pending: list[tuple[dict | list, dict | list]] = [(value, root)]
    while pending:
        source, copy = pending.pop()
        if isinstance(source, dict):
            for key, item in source.items():
                copy[_storable_leaf(key)] = _copy_of(item, pending)
        else:
            copy.extend(_copy_of(item, pending) for item in source)  # type: ignore[union-attr]
    return root


def _copy_of(item: Any, pending: list) -> Any:
    """A cleaned leaf, or an empty container queued on ``pending`` to be filled."""
    if isinstance(item, dict | list):
        copy: dict | list = {} if isinstance(item, dict) else []
        pending.append((item, copy))
        return copy
    return _storable_leaf(item)


def _storable_leaf(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE_CHARACTERS.sub(REPLACEMENT_CHARACTER, value)
    return value
