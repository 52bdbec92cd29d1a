"""Which conversation a request belongs to (spec §2.5): the proxy-internal local conversation
id (``lc_…``) that keys affinity (``cpr:affinity:v2:conv:<id>``) and the upstream WebSocket
pool, and the stable key that anchors it when the client sent no id of its own.

A conversation belongs to the client key that started it (issue 34): the key's id is part of
the id, so two keys sending the same ``prompt_cache_key`` (or session id, or first message)
have two conversations — neither is steered to the other's account nor shares its pooled
upstream socket.

The local conversation id is never sent upstream; the per-account pseudonyms of the client's
own ids are (``proxy.domain.upstream_request``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from proxy import identity
from proxy.domain.upstream_request import ClientIdentity

_INSTRUCTIONS_PREFIX = 2000
# Leading <system-reminder>…</system-reminder> blocks (and the space around them) change from
# turn to turn in some clients; they are not part of what identifies the conversation.
_SYSTEM_REMINDERS = re.compile(r"\A(?:\s*<system-reminder>.*?</system-reminder>)+\s*", re.DOTALL)


def _first_user_text(input_value: Any) -> str:
    if isinstance(input_value, str):
        return input_value
    if not isinstance(input_value, list):
        return ""
    for item in input_value:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    return part["text"]
        return ""
    return ""


def stable_key(body: dict) -> str:
    """SHA-256 of ``model \\0 instructions[:2000] \\0 first user text`` (leading
    system-reminder blocks stripped), formatted 8-4-4-4-12."""
    model = body.get("model") if isinstance(body.get("model"), str) else ""
    instructions = body["instructions"] if isinstance(body.get("instructions"), str) else ""
    user_text = _SYSTEM_REMINDERS.sub("", _first_user_text(body.get("input")))
    digest = hashlib.sha256(
        f"{model}\0{instructions[:_INSTRUCTIONS_PREFIX]}\0{user_text}".encode()
    ).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def local_conversation_id(body: dict, client: ClientIdentity, client_key_id: str | None) -> str:
    """``lc_`` + pseudonym(local-conversation, client key id, anchor); the anchor is the
    client's prompt_cache_key, else its session id, else its thread id, else the stable key.
    (The spec leaves the pseudonym's middle part empty; the key id there is ours.)"""
    anchor = (
        client.values.get("prompt-cache-key")
        or client.values.get("session-id")
        or client.values.get("thread-id")
        or stable_key(body)
    )
    return "lc_" + identity.pseudonym("local-conversation", client_key_id or "", anchor)
