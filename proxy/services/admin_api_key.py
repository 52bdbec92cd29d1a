"""The admin API key (spec §6.5; seed 004 §2.6): ``admin-`` + 64 hex characters, shown once;
only its SHA-256 is stored (``runtime_settings.admin_api_key_hash``) and checks compare hashes
in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from proxy.models import RuntimeSettings
from proxy.services.runtime_settings import runtime_settings_ensure

KEY_PREFIX = "admin-"
# Longer header values are refused without hashing.
LONGEST_KEY = 256


def admin_api_key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def admin_api_key_regenerate(*, now: datetime) -> str:
    """Issue a new key (the old one stops working at once); returns it, the only time it is
    seen."""
    key = KEY_PREFIX + secrets.token_hex(32)
    runtime_settings_ensure(now=now)
    RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID).update(
        admin_api_key_hash=admin_api_key_hash(key), updated_at=now
    )
    return key


def admin_api_key_delete(*, now: datetime) -> bool:
    """Remove the key; returns whether one was set."""
    return bool(
        RuntimeSettings.objects.filter(
            id=RuntimeSettings.SINGLETON_ID, admin_api_key_hash__isnull=False
        ).update(admin_api_key_hash=None, updated_at=now)
    )


def admin_api_key_exists() -> bool:
    return RuntimeSettings.objects.filter(
        id=RuntimeSettings.SINGLETON_ID, admin_api_key_hash__isnull=False
    ).exists()


def admin_api_key_matches(key: str) -> bool:
    """Whether ``key`` is the admin API key: its SHA-256 against the stored one, compared in
    constant time (a missing key matches nothing)."""
    if not key or len(key) > LONGEST_KEY:
        return False
    stored = (
        RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID)
        .values_list("admin_api_key_hash", flat=True)
        .first()
    )
    if not stored:
        return False
    return hmac.compare_digest(admin_api_key_hash(key).encode(), stored.encode())


FINGERPRINT_LENGTH = 8


def admin_api_key_fingerprint() -> str | None:
    """The first characters of the key's SHA-256 (what ``sha256sum`` prints for it), or None
    when no key is set: tells which key is in use without showing it."""
    stored = (
        RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID)
        .values_list("admin_api_key_hash", flat=True)
        .first()
    )
    return stored[:FINGERPRINT_LENGTH] if stored else None
