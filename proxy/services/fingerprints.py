"""The upstream device fingerprint (seed 004 §4.11): row ``current``, seeded once."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from proxy.models import Fingerprint


def fingerprint_ensure_current(*, now: datetime) -> Fingerprint:
    """Create row ``current`` from settings.CODEX_FINGERPRINT (source ``config_seed``) if it
    does not exist; an existing row always wins (it may have been updated since)."""
    Fingerprint.objects.bulk_create(
        [
            Fingerprint(
                id=Fingerprint.CURRENT_ID,
                source="config_seed",
                created_at=now,
                updated_at=now,
                **settings.CODEX_FINGERPRINT,
            )
        ],
        ignore_conflicts=True,
    )
    return Fingerprint.objects.get(id=Fingerprint.CURRENT_ID)
