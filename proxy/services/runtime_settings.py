"""The ``runtime_settings`` singleton (seed 004 §4.4): created with the spec's defaults."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from proxy.models import RotationStrategy, RuntimeSettings
from proxy.redis_keys import runtime_settings_version
from proxy.runtime_state import redis_client

# codex-proxy spec §3.4/§3.5/§4.1/§7.5 and the seed's column defaults.
RUNTIME_SETTINGS_DEFAULTS: dict[str, Any] = {
    "model_aliases_json": {},
    "refresh_margin_seconds": 3600,
    "refresh_concurrency": 2,
    "max_concurrent_per_account": 3,
    "request_interval_ms": 50,
    "rotation_strategy": RotationStrategy.SMART,
    "admin_api_key_hash": None,
    "usage_retention_days": 30,
    "ops_error_retention_days": 30,
    "bucket_retention_days": 90,
}


def runtime_settings_ensure(*, now: datetime) -> RuntimeSettings:
    """Return the singleton row, inserting it with the defaults if it does not exist yet.

    ``INSERT … ON CONFLICT DO NOTHING``: processes starting together never fail on each other
    and an existing row is never overwritten.
    """
    RuntimeSettings.objects.bulk_create(
        [
            RuntimeSettings(
                id=RuntimeSettings.SINGLETON_ID, updated_at=now, **RUNTIME_SETTINGS_DEFAULTS
            )
        ],
        ignore_conflicts=True,
    )
    return RuntimeSettings.objects.get(id=RuntimeSettings.SINGLETON_ID)


EDITABLE_FIELDS = frozenset(RUNTIME_SETTINGS_DEFAULTS) - {"admin_api_key_hash"}

# The values an operator may give each number (admin API and console alike), inclusive. Wider
# than the seed's CHECKs (> 0, >= 0) only in having a ceiling: a retention of millions of days
# would overflow the trim's date arithmetic, a refresh margin past a year refreshes on every scan.
SETTING_BOUNDS: dict[str, tuple[int, int]] = {
    "refresh_margin_seconds": (1, 365 * 86400),
    "refresh_concurrency": (1, 100),
    "max_concurrent_per_account": (1, 1000),
    "request_interval_ms": (0, 600_000),
    "usage_retention_days": (1, 3650),
    "ops_error_retention_days": (1, 3650),
    "bucket_retention_days": (1, 3650),
}


def runtime_settings_update(*, changes: dict[str, Any], now: datetime) -> RuntimeSettings:
    """Apply ``changes`` to the singleton and bump the settings version key in Redis.

    Processes may cache the settings only behind that version key, so the next request
    anywhere sees the change. Raises ValueError for a field that is not editable here and
    IntegrityError when a CHECK rejects a value (nothing is written then).
    """
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise ValueError(f"not editable: {', '.join(sorted(unknown))}")
    runtime_settings_ensure(now=now)
    RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID).update(
        **changes, updated_at=now
    )
    # After commit: a reader that sees the new version must also see the new row. Robust: the
    # row is saved by then, and a Redis outage must not turn that success into an error (the
    # failure is logged; readers see the change with the next write).
    transaction.on_commit(lambda: redis_client().incr(runtime_settings_version()), robust=True)
    return RuntimeSettings.objects.get(id=RuntimeSettings.SINGLETON_ID)
