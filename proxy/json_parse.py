"""JSON parsing for the request path: orjson where it gives exactly what ``json.loads`` gives,
``json.loads`` otherwise — a parse that costs less, never a different value.

orjson refuses what ``json.loads`` accepts (NaN, infinities, lone surrogates: parsed again by
``json.loads``, so accepting and refusing stay the same) and reads an integer of more than
64 bits as a float: a text with a run of 19 digits goes to ``json.loads`` from the start.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONG_DIGIT_RUN = re.compile(rb"\d{19}")


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``, faster. Raises what ``json.loads`` raises."""
    try:
        raw = data.encode() if isinstance(data, str) else data
    except UnicodeEncodeError:  # a lone surrogate in a str: json.loads takes it
        return json.loads(data)
    if _LONG_DIGIT_RUN.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)
