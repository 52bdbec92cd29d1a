"""Client API keys (seed 004 §4.3): ``sk_`` + base64url(32 bytes), stored as issued."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime

from proxy.identifiers import new_id
from proxy.models import ClientApiKey

KEY_PREFIX_LENGTH = 12


def new_client_key() -> str:
    return "sk_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def client_api_key_create(
    *, name: str, now: datetime, label: str | None = None, enabled: bool = True
) -> ClientApiKey:
    """Issue a new key. ``prefix`` (first 12 characters) identifies it in masked lists."""
    key = new_client_key()
    return ClientApiKey.objects.create(
        id=new_id("key"),
        name=name,
        prefix=key[:KEY_PREFIX_LENGTH],
        key=key,
        label=label or None,
        enabled=enabled,
        created_at=now,
    )
