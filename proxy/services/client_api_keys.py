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


EDITABLE_KEY_FIELDS = frozenset({"label", "enabled"})


def client_api_key_update(*, key: ClientApiKey, changes: dict) -> ClientApiKey:
    """Change ``label`` and/or ``enabled`` (one UPDATE; a disabled key fails its next request,
    seed §4.3: every request looks the key up). Raises ValueError for other fields."""
    unknown = set(changes) - EDITABLE_KEY_FIELDS
    if unknown:
        raise ValueError(f"not editable: {', '.join(sorted(unknown))}")
    if changes:
        ClientApiKey.objects.filter(pk=key.pk).update(**changes)
        key.refresh_from_db()
    return key


def client_api_key_delete(*, ids: list[str]) -> tuple[int, list[str]]:
    """Delete the keys of ``ids``; returns (how many were deleted, the ids that did not exist).
    Their usage facts stay (no foreign key, seed §3)."""
    wanted = list(dict.fromkeys(ids))
    existing = set(ClientApiKey.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    deleted, _ = ClientApiKey.objects.filter(pk__in=existing).delete()
    return deleted, [key_id for key_id in wanted if key_id not in existing]
