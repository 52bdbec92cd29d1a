"""Text PostgreSQL cannot store, found before a write fails on it: a NUL character, or a lone
UTF-16 surrogate (JSON may spell one as ``"\\ud800"``; no UTF-8 can carry it, so neither psycopg
nor the upstream can send it). The proxy's import and admin API refuse such text with a clear
message; the ledger replaces it (``telemetry.services.ledger.storable``)."""

from __future__ import annotations

import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
NUL_CHARACTER = "a NUL character"
LONE_SURROGATE = "text that is not valid Unicode (a lone surrogate)"


def unstorable_text(text: str) -> str | None:
    """What of ``text`` PostgreSQL cannot store in a text or jsonb column, said for an error
    message (``NUL_CHARACTER`` or ``LONE_SURROGATE``; never the text itself), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return NUL_CHARACTER if found.group() == "\x00" else LONE_SURROGATE


def first_unstorable_text(value: Any) -> str | None:
    """``unstorable_text`` of the first string anywhere in ``value`` (parsed JSON, keys
    included) that has a problem, or None. Iterative: any depth."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            problem = unstorable_text(item)
            if problem is not None:
                return problem
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return None
