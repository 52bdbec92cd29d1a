"""``python manage.py rebuild_buckets``: recompute request_time_buckets inside the facts' window.

cutoff = now − min(usage, ops-error retention days), floored to 15 minutes (codex-proxy spec
§7.2). Buckets from the cutoff on are deleted and recomputed from usage_records and
ops_error_logs in one transaction; older buckets (whose facts have expired) and account_usage
are never touched.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.services.buckets import bucket_start_for, buckets_rebuild


class Command(BaseCommand):
    help = (
        "Recompute request_time_buckets from usage_records and ops_error_logs (retention window)."
    )

    def handle(self, *args, **options) -> None:
        now = timezone.now()
        settings_row = runtime_settings_ensure(now=now)
        window_days = min(settings_row.usage_retention_days, settings_row.ops_error_retention_days)
        cutoff = bucket_start_for(now - timedelta(days=window_days))
        with transaction.atomic():
            result = buckets_rebuild(cutoff=cutoff, now=now)
        self.stdout.write(f"cutoff: {result.cutoff.isoformat()}")
        self.stdout.write(f"deleted: {result.deleted}")
        self.stdout.write(f"rebuilt: {result.rebuilt}")
