"""The upstream device fingerprint (seed 004 §4.11–§4.12): row ``current``, seeded once and
then following the Codex Desktop appcast."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction

from proxy.clients.appcast import Release
from proxy.identifiers import new_id
from proxy.models import Fingerprint, FingerprintUpdateHistory


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


@dataclass(frozen=True)
class FingerprintCheck:
    changed: bool
    app_version: str
    build_number: str


def fingerprint_update_from_release(*, release: Release, now: datetime) -> FingerprintCheck:
    """Follow the appcast's newest release (spec §2.2): when its version or build differs from
    row ``current``, update the row (``source='auto_update'``) and append a
    ``fingerprint_update_history`` row, in one transaction. New requests read the row, so they
    use the new identity at once. The Chromium version stays (it changes only with an extracted
    fingerprint of the same release, which this project does not have).
    """
    fingerprint_ensure_current(now=now)
    with transaction.atomic():
        current = Fingerprint.objects.select_for_update().get(id=Fingerprint.CURRENT_ID)
        if (current.app_version, current.build_number) == (release.version, release.build):
            return FingerprintCheck(False, current.app_version, current.build_number)
        current.app_version = release.version
        current.build_number = release.build
        current.source = "auto_update"
        current.updated_at = now
        current.save(update_fields=["app_version", "build_number", "source", "updated_at"])
        FingerprintUpdateHistory.objects.create(
            id=new_id("fpupdate"),
            current_fingerprint=current,
            app_version=release.version,
            build_number=release.build,
            chromium_version=current.chromium_version,
            source="auto_update",
            manifest_json=release.manifest(),
            created_at=now,
        )
    return FingerprintCheck(True, release.version, release.build)
